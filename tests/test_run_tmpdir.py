"""tools/run_tmpdir.sh: a test run's temporary folder of its own, removed at the end with what processes ended by a
signal left in it, and the run failed when something was written outside it, in the system's temporary folder."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "run_tmpdir.sh"


def run(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """`body` between run_tmpdir_open and run_tmpdir_close, with `tmp_path` as the system's temporary folder."""
    env = {k: v for k, v in os.environ.items() if k != "COURSE_RUN_TMPDIR"}  # not inside a run of the course's
    script = f'. "{SCRIPT}"\nrun_tmpdir_open || exit 9\necho "run folder: $TMPDIR"\n{body}\nrun_tmpdir_close'
    return subprocess.run(
        ["bash", "-c", script], env={**env, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=60
    )


def test_what_processes_leave_in_the_runs_folder_goes_with_it(tmp_path):
    (tmp_path / "there-before").mkdir()
    done = run(tmp_path, 'touch "$TMPDIR/__autograph_generated_file1.py" "$TMPDIR/db_init_lock-ab"; mkdir "$TMPDIR/x"')
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.split("run folder: ")[1].split()[0])
    assert folder.parent == tmp_path and folder.name.startswith("course-run.") and not folder.exists()
    assert (
        "3 entries" in done.stdout and "1 TensorFlow autograph files" in done.stdout and "1 MLflow lock" in done.stdout
    )
    assert "nothing left in" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there-before"]


def test_something_written_outside_the_runs_folder_fails_the_run_and_is_named(tmp_path):
    done = run(tmp_path, f'touch "{tmp_path}/stray.sock"')
    assert done.returncode == 1
    assert "outside its own temporary folder" in done.stderr and "  stray.sock" in done.stderr


def test_a_run_inside_another_keeps_the_outer_folder(tmp_path):
    outer = tmp_path / "course-run.outer"
    outer.mkdir()
    script = f'. "{SCRIPT}"\nrun_tmpdir_open\necho "$TMPDIR"\nrun_tmpdir_close'
    env = {**os.environ, "COURSE_RUN_TMPDIR": str(outer), "TMPDIR": str(outer)}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == str(outer) and outer.is_dir()
