"""Execute lessons through nbmake and keep the executed copies: the notebook tests write them (`pytest --nbmake
notebooks/`, with utils.nbmake_plugin), the website and the JupyterLab check read them, so that a CI run executes
each lesson once.

    python -m utils.execution --mode smoke --cell-timeout 300              # every lesson, one after the other
    python -m utils.execution --mode smoke 08_capstone.ipynb               # one lesson

A copy lives in build/executed/<mode>/<lesson>.ipynb. Its metadata (`course_build`) holds the mode and the
hash of the lesson's code cells it ran (utils.course.code_hash): `ensure` reuses a copy while both still
match, and executes the lesson again otherwise; `course_run` records the machine, the date and the time it
took (the website says so on each page). Each cell's metadata keeps nbclient's timing (`execution`: when it started and
ended) and, under `course`, `first_output_s`: how many seconds after it started its first output came, and
`longest_gap_s`: its longest silence after that, to its next output or to its end, so that a long cell that shows
nothing for a while can be found (tools/check_lab.py). The notebooks in git stay without outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbmake import nb_result, nb_run

from utils import course, envinfo, processes
from utils.paths import NOTEBOOKS, REPO_ROOT

#: Where executed copies are kept, one folder per mode.
EXECUTED = REPO_ROOT / "build" / "executed"
MODES = ("smoke", "full")
#: Lessons whose verdicts or asserts rest on times they measure, by mode: a run of several lessons at a time
#: (tools/run_tests.sh: `pytest --nbmake -n 2`) executes them first, with no other lesson beside them. Lesson 03's fits refuse allreduce times that do not grow with size. In full mode, lesson
#: 04's scaling efficiency and the capstone's calibration decide their verdicts on their measured rounds. A smoke
#: run measures one round (steady.rounds), so there the verdicts use the recorded figures
#: (data/reference_figures.csv) whoever shares the machine; lesson 04's asserts on which of four parts binds each
#: profiled run held in the three runs beside other lessons so far (the bound part at least 66 % of the step time
#: the verdict reads, the next at most 30 %), and its slow-link and stop-time asserts only loosen on a busy
#: machine.
MEASURING = {
    "smoke": frozenset({"03_allreduce_cost.ipynb"}),
    "full": frozenset({"03_allreduce_cost.ipynb", "04_horovod.ipynb", "08_capstone.ipynb"}),
}
#: Every process a lesson's kernel starts inherits this mark; whatever still carries it when the lesson ends
#: (workers of a cell stopped at its time limit) is stopped before the next lesson starts.
MARK = "COURSE_LESSON_RUN"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def kernel_config():
    """The kernel manager's settings for executing a lesson, as tools/setup_env.sh gives JupyterLab's:
    CurveZMQ-encrypted sockets where the kernelspec declares support, so that no kernel starts with "Kernel is
    running over TCP without encryption" (left as it was where this pyzmq has no CurveZMQ)."""
    import zmq
    from traitlets.config import Config

    return Config({"KernelManager": {"transport_encryption": "auto" if zmq.has("curve") else "disabled"}})


@dataclass
class LessonFailed(Exception):
    """A lesson stopped at a cell: an error it raised, or a cell that ran past its time limit."""

    notebook: str
    cell: int  # index in the notebook's cells, from 0
    count: int  # number of cells in the notebook
    cell_id: str
    summary: str
    detail: str
    copy: Path

    def __str__(self) -> str:
        return (
            f"{self.notebook}: cell {self.cell + 1} of {self.count} (id {self.cell_id}) failed: {self.summary}\n"
            f"{self.detail}\nThe copy executed up to that cell: {self.copy}"
        )


def copy_path(notebook: str, mode: str, folder: Path = EXECUTED) -> Path:
    """Where the executed copy of a lesson in a mode is kept."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {MODES}: use 'smoke' (as CI) or 'full' (as a learner)")
    return folder / mode / notebook


def stamp(source: Path, mode: str) -> str:
    """What an executed copy records of what produced it: the mode and the lesson's code hash."""
    return f"{mode}:{course.code_hash(source)}"


def is_current(notebook: str, mode: str, folder: Path = EXECUTED, source_dir: Path = NOTEBOOKS) -> bool:
    """True when the lesson has an executed copy in this mode made from its code as it is now."""
    path = copy_path(notebook, mode, folder)
    if not path.is_file():
        return False
    meta = nbformat.read(path, as_version=4).metadata
    return meta.get("course_build") == stamp(source_dir / notebook, mode) and "course_run" in meta


