# Distributed training with TensorFlow, Horovod and Amazon SageMaker
#   make lab    create/update the environment (.venv) and open the course in JupyterLab
#   make test   create/update the environment, lint, run the unit tests and execute every notebook
# Options: PYTHON=/path/to/python3.11   TF_PACKAGE='tensorflow[and-cuda]' (GPU machines)
SHELL := /bin/bash
VENV := .venv
export PYTHON
export TF_PACKAGE
# The kernelspec registered inside .venv comes first, whatever other kernels the machine has.
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
# Jupyter refuses to run as root without this flag (containers often run as root).
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: lab test env horovod unit notebooks lint format durations clean-env

env:
	@bash tools/setup_env.sh

lab: env
	$(VENV)/bin/jupyter lab $(LAB_FLAGS) --notebook-dir=$(CURDIR) notebooks/00_start_here.ipynb

test: env
	@bash tools/run_tests.sh all

unit: env
	@bash tools/run_tests.sh unit

notebooks: env
	@bash tools/run_tests.sh notebooks

# ruff: lint and format checks (settings in pyproject.toml); `make format` rewrites the files.
lint: env
	@bash tools/run_tests.sh lint

format: env
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Re-time every lesson in full and smoke mode into data/notebook_durations.csv (about 15 minutes).
durations: env
	$(VENV)/bin/python tools/time_notebooks.py --mode full
	$(VENV)/bin/python tools/time_notebooks.py --mode smoke

# Rebuild or re-check Horovod alone (uses the cached wheel when there is one).
horovod: env
	@bash tools/build_horovod.sh $(VENV)/bin/python

clean-env:
	rm -rf $(VENV)
