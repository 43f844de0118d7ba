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


def test_G02_another_programs_file_made_during_the_run_is_named_not_failed(tmp_path):
    """A program outside the run (started without the run's COURSE_RUN_TMPDIR) binds a socket in the system's
    temporary folder while the run goes on: the run passes and names it; a file the run leaves still fails it."""
    side = tmp_path / "side"
    side.mkdir()
    system = tmp_path / "system"
    system.mkdir()
    serve = (
        f"import os, socket, time; s = socket.socket(socket.AF_UNIX); s.bind({str(system / 'other.sock')!r}); "
        f"open({str(side / 'pid')!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    body = (
        f'env -u COURSE_RUN_TMPDIR -u TMPDIR python3 -c "{serve}" >/dev/null 2>&1 &\n'
        f'while [ ! -s "{side / "pid"}" ]; do sleep 0.05; done'
    )
    try:
        done = run(system, body)
        left = run(system, f'touch "{system}/stray"')
    finally:
        if (side / "pid").exists():
            os.kill(int((side / "pid").read_text()), 9)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "another program made these" in done.stdout and "  other.sock" in done.stdout
    assert left.returncode == 1 and "  stray" in left.stderr


def test_G03_a_killed_runs_folder_is_removed_by_the_next_run(tmp_path):
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    killed = tmp_path / "course-run.killed"
    killed.mkdir()
    (killed / ".owner").write_text(dead + "\n")
    (killed / "__autograph_generated_file9.py").write_text("x")
    running = tmp_path / "course-run.running"
    running.mkdir()
    (running / ".owner").write_text(f"{os.getpid()}\n")  # a run that still goes on: left alone
    done = run(tmp_path, "true")
    assert done.returncode == 0, done.stderr
    assert f"removed {killed}, left by a run that was killed" in done.stdout
    assert not killed.exists() and running.exists()