#: The kernel's messages that put something under a running cell.
OUTPUT_MESSAGES = frozenset({"stream", "display_data", "execute_result", "error"})


def note_first_output(msg: dict, cell, started: dict[int, dt.datetime], index: int) -> None:
    """Record in cell.metadata["course"]["first_output_s"] the seconds from the cell's start (its execute_input message)
    to its first output, both as the kernel dated them; `started` holds each running cell's start by index."""
    date = msg.get("header", {}).get("date")
    if not isinstance(date, dt.datetime):
        return
    kind = msg.get("msg_type")
    if kind == "execute_input":
        started[index] = date
    elif kind in OUTPUT_MESSAGES and index in started:
        seconds = round((date - started[index]).total_seconds(), 3)
        cell.metadata.setdefault("course", {}).setdefault("first_output_s", seconds)


#: What changes what a running cell shows: an output, or an update of one it displayed (a progress display).
SHOWN_MESSAGES = OUTPUT_MESSAGES | {"update_display_data"}


@dataclass
class Silence:
    """A running cell's timing for note_gaps: when it started, when it last showed something, its longest silence."""

    started: dt.datetime
    last: dt.datetime | None = None
    longest: float = 0.0


def note_gaps(msg: dict, cell, running: dict[int, Silence], index: int) -> None:
    """Record in cell.metadata["course"]["longest_gap_s"] (seconds, one decimal) the cell's longest silence after its
    first output: between two outputs, or from its last output to its end (its idle status); for a cell that showed
    nothing, its whole run. Each of the kernel's messages is timed as the kernel dated it, whether or not the notebook
    merges it into the output before (consecutive stream writes); a write of no text shows nothing and does not
    count. `running` holds the timing of each running cell by index, and forgets it when the cell ends."""
    date = msg.get("header", {}).get("date")
    if not isinstance(date, dt.datetime):
        return
    kind, content = msg.get("msg_type"), msg.get("content") or {}
    if kind == "execute_input":
        running[index] = Silence(date)
        return
    timing = running.get(index)
    if timing is None:
        return
    if kind in SHOWN_MESSAGES and not (kind == "stream" and not content.get("text")):
        if timing.last is not None:
            timing.longest = max(timing.longest, (date - timing.last).total_seconds())
        timing.last = date
    elif kind == "status" and content.get("execution_state") == "idle":
        del running[index]
        since = timing.last or timing.started
        longest = max(timing.longest, (date - since).total_seconds())
        cell.metadata.setdefault("course", {})["longest_gap_s"] = round(longest, 1)


def recording_client():
    """nbclient's NotebookClient, as a class that also notes when each cell's first output came (note_first_output)
    and its longest silence after it (note_gaps), for tools/check_lab.py to read from the executed copy."""
    from nbclient import NotebookClient

    class RecordingClient(NotebookClient):
        def __init__(self, nb, **kwargs):
            super().__init__(nb, **kwargs)
            self.started: dict[int, dt.datetime] = {}
            self.running: dict[int, Silence] = {}

        def process_message(self, msg, cell, cell_index):
            note_first_output(msg, cell, self.started, cell_index)
            note_gaps(msg, cell, self.running, cell_index)
            return super().process_message(msg, cell, cell_index)

    return RecordingClient


class LessonRun(nb_run.NotebookRun):
    """nbmake's run of one notebook (`nbmake.nb_run.NotebookRun`: a fresh kernel, the notebook's folder as working
    folder, a time limit per cell, the failing cell found), with the kernel manager's settings of kernel_config():
    nbmake builds its nbclient `NotebookClient` with no configuration, so the class it builds is replaced for the
    length of one run by recording_client()'s, given our configuration."""

    def execute(self) -> nb_result.NotebookResult:
        config = kernel_config()
        recording = recording_client()

        class ConfiguredClient(recording):
            def __init__(self, nb, **kwargs):
                super().__init__(nb, config=config, **kwargs)

        original, nb_run.NotebookClient = nb_run.NotebookClient, ConfiguredClient
        try:
            return super().execute()
        finally:
            nb_run.NotebookClient = original


