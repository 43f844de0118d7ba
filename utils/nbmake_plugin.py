"""The course's additions to nbmake's pytest plugin, for `pytest --nbmake notebooks/` (loaded by pytest.ini's
`-p utils.nbmake_plugin`; without --nbmake it does nothing):

- each lesson runs in the mode COURSE_SMOKE says (1: smoke, as CI; unset or 0: full), in a kernel configured as
  JupyterLab's (utils.execution.LessonRun), its %%solution cells run, and what it leaves running stopped;
- its executed copy is written to build/executed/<mode>/ (utils.execution.run), where the website and the
  JupyterLab check read it, and a failed copy is never reused;
- the lessons in utils.execution.MEASURING[mode] are marked `alone` (tools/run_tests.sh runs them first, one at a
  time, then the others with `-m "not alone" -n 2`), the others come longest first, and a copy executed beside
  another lesson says so (`course_run.shared`);
- the run ends with each lesson's time, slowest first.

nbmake's own options keep their meaning: `--nbmake-timeout` bounds a cell, `--nbmake-kernel` picks the kernel.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from utils import mode as course_mode

_ORIGINAL_RUN = "_course_original_notebook_run"


def pytest_addoption(parser) -> None:
    parser.getgroup("nbmake").addoption(
        "--executed-copies",
        type=Path,
        default=None,
        help="where the executed copies go, one folder per mode (default: build/executed)",
    )


def _folder(config) -> Path:
    from utils import execution

    return config.getoption("executed_copies") or execution.EXECUTED


def _mode() -> str:
    return "smoke" if course_mode.is_smoke() else "full"


def _shared(config) -> bool:
    """True in a worker of a run of several at a time (pytest-xdist's -n 2 or more)."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    return int(workers) > 1


def pytest_configure(config) -> None:
    if not config.getoption("nbmake", default=False):
        return
    config.addinivalue_line("markers", "alone: a lesson that measures times, run with nothing beside it")
    try:
        _mode()
    except ValueError as err:  # an unknown COURSE_SMOKE value: one line, not pytest's internal error
        raise pytest.UsageError(str(err)) from None
    import nbformat
    from nbmake import nb_result, pytest_items

    from utils import execution

    shared, folder = _shared(config), _folder(config)

    class CourseNotebookRun:
        """What nbmake's NotebookItem runs for each notebook: utils.execution.run, which executes it through
        nbmake's own NotebookRun and keeps the executed copy."""

        def __init__(self, filename, default_timeout, verbose=False, kernel=None, find_import_errors=False):
            self.filename, self.timeout, self.kernel = Path(filename), default_timeout, kernel or "python3"

        def execute(self):
            unreadable = _unreadable(self.filename)
            if unreadable:  # one line, not nbmake's internal error with pluggy's traceback
                return nb_result.NotebookResult(
                    nbformat.v4.new_notebook(), nb_result.NotebookError(unreadable, unreadable, 0)
                )
            result, _ = execution.run(
                self.filename, _mode(), cell_timeout=self.timeout, kernel=self.kernel, folder=folder, shared=shared
            )
            return result

    setattr(pytest_items, _ORIGINAL_RUN, pytest_items.NotebookRun)
    pytest_items.NotebookRun = CourseNotebookRun


def _unreadable(path: Path) -> str:
    """Why `path` is not a notebook nbformat can run ('' when it is one), in one line."""
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except (OSError, UnicodeDecodeError) as err:
        return f"{path}: cannot be read ({err})"
    except Exception as err:  # nbformat raises NotJSONError, ValidationError, KeyError and others
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return (
            f"{path} is not a valid notebook ({first[:200]}): restore it (a lesson: git checkout -- <file>; a copy "
            "in workspace/: python -m utils.workspace reset <its number>)"
        )
    return ""


def pytest_unconfigure(config) -> None:
    from importlib import import_module

    try:
        pytest_items = import_module("nbmake.pytest_items")
    except ImportError:
        return
    if hasattr(pytest_items, _ORIGINAL_RUN):
        pytest_items.NotebookRun = getattr(pytest_items, _ORIGINAL_RUN)
        delattr(pytest_items, _ORIGINAL_RUN)


def pytest_report_header(config) -> str | None:
    if not config.getoption("nbmake", default=False):
        return None

    return (
        f"lessons: {_mode()} mode (COURSE_SMOKE), a cell at most {config.getoption('nbmake_timeout')} s "
        f"(--nbmake-timeout), executed copies in {_folder(config) / _mode()}"
    )


def _is_notebook(item) -> bool:
    return getattr(item, "nbmake", False) is True


def pytest_collection_modifyitems(config, items) -> None:
    if not config.getoption("nbmake", default=False):
        return
    from utils import execution

    lessons = [item for item in items if _is_notebook(item)]
    for item in lessons:
        if Path(item.fspath).name in execution.MEASURING[_mode()]:
            item.add_marker(pytest.mark.alone)
    # Each of xdist's workers collects and sorts the lessons alike; worksteal deals them out in this order, and
    # execution.order plans for how it does (the measuring ones are deselected by -m "not alone" after this).
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    names = [Path(i.fspath).name for i in lessons]
    rank = {name: i for i, name in enumerate(execution.order(names, _mode(), workers))}
    items.sort(key=lambda item: rank.get(Path(item.fspath).name, -1) if _is_notebook(item) else -1)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not config.getoption("nbmake", default=False):
        return

    times = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) == "call" and str(getattr(report, "nodeid", "")).endswith(".ipynb"):
                times[report.nodeid.split("::")[0].rsplit("/", 1)[-1]] = (report.duration, report.outcome)
    if not times:
        return
    terminalreporter.write_line(f"[notebooks] durations ({_mode()} mode), slowest first:")
    for name, (seconds, outcome) in sorted(times.items(), key=lambda item: -item[1][0]):
        terminalreporter.write_line(f"  {seconds:7.1f} s  {name}  {outcome}")
    total = sum(seconds for seconds, _ in times.values())
    terminalreporter.write_line(f"  {total:7.1f} s  in all; executed copies in {_folder(config) / _mode()}")
