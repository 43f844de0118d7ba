"""The first cell of every lesson: mode, measured run time, machine, Horovod's state, and a scratch folder."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from utils import course, envinfo, mode, processes, solutions

#: The file in a lesson's scratch folder that names the process (pid and start time) whose folder it is.
OWNER = ".owner"


def remove_orphan_scratch(tmp: str | None = None) -> list[Path]:
    """Remove the scratch folders of lessons whose kernel is gone (stopped without a shutdown, e.g. JupyterLab
    closed from its window): each names its process in OWNER; a folder whose process no longer runs (or whose pid
    now belongs to a process started later) goes. Returns the folders removed."""
    gone = []
    for folder in Path(tmp or tempfile.gettempdir()).glob("course-lesson-*"):
        try:
            pid, started = (folder / OWNER).read_text().split()
            alive = psutil.pid_exists(int(pid)) and abs(psutil.Process(int(pid)).create_time() - float(started)) < 1
        except (OSError, ValueError, psutil.Error):
            continue  # no owner written (yet), or not readable: not ours to judge
        if not alive:
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


@dataclass
class Lesson:
    """What a lesson's cells need from its set-up: whether Horovod works, a scratch folder, the start time."""

    notebook: str
    horovod_ok: bool = False
    horovod_why: str = "Horovod was not checked by this lesson's set-up."
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="course-lesson-")))
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        # The scratch folder also goes when the kernel exits where the last cell (finish) never ran; a kernel that has
        # not exited 2.5 s after a shutdown request gets SIGTERM from jupyter_client (half its shutdown_wait_time),
        # which skips this, and leaves the folder in the temporary folder.
        self._remove_work = weakref.finalize(self, shutil.rmtree, str(self.work), ignore_errors=True)
        # ... so the folder names its process, and the next lesson to start removes it once that process is gone
        owner = psutil.Process()
        (self.work / OWNER).write_text(f"{owner.pid} {owner.create_time()}\n")

    def need_horovod(self) -> bool:
        """True where Horovod works; otherwise print why the cell skips its Horovod part, and return False."""
        if not self.horovod_ok:
            print("skipped:", self.horovod_why)
        return self.horovod_ok

    def solutions(self, run: bool = True) -> None:
        """Let this lesson's solution cells (%%solution) run when run again; run=False stops them again."""
        print(solutions.request(run))

    @property
    def unattended(self) -> bool:
        """True when the course's executor runs this lesson top to bottom (make test, make site): no one is there to
        move a slider, and ipywidgets' interact() can stall that run (jupyter/nbclient#312)."""
        return bool(os.environ.get("COURSE_LESSON_RUN"))

    def elapsed(self) -> float:
        """Seconds since the set-up cell ran."""
        return time.perf_counter() - self.started

    def finish(self) -> str:
        """Free what the lesson started and return a line: run time, what was freed, and to shut the kernel down.

        Freed: the scratch folder, worker processes of course launches still running under this process (a cell
        interrupted mid-run can leave them), network labs still up, and matplotlib's open figures. The kernel's
        own memory (TensorFlow's included) is freed only when the kernel shuts down, hence the reminder.
        """
        self._remove_work()
        workers = _leftover_workers()
        left = processes.stop(workers)
        netlab = sys.modules.get("utils.netlab")
        labs = list(netlab._LIVE) if netlab is not None else []
        for lab in labs:
            lab.stop()
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            pyplot.close("all")
        freed = ["its scratch folder"]
        if workers:
            freed.append(f"{len(workers) - len(left)} worker process(es) left running by an interrupted cell")
        if labs:
            freed.append(f"{len(labs)} network lab(s) still up")
        rss_gib = psutil.Process().memory_info().rss / 2**30
        line = (
            f"This notebook's code ran for {self.elapsed():.0f} s after its first cell, "
            f"in {'smoke' if mode.is_smoke() else 'full'} mode. Freed: {', '.join(freed)}. "
            f"This kernel still holds {rss_gib:.1f} GiB of memory: shut it down before the next lesson "
            "(Kernel ▸ Shut Down Kernel)."
        )
        if left:
            line += f" Could not stop PIDs {sorted(p.pid for p in left)}: stop them by hand (kill -9 PID)."
        return line


def _leftover_workers() -> list[psutil.Process]:
    """Processes under this one that a course launch started (they carry its run marker) and that still run."""
    from utils.launch import RUN_MARKER

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if RUN_MARKER in proc.environ() and processes.alive(proc):
                found.append(proc)
        except (psutil.Error, OSError):  # ended meanwhile, or not ours to read
            continue
    return found


def start(notebook: str, *, horovod: bool = False) -> Lesson:
    """Print the mode, measured run time, machine and a warning if memory is short; check Horovod when asked."""
    if not (course.NOTEBOOKS / notebook).is_file():
        raise FileNotFoundError(
            f"no lesson named {notebook!r} in {course.NOTEBOOKS}: give the notebook's file name, "
            "e.g. '04_horovod.ipynb'"
        )
    solutions.from_environment()  # a mistyped COURSE_SOLUTIONS fails here, in the first cell
    remove_orphan_scratch()  # what lessons of kernels that are gone left in the temporary folder
    print(mode.describe())
    print(course.measured_duration_line(notebook))
    print(envinfo.machine_line())
    warning = course.memory_warning(envinfo.total_memory())
    if warning:
        print(warning)
    _register_magics()
    _record_figure_alts()
    lesson = Lesson(notebook)
    if horovod:
        from utils import launch

        lesson.horovod_ok, lesson.horovod_why = launch.horovod_available()
        print(lesson.horovod_why)
    return lesson


def _record_figure_alts() -> None:
    """Under IPython, have each figure's output carry its title as its text alternative (utils.site.figure_alt), which
    the website gives to the figure's image."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        from utils import site

        site.record_figure_alts(shell)


def _register_magics() -> None:
    """Register the %%solution cell magic when running under IPython (a plain Python process has no magics)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        solutions.register(shell)