@contextlib.contextmanager
def lesson_environment(notebook: str, mode: str):
    """The variables a lesson's kernel inherits for one run (nbmake starts the kernel with this process's
    environment): the mode, every %%solution cell run, no CUDA-probe lines, and a MARK its processes carry, so that
    what it leaves running is stopped when it ends. Yields the mark; the environment is restored afterwards."""
    values = {
        "COURSE_SMOKE": "1" if mode == "smoke" else "0",
        "COURSE_SOLUTIONS": "run",  # every %%solution cell runs, so that each solution is checked
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        MARK: f"{notebook}:{os.getpid()}:{time.time_ns()}",
    }
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield values[MARK]
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run(
    source: Path,
    mode: str,
    *,
    cell_timeout: int = 1800,
    kernel: str | None = "python3",
    folder: Path = EXECUTED,
    shared: bool = False,
) -> tuple[nb_result.NotebookResult, float]:
    """Execute the lesson `source` top to bottom through nbmake (LessonRun) in `mode` and write its executed copy;
    return nbmake's result and the seconds it took. A failed run's copy is written up to the cell that failed and
    marked so that it is never reused (its error names that cell)."""
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist: give a lesson's file name from {source.parent}")
    notebook = source.name
    built = stamp(source, mode)  # the code as it was read: an edit during the run must not make this copy current
    with lesson_environment(notebook, mode) as mark:
        start = time.perf_counter()
        try:
            result = LessonRun(source, cell_timeout, kernel=kernel).execute()
        finally:
            stop_leftovers(notebook, mark)
        seconds = time.perf_counter() - start
    nb = result.nb
    dest = copy_path(notebook, mode, folder)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if result.error is None:
        nb.metadata["course_build"] = built
        nb.metadata["course_run"] = run_record(mode, seconds, shared)
    else:
        nb.metadata["course_build"] = f"failed:{built}"
        error = result.error
        summary = _ANSI.sub("", error.summary).strip()
        if "timed out" in summary:
            summary = f"it ran past the limit of {cell_timeout} s for one cell"
        where = f"cell {error.failing_cell_index + 1} of {len(nb.cells)}" if error.failing_cell_index >= 0 else "a cell"
        error.summary = summary
        error.trace = (
            f"{notebook}: {where} failed: {summary}\n{_ANSI.sub('', error.trace).strip()}\n"
            f"The copy executed up to that cell: {dest}"
        )
    nbformat.write(nb, dest)
    return result, seconds


def execute(
    notebook: str,
    mode: str,
    *,
    cell_timeout: int = 1800,
    folder: Path = EXECUTED,
    source_dir: Path = NOTEBOOKS,
    shared: bool = False,
) -> float:
    """Execute a lesson top to bottom in a fresh kernel (its working folder: the notebook's own) and write the
    executed copy; return the seconds it took. Raise LessonFailed naming the cell that failed or ran past
    cell_timeout seconds; the copy is then written up to that cell and marked so that it is never reused."""
    source = source_dir / notebook
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist: give a lesson's file name from {source_dir}")
    result, seconds = run(source, mode, cell_timeout=cell_timeout, folder=folder, shared=shared)
    error = result.error
    if error is not None:
        index, cells = error.failing_cell_index, result.nb.cells
        cell_id = cells[index].get("id", "?") if 0 <= index < len(cells) else "?"
        trace = error.trace.split("\n", 1)[1].rsplit("\n", 1)[0]  # without the header and the copy's path
        raise LessonFailed(
            notebook, index, len(cells), cell_id, error.summary, trace, copy_path(notebook, mode, folder)
        )
    return seconds


def run_record(mode: str, seconds: float, shared: bool = False) -> dict[str, str | float | bool]:
    """What an executed copy says of its run: the mode, the machine, the TensorFlow version, the date, the time,
    and whether another lesson ran beside it."""
    cpu = envinfo.cpu_info()
    return {
        "mode": mode,
        "machine": f"{cpu.model}, {cpu.usable_cores} usable cores",
        "tensorflow": envinfo.versions()["TensorFlow"] or "not installed",
        "date": dt.date.today().isoformat(),
        "seconds": round(seconds, 1),
        "shared": shared,  # executed beside another lesson: its time is not its own
    }


def stop_leftovers(notebook: str, mark: str) -> None:
    """Stop the processes a lesson's kernel started and left running (they carry its MARK)."""
    done, still = processes.stop_marked(MARK, mark)
    if done:
        print(f"[notebooks] {notebook}: stopped {done} process(es) the lesson left running", flush=True)
    if still:
        print(f"[notebooks] {notebook}: could not stop PIDs {sorted(p.pid for p in still)}", file=sys.stderr)


