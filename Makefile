# Distributed training with TensorFlow, Horovod and Amazon SageMaker
#   make lab    create/update the environment (.venv), copy the lessons into workspace/ (yours to edit and run)
#               and open them in JupyterLab
#   make update    get the course's latest version (git pull) and merge its changes into your workspace/ copies
#   make test   create/update the environment, lint, run the unit tests and execute every notebook
#   make site   the course as a website in build/site/html (lessons executed in smoke mode; SITE_MODE=full is
#               the published build)
#   make lab-check   every lesson's executed copy (from make test) opened in JupyterLab in headless Chromium
#   make wheelhouse   every pinned package and the Horovod wheel in wheelhouse/, for machines with no network
#   make noroot-check   (as root) the set-up from a fresh clone as a user with no root and no apt-get, then lessons
#               03, 04 and 07 in smoke mode as that user, failing on any section they skip that the root path runs
# Options: PYTHON=/path/to/python3.11   TF_PACKAGE=tensorflow-cpu|'tensorflow[and-cuda]' (default: TensorFlow's GPU
#          build where `nvidia-smi -L` lists a GPU, else the CPU build; `bash tools/setup_env.sh --print-tf-package`)
#          WHEELHOUSE=/path/to/wheelhouse   install from it, with no package index (default: wheelhouse/
#          when a complete one is there)
SHELL := /bin/bash
VENV := .venv
WHEELHOUSE ?= $(if $(wildcard $(CURDIR)/wheelhouse/COMPLETE),$(CURDIR)/wheelhouse,)
export PYTHON
export TF_PACKAGE
export WHEELHOUSE
# The kernelspec registered inside .venv comes first, whatever other kernels the machine has.
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
# Jupyter refuses to run as root without this flag (containers often run as root).
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: noroot-check lab update test env horovod unit notebooks lint format durations instructor-page wheelhouse test-setup site site-check lab-check image-check clean-env

env:
	@bash tools/setup_env.sh

# JupyterLab opens the learner's copies in workspace/ (ignored by git), so that `git pull` never meets a lesson
# they ran or edited; utils/workspace.py merges the course's updates into those copies. A lesson that cannot be
# synced is named and left as it is, and JupyterLab opens all the same. Where the environment cannot take the
# course's new pins (no network) but the one there runs JupyterLab, JupyterLab opens on it, with a warning.
# The address JupyterLab prints (and opens, where it finds a browser) leads to the learner's copy of lesson 00
# (to workspace/ while there is none), not to the Launcher. The course's settings overrides
# (tools/jupyterlab_overrides.json: no "official Jupyter news?" prompt) go where this environment's JupyterLab reads
# them, beside any of the learner's own (overrides.json); tools/check_lab.py gives its server the same file.
LESSON_00 := workspace/00_start_here.ipynb
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d
lab:
	@bash tools/setup_env.sh || { $(VENV)/bin/python -c 'import jupyterlab' 2>/dev/null \
	  && echo "[lab] WARNING: the environment could not be updated (above): JupyterLab opens on the one you have; run make env again when the network (or a wheelhouse) is back" >&2; } || exit 1
	$(VENV)/bin/python -m utils.workspace sync || echo "[lab] the lessons could not be synced (above): JupyterLab opens all the same" >&2
	@mkdir -p $(LAB_OVERRIDES) && cp tools/jupyterlab_overrides.json $(LAB_OVERRIDES)/course.json \
	  || echo "[lab] the course's JupyterLab settings could not be written (above): JupyterLab opens with its own" >&2
	$(VENV)/bin/jupyter lab $(LAB_FLAGS) --notebook-dir=$(CURDIR) \
	  --LabApp.default_url=/lab/tree/$$([ -f $(LESSON_00) ] && echo $(LESSON_00) || echo workspace)

# The lessons are merged even where the environment cannot take the course's new pins (the old one still runs them).
update:
	@git pull --ff-only || { echo "[update] git pull stopped (above); your workspace/ is untouched. If you made commits of your own: git pull --rebase, then make update. If it names files in notebooks/ you changed: copy them into workspace/, then git checkout -- notebooks/ and make update." >&2; exit 1; }
	@if [ -x $(VENV)/bin/python ]; then \
	  env_ok=1; bash tools/setup_env.sh || env_ok=0; \
	  $(VENV)/bin/python -m utils.workspace sync || exit 1; \
	  if [ $$env_ok = 0 ]; then echo "[update] WARNING: your lessons are merged, but the environment could not take the course's new pins (above): make lab still opens JupyterLab on the environment you have; run make env when the network (or a wheelhouse) is back" >&2; exit 1; fi; \
	  else echo "[update] no environment yet: make lab creates it and your workspace"; fi

