"""Figures that hold still: the watch sees a busy program that is not ours, and a figure falls back to its
recorded reference when the machine was busy or the rounds disagree."""

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from utils import steady

ROOT = Path(__file__).resolve().parent.parent
QUIET = steady.Contention(seconds=10, cores=2, others_cpu_seconds=0.5, steal_seconds=0.0)
BUSY = steady.Contention(seconds=10, cores=2, others_cpu_seconds=10.0, steal_seconds=0.0)
REF = steady.Reference(0.9, 0.88, 0.92, 3, "AMD EPYC", 2, "2026-11-25", "lesson 04, full mode")


def _orphan_busy_loop(seconds: float) -> int:
    """A busy program that is not a descendant of this process (its parent exits at once): its PID."""
    out = subprocess.run(
        [
            "bash",
            "-c",
            f'{sys.executable} -c "import time; t = time.time() + {seconds}\nwhile time.time() < t: pass" >/dev/null 2>&1 & echo $!',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def test_the_watch_counts_a_busy_program_outside_this_process_and_not_its_own_children():
    """Both run at once: the orphan's CPU time is counted, the child's is not (other load may add to the total)."""
    # 6 s, not less: the watch samples every 0.5 s and misses up to that at each end, a larger share of a shorter
    # loop, and more so when other tests slow the scans down
    child = subprocess.Popen([sys.executable, "-c", "import time; t = time.time() + 6\nwhile time.time() < t: pass"])
    pid = _orphan_busy_loop(6)
    orphan = psutil.Process(pid)
    try:
        before = sum(orphan.cpu_times()[:2])
        with steady.CpuWatch() as watch:
            child.wait()
        used = sum(orphan.cpu_times()[:2]) - before  # what the orphan really used while watched
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            orphan.kill()
    counted = {p: cpu for (p, _started), cpu in watch.by_process.items()}
    assert used > 0.3, "the busy loop did not run: the machine is overloaded"
    assert counted.get(pid, 0.0) >= 0.7 * used, (used, watch.result)  # samples every 0.5 s miss the edges
    assert child.pid not in counted, watch.result
    assert watch.result.others_cpu_seconds >= counted[pid]
    assert "most of it" in watch.result.line() and "PID" in watch.result.line()


def test_a_steady_quiet_measurement_is_used_as_measured():
    fig = steady.Steady("x", [0.80, 0.84, 0.82], QUIET, tolerance=0.10, ref=REF)
    assert fig.trusted and not fig.uses_reference
    assert fig.value == pytest.approx(0.82)
    assert "the verdict uses 0.82" in fig.sentence("efficiency")


def test_a_busy_machine_falls_back_to_the_reference_and_says_so():
    fig = steady.Steady("x", [0.55, 0.56, 0.57], BUSY, tolerance=0.10, ref=REF)
    assert fig.uses_reference and fig.value == 0.9
    text = fig.sentence("efficiency")
    assert "50% of this machine's 2 cores" in text and "recorded on a quiet machine, 0.90" in text


def test_rounds_that_disagree_fall_back_too_and_one_round_is_never_trusted():
    assert steady.Steady("x", [0.6, 0.9, 0.8], QUIET, tolerance=0.10, ref=REF).value == 0.9
    one = steady.Steady("x", [0.6], QUIET, tolerance=0.10, ref=REF)
    assert not one.trusted and "one round" in one.why_not()


def test_without_a_reference_the_measurement_stays_and_is_flagged():
    fig = steady.Steady("no such figure", [0.5, 0.9], QUIET, tolerance=0.10)
    assert fig.ref is None and fig.value == pytest.approx(0.7)
    assert "no quiet-machine figure is recorded" in fig.sentence("efficiency")


def test_recording_writes_one_row_per_figure_and_mode_and_reads_it_back(tmp_path, monkeypatch):
    path = tmp_path / "refs.csv"
    monkeypatch.setenv("COURSE_SMOKE", "1")
    fig = steady.Steady("eff", [0.8, 0.82], QUIET, tolerance=0.1, ref=REF)
    steady.record("eff", fig, "test", path)
    steady.record("eff", steady.Steady("eff", [0.7, 0.72], QUIET, tolerance=0.1, ref=REF), "again", path)
    got = steady.reference("eff", "smoke", path)
    assert got.value == pytest.approx(0.71) and got.source == "again"
    assert steady.reference("eff", "full", path) is None
    with pytest.raises(ValueError, match="not trusted"):
        steady.record("eff", steady.Steady("eff", [0.5, 0.9], QUIET, tolerance=0.1, ref=REF), "x", path)


def test_no_rounds_is_a_clear_error():
    with pytest.raises(ValueError, match="no rounds"):
        steady.Steady("x", [], QUIET, tolerance=0.1)


def test_the_program_that_runs_the_notebook_is_not_counted_as_another():
    """The watch runs in a child; this process (its parent, as a notebook server is a kernel's) keeps a core busy."""
    code = (
        "import time\nfrom utils import steady\n"
        "with steady.CpuWatch() as w:\n    time.sleep(2)\n"
        "print(' '.join(str(p) for (p, _), c in w.by_process.items() if c > 0))"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    deadline = time.time() + 20
    while child.poll() is None and time.time() < deadline:
        pass  # busy, as the parent of the watching process
    out = child.communicate(timeout=5)[0]
    assert str(os.getpid()) not in out.split(), out


def test_the_steadiness_trial_still_finds_the_cells_that_decide_each_figure():
    """tools/steadiness_trial.py runs the lessons' own cells, found by how they start: a lesson edit must not
    leave it without them (it once missed lesson 04's set-up cell after an import was added)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import steadiness_trial

    for name, (starts, _) in steadiness_trial.TRIALS.items():
        nb = steadiness_trial.trial_notebook(name)
        assert len(nb.cells) >= len(starts) + 1, name
        assert nb.cells[-1].source.startswith("import statistics"), name


def test_a_smoke_run_measures_one_round_unless_it_records_or_tries_the_references(monkeypatch):
    for name in ("COURSE_SMOKE", steady.RECORD_ENV, steady.ALL_ROUNDS_ENV):
        monkeypatch.delenv(name, raising=False)
    assert steady.rounds(3) == 3
    monkeypatch.setenv("COURSE_SMOKE", "1")
    one = steady.Steady("x", [0.9] * steady.rounds(3), QUIET, tolerance=0.1, ref=REF)
    assert not one.trusted and one.value == REF.value and "0.90, one round;" in one.sentence("x")
    for name in (steady.RECORD_ENV, steady.ALL_ROUNDS_ENV):  # recording, or the steadiness trial
        monkeypatch.setenv(name, "1")
        assert steady.rounds(3) == 3
        monkeypatch.delenv(name)