def ensure(
    notebook: str,
    mode: str,
    *,
    cell_timeout: int = 1800,
    folder: Path = EXECUTED,
    source_dir: Path = NOTEBOOKS,
) -> tuple[Path, float | None]:
    """The executed copy of a lesson, executing it only when there is no current one; returns the copy's path
    and the seconds spent executing (None when a current copy was reused)."""
    if is_current(notebook, mode, folder, source_dir):
        return copy_path(notebook, mode, folder), None
    seconds = execute(notebook, mode, cell_timeout=cell_timeout, folder=folder, source_dir=source_dir)
    return copy_path(notebook, mode, folder), seconds


def order(names: list[str], mode: str, workers: int = 1) -> list[str]:
    """The order a run executes lessons in: those in MEASURING[mode] first (a run of several at a time gives them
    the machine alone: utils.nbmake_plugin), then the others, longest first by their measured durations in that mode.

    With `workers` > 1 (pytest-xdist's worksteal, as `make test` runs the lessons), the others come as one run of
    lessons per worker, each longest first: worksteal hands the first worker the first n // workers of the n lessons,
    the next n // (workers - 1) of the rest, and so on, and a worker takes lessons from the tail of another's only once
    it has started its own last one. The lessons are dealt out longest first, each to the worker whose lessons add up
    to the least so far and that has room, so that the workers end close together: with the longest first in one list,
    the first worker got the four longest and ran on alone for minutes after the other had finished."""
    seconds = {r["notebook"]: float(r["seconds"]) for r in course.read_durations() if r["mode"] == mode}
    ranked = sorted(names, key=lambda n: (n not in MEASURING[mode], -seconds.get(n, 0.0)))
    first = [n for n in ranked if n in MEASURING[mode]]
    rest = ranked[len(first) :]
    if workers <= 1 or len(rest) <= workers:
        return ranked
    room, left = [], len(rest)
    for i in range(workers):  # worksteal's first share of each worker
        room.append(left // (workers - i))
        left -= room[-1]
    runs: list[list[str]] = [[] for _ in range(workers)]
    totals = [0.0] * workers
    for name in rest:  # longest first
        w = min((w for w in range(workers) if len(runs[w]) < room[w]), key=lambda w: totals[w])
        runs[w].append(name)
        totals[w] += seconds.get(name, 0.0)
    return first + [name for run in runs for name in run]


def main(argv: list[str] | None = None) -> int:
    """Execute the named lessons (default: every lesson); print each one's time; 1 if any failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--cell-timeout", type=int, default=1800, help="seconds one cell may run")
    parser.add_argument("--folder", type=Path, default=EXECUTED, help="where the executed copies go")
    parser.add_argument("--source", type=Path, default=NOTEBOOKS, help="the folder of the lessons")
    parser.add_argument("notebooks", nargs="*", help="file names in notebooks/ (default: every lesson)")
    args = parser.parse_args(argv)
    names = args.notebooks or [lesson.notebook for lesson in course.lessons(args.source)]
    missing = [name for name in names if not (args.source / name).is_file()]
    if missing:
        parser.error(
            f"no lesson named {', '.join(missing)} in {args.source}: give file names such as 00_start_here.ipynb"
        )
    times: dict[str, float] = {}
    failed: list[str] = []
    for name in names:
        start = time.perf_counter()
        print(f"[notebooks] {name} ({args.mode}) ...", flush=True)
        try:
            execute(name, args.mode, cell_timeout=args.cell_timeout, folder=args.folder, source_dir=args.source)
            print(f"[notebooks] {name}: passed in {time.perf_counter() - start:.0f} s", flush=True)
        except LessonFailed as err:
            print(f"[notebooks] FAILED {err}", file=sys.stderr, flush=True)
            failed.append(f"{name}, cell {err.cell + 1} (id {err.cell_id}): {err.summary}")
        times[name] = time.perf_counter() - start
    print(f"[notebooks] durations ({args.mode} mode), slowest first:")
    for name, seconds in sorted(times.items(), key=lambda item: -item[1]):
        print(f"  {seconds:7.1f} s  {name}")
    print(f"  {sum(times.values()):7.1f} s  in all; executed copies in {args.folder / args.mode}")
    if failed:
        print("[notebooks] ERROR: failed:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
