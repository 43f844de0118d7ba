"""L.finish(): the last cell of a lesson frees what the lesson started and says to shut the kernel down."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psutil

from utils import launch, lesson


def test_finish_stops_leftover_workers_removes_the_folder_and_reminds_to_shut_down():
    L = lesson.Lesson("00_start_here.ipynb")
    (L.work / "checkpoint").write_text("x")
    env = {**os.environ, launch.RUN_MARKER: "left-by-an-interrupted-cell"}
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # not a course launch
    try:
        line = L.finish()
        assert worker.wait(timeout=10) is not None, "the leftover worker is still running"
        assert bystander.poll() is None, "a process the lesson did not launch was stopped"
        assert not L.work.exists()
        assert "Freed: its scratch folder, 1 worker process(es) left running by an interrupted cell." in line
        assert "shut it down before the next lesson (Kernel ▸ Shut Down Kernel)" in line
        held = float(re.search(r"This kernel still holds (\d+\.\d) GiB of memory", line).group(1))
        assert abs(held - psutil.Process().memory_info().rss / 2**30) < 0.2  # this process's own memory
    finally:
        for p in (worker, bystander):
            p.kill()
            p.wait()


def test_finish_with_nothing_left_names_only_the_folder():
    line = lesson.Lesson("00_start_here.ipynb").finish()
    assert "Freed: its scratch folder. This kernel still holds" in line


def test_a_kernel_that_ends_without_the_last_cell_leaves_no_scratch_folder():
    code = "from utils import lesson; L = lesson.Lesson('00_start_here.ipynb'); (L.work / 'x').write_text('x'); print(L.work)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    work = out.stdout.strip().splitlines()[-1]
    assert "course-lesson-" in work and not os.path.exists(work), f"{work} is still there"


def test_scratch_folders_of_kernels_that_are_gone_go_at_the_next_lesson_start(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(dead.pid).create_time()
    dead.wait()
    me = psutil.Process()
    folders = {name: tmp_path / f"course-lesson-{name}" for name in ("dead", "alive", "unnamed")}
    for f in folders.values():
        f.mkdir()
    (folders["dead"] / lesson.OWNER).write_text(f"{dead.pid} {started}\n")
    (folders["alive"] / lesson.OWNER).write_text(f"{me.pid} {me.create_time()}\n")
    assert lesson.remove_orphan_scratch(str(tmp_path)) == [folders["dead"]]
    assert not folders["dead"].exists() and folders["alive"].exists() and folders["unnamed"].exists()
    own = lesson.Lesson("00_start_here.ipynb")  # a lesson's folder names its process
    assert (own.work / lesson.OWNER).read_text().split()[0] == str(me.pid)
    own.finish()
