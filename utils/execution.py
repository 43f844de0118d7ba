"""Execute lessons and keep the executed copies: the notebook tests write them, the website and the
JupyterLab check read them, so that a CI run executes each lesson once.

    python -m utils.execution --mode smoke --cell-timeout 300              # every lesson
    python -m utils.execution --mode smoke 08_capstone.ipynb               # one lesson

A copy lives in build/executed/<mode>/<lesson>.ipynb. Its metadata (`course_build`) holds the mode and the
hash of the lesson's code cells it ran (utils.course.code_hash): `ensure` reuses a copy while both still
match, and executes the lesson again otherwise; `course_run` records the machine, the date and the time it
took (the website says so on each page). The notebooks in git stay without outputs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from utils import course, envinfo, processes
from utils.paths import NOTEBOOKS, REPO_ROOT

#: Where executed copies are kept, one folder per mode.
EXECUTED = REPO_ROOT / "build" / "executed"
MODES = ("smoke", "full")
#: Lessons whose verdicts or asserts rest on times they measure, by mode: `--jobs 2` executes them with no other
#: lesson beside them. Lesson 03's fits refuse allreduce times that do not grow with size. In full mode, lesson
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
#: Set for a lesson executed beside others (`--jobs 2`): its copy's `course_run` says so (`shared`).
SHARED_VAR = "COURSE_SHARED_MACHINE"
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
    import nbformat

    path = copy_path(notebook, mode, folder)
    if not path.is_file():
        return False
    meta = nbformat.read(path, as_version=4).metadata
    return meta.get("course_build") == stamp(source_dir / notebook, mode) and "course_run" in meta


def execute(
    notebook: str,
    mode: str,
    *,
    cell_timeout: int = 1800,
    folder: Path = EXECUTED,
    source_dir: Path = NOTEBOOKS,
) -> float:
    """Execute a lesson top to bottom in a fresh kernel (its working folder: the notebook's own) and write the
    executed copy; return the seconds it took. Raise LessonFailed naming the cell that failed or ran past
    cell_timeout seconds; the copy is then written up to that cell and marked so that it is never reused."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    source = source_dir / notebook
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist: give a lesson's file name from {source_dir}")
    nb = nbformat.read(source, as_version=4)
    built = stamp(source, mode)  # the code as it was read: an edit during the run must not make this copy current
    current = {"index": 0}

    def on_cell_execute(cell, cell_index: int) -> None:
        current["index"] = cell_index

    client = NotebookClient(
        nb, timeout=cell_timeout, kernel_name="python3", on_cell_execute=on_cell_execute, config=kernel_config()
    )
    env = {**os.environ, "COURSE_SMOKE": "1" if mode == "smoke" else "0"}
    env["COURSE_SOLUTIONS"] = "run"  # every %%solution cell runs, so that each solution is checked
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no CUDA-probe lines in the outputs
    env[MARK] = f"{notebook}:{os.getpid()}:{time.time_ns()}"
    dest = copy_path(notebook, mode, folder)
    dest.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        client.execute(cwd=str(source.parent), env=env)
    except (CellExecutionError, CellTimeoutError) as err:
        stop_leftovers(notebook, env[MARK])
        nb.metadata["course_build"] = f"failed:{built}"
        nbformat.write(nb, dest)
        index = current["index"]
        cell = nb.cells[index]
        if isinstance(err, CellTimeoutError):
            summary = f"it ran past the limit of {cell_timeout} s for one cell"
        else:
            summary = f"{err.ename}: {_ANSI.sub('', str(err.evalue))}"
        detail = _ANSI.sub("", str(err)).strip()
        raise LessonFailed(notebook, index, len(nb.cells), cell.get("id", "?"), summary, detail, dest) from None
    seconds = time.perf_counter() - start
    stop_leftovers(notebook, env[MARK])
    nb.metadata["course_build"] = built
    nb.metadata["course_run"] = run_record(mode, seconds)
    nbformat.write(nb, dest)
    return seconds


def run_record(mode: str, seconds: float) -> dict[str, str | float | bool]:
    """What an executed copy says of its run: the mode, the machine, the TensorFlow version, the date, the time,
    and whether another lesson ran beside it."""
    cpu = envinfo.cpu_info()
    return {
        "mode": mode,
        "machine": f"{cpu.model}, {cpu.usable_cores} usable cores",
        "tensorflow": envinfo.versions()["TensorFlow"] or "not installed",
        "date": dt.date.today().isoformat(),
        "seconds": round(seconds, 1),
        "shared": os.environ.get(SHARED_VAR) == "1",  # executed beside another lesson: its time is not its own
    }


def stop_leftovers(notebook: str, mark: str) -> None:
    """Stop the processes a lesson's kernel started and left running (they carry its MARK)."""
    left = processes.marked(MARK, mark)
    if left:
        still = processes.stop(left)
        print(
            f"[notebooks] {notebook}: stopped {len(left) - len(still)} process(es) the lesson left running", flush=True
        )
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


def schedule(names: list[str], jobs: int, mode: str) -> list[list[str]]:
    """The order of a run of `jobs` lessons at a time in `mode`: each lesson in MEASURING[mode] alone, first; then
    the others, longest first by their measured durations in that mode, each starting as soon as a slot is free.
    Returns the groups as they are started: a one-lesson group runs alone, the lessons of a larger group share the
    machine."""
    if jobs <= 1:
        return [[name] for name in names]
    measuring = MEASURING[mode]
    alone = [[name] for name in names if name in measuring]
    seconds = {r["notebook"]: float(r["seconds"]) for r in course.read_durations() if r["mode"] == mode}
    rest = sorted((n for n in names if n not in measuring), key=lambda n: -seconds.get(n, 0.0))
    return alone + ([rest] if rest else [])


def _run_group(
    group: list[str], jobs: int, mode: str, cell_timeout: int, folder: Path, source: Path
) -> dict[str, tuple[str | None, float]]:
    """Execute a group of lessons, at most `jobs` at a time, each in its own process (`python -m utils.execution`);
    print each one's output when it ends. Returns {lesson: (None if it passed, else its failure in one line,
    seconds)}."""
    import subprocess
    import tempfile

    results: dict[str, tuple[str | None, float]] = {}
    waiting, running = list(group), []
    with tempfile.TemporaryDirectory(prefix="course-lessons-") as logs:
        while waiting or running:
            while waiting and len(running) < jobs:
                name = waiting.pop(0)
                log = open(Path(logs) / f"{name}.log", "w+")  # closed when the lesson ends
                command = [sys.executable, "-m", "utils.execution", "--mode", mode, "--cell-timeout", str(cell_timeout)]
                command += ["--folder", str(folder), "--source", str(source), name]
                env = {**os.environ, SHARED_VAR: "1"} if len(group) > 1 else None  # said in the copy's course_run
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
                running.append((name, proc, log, time.perf_counter()))
                print(f"[notebooks] {name} ({mode}) started beside {len(running) - 1} other(s) ...", flush=True)
            time.sleep(0.5)
            for entry in [e for e in running if e[1].poll() is not None]:
                name, proc, log, began = entry
                running.remove(entry)
                log.seek(0)
                output = log.read()
                log.close()
                # the lesson's own lines; its one-lesson summary is left out (the run's summary follows at the end)
                summary = output.find("[notebooks] durations")
                output = output[:summary] if summary >= 0 and proc.returncode == 0 else output
                print(output, end="" if output.endswith("\n") else "\n", flush=True)
                failed = [ln for ln in output.splitlines() if ln.startswith(f"  {name}, cell ")]
                failure = failed[0].strip() if failed else f"{name}: exit {proc.returncode}"
                results[name] = (None if proc.returncode == 0 else failure, time.perf_counter() - began)
    return results


def main(argv: list[str] | None = None) -> int:
    """Execute the named lessons (default: every lesson); print each one's time; 1 if any failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--cell-timeout", type=int, default=1800, help="seconds one cell may run")
    parser.add_argument("--folder", type=Path, default=EXECUTED, help="where the executed copies go")
    parser.add_argument("--source", type=Path, default=NOTEBOOKS, help="the folder of the lessons")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="lessons executed at a time (default 1, in order); with 2, the lessons in MEASURING[mode] still run alone",
    )
    parser.add_argument("notebooks", nargs="*", help="file names in notebooks/ (default: every lesson)")
    args = parser.parse_args(argv)
    names = args.notebooks or [lesson.notebook for lesson in course.lessons(args.source)]
    missing = [name for name in names if not (args.source / name).is_file()]
    if missing:
        parser.error(
            f"no lesson named {', '.join(missing)} in {args.source}: give file names such as 00_start_here.ipynb"
        )
    if args.jobs < 1:
        parser.error(f"--jobs must be 1 or more, got {args.jobs}")
    times: dict[str, float] = {}
    failed: list[str] = []
    for group in schedule(names, args.jobs, args.mode):
        start = time.perf_counter()
        if len(group) > 1:  # lessons that share the machine, each in a process of its own
            ran = _run_group(group, args.jobs, args.mode, args.cell_timeout, args.folder, args.source)
            for name, (failure, seconds) in ran.items():
                times[name] = seconds
                failed += [failure] if failure else []
            print(f"[notebooks] {len(group)} lessons, {args.jobs} at a time, in {time.perf_counter() - start:.0f} s")
            continue
        (name,) = group
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
