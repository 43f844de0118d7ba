"""Where the course's files are: the repository, its data, lessons, scripts and tools."""

from __future__ import annotations

from pathlib import Path

#: Root of the course repository (the folder that holds `notebooks/`, `utils/`, `data/`).
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Data files, each with its source in data/README.md.
DATA = REPO_ROOT / "data"
#: The lesson notebooks.
NOTEBOOKS = REPO_ROOT / "notebooks"
#: Training scripts and workers that the lessons show and launch.
SCRIPTS = REPO_ROOT / "scripts"
#: Small worker programs the lessons launch to demonstrate one thing each.
WORKERS = SCRIPTS / "workers"
#: Environment, build, test and measurement programs (not part of a lesson).
TOOLS = REPO_ROOT / "tools"
#: Scratch outputs of runs (ignored by git).
RUNS = REPO_ROOT / "runs"