test: env
	@bash tools/run_tests.sh all

unit: env
	@bash tools/run_tests.sh unit

notebooks: env
	@bash tools/run_tests.sh notebooks

# ruff: lint and format checks (settings in pyproject.toml); `make format` rewrites the files (notebooks with
# something to strip: without it, in the layout JupyterLab saves; the others are left as they are).
lint: env
	@bash tools/run_tests.sh lint

format: env
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/python -m nbstripout --keep-id notebooks/*.ipynb

# Re-time every lesson in full and smoke mode into data/notebook_durations.csv (full mode alone: 75 minutes on a
# 2-core machine), measure a JupyterLab server's memory (data/jupyterlab_memory.csv), and rewrite the instructor's
# page from the figures.
durations: env
	$(VENV)/bin/python tools/time_notebooks.py --jupyterlab --mode full
	$(VENV)/bin/python tools/time_notebooks.py --mode smoke
	$(VENV)/bin/python tools/instructor_page.py

# docs/instructor.md from the measured figures (a test checks that it is current).
instructor-page: env
	$(VENV)/bin/python tools/instructor_page.py

# Every pinned package (TensorFlow as this platform's wheel) and the Horovod wheel, in wheelhouse/ (git-ignored).
wheelhouse: env
	@bash tools/wheelhouse.sh $(CURDIR)/wheelhouse

# A SageMaker notebook instance's set-up (no root, no apt-get), replayed here as an unprivileged user; not part of
# `make test`. Uncached, it compiles Horovod and SimGrid (docs/notebook_instance.md gives its times); CI runs it
# beside make test with NOROOT_SETUP_NICE=19, so that those compiles take only the CPU make test leaves idle
# (NOROOT_CACHED_ONLY=1 compiles neither and says NOT CHECKED where the user's builds are not cached).
noroot-check:
	@bash tools/noroot_check.sh

# The slow set-up tests: SageMaker lifecycle first and second start, and an environment from a fresh wheelhouse
# with no package index (several minutes and about 1.3 GB of downloads; not part of `make test`).
test-setup: env
	COURSE_SETUP_TESTS=1 $(VENV)/bin/python -m pytest tests/test_lifecycle.py tests/test_wheelhouse.py -v -s -p no:cacheprovider

# The course website: lessons executed (SITE_MODE=smoke by default, or full) and built with Jupyter Book 1
# into build/site/html; site-check opens every page in headless Chromium and fails on what a reader would see.
SITE_MODE ?= smoke
site: env
	$(VENV)/bin/python tools/build_site.py --mode $(SITE_MODE)

site-check: env
	$(VENV)/bin/python tools/check_site.py

# The lessons as a learner sees them: each lesson's executed copy (written by make test, or make site) opened in
# this environment's JupyterLab in headless Chromium; fails on Markdown garbled by math rendering, error outputs
# and stderr the course does not mean to show (screenshots of failing cells in build/lab-check). LAB_MODE=full
# checks the copies of a full-mode site build.
LAB_MODE ?= smoke
lab-check: env
	$(VENV)/bin/python tools/check_lab.py --mode $(LAB_MODE)

# Rebuild or re-check Horovod alone (uses the cached wheel when there is one; always runs the 2-rank checks).
horovod: env
	@COURSE_RECHECK_HOROVOD=1 bash tools/build_horovod.sh $(VENV)/bin/python

# docker/horovod/Dockerfile's Horovod build (GPU flags, NCCL, MPI) replayed on this machine without Docker, on the
# image's versions (Python 3.12, TensorFlow 2.21); the differences from the real image are in docker/horovod/README.md.
# Needs no course environment; the first run downloads about 1 GB and compiles for a few minutes, later runs use the
# cache (tools/image_check.py says where).
image-check:
	@python3 tools/image_check.py

# The git filter runs the environment's nbstripout: it goes with the environment (make env puts it back).
clean-env:
	-$(VENV)/bin/python -m nbstripout --uninstall 2>/dev/null
	rm -rf $(VENV)
