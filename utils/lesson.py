"""The first cell of every lesson: mode, measured run time, machine, Horovod's state, and a scratch folder."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from utils import course, envinfo, mode


@dataclass
class Lesson:
    """What a lesson's cells need from its set-up: whether Horovod works, a scratch folder, the start time."""

    notebook: str
    horovod_ok: bool = False
    horovod_why: str = "Horovod was not checked by this lesson's set-up."
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="course-lesson-")))
    started: float = field(default_factory=time.perf_counter)

    def need_horovod(self) -> bool:
        """True where Horovod works; otherwise print why the cell skips its Horovod part, and return False."""
        if not self.horovod_ok:
            print("skipped:", self.horovod_why)
        return self.horovod_ok

    def elapsed(self) -> float:
        """Seconds since the set-up cell ran."""
        return time.perf_counter() - self.started

    def finish(self) -> str:
        """Remove the scratch folder and return one line on how long the lesson's code ran, and in which mode."""
        shutil.rmtree(self.work, ignore_errors=True)
        return (
            f"This notebook's code ran for {self.elapsed():.0f} s after its first cell, "
            f"in {'smoke' if mode.is_smoke() else 'full'} mode."
        )


def start(notebook: str, *, horovod: bool = False) -> Lesson:
    """Print the mode, measured run time, machine and a warning if memory is short; check Horovod when asked."""
    if not (course.NOTEBOOKS / notebook).is_file():
        raise FileNotFoundError(
            f"no lesson named {notebook!r} in {course.NOTEBOOKS}: give the notebook's file name, "
            "e.g. '04_horovod.ipynb'"
        )
    print(mode.describe())
    print(course.measured_duration_line(notebook))
    print(envinfo.machine_line())
    warning = course.memory_warning(envinfo.total_memory())
    if warning:
        print(warning)
    lesson = Lesson(notebook)
    if horovod:
        from utils import launch

        lesson.horovod_ok, lesson.horovod_why = launch.horovod_available()
        print(lesson.horovod_why)
    return lesson
