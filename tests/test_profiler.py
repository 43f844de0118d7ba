"""A step's time split from TensorFlow's own profile: recorded by the training scripts on request, read back
without TensorBoard. The Horovod runs (allreduce-bound on a slow lab link) are lesson 04's deep dive."""

from __future__ import annotations

import subprocess
import sys

import pytest

from utils import paths, profiler
from utils.profiler import Interval, _union_length

TINY = ["--width", "64", "--depth", "1", "--batch-size", "128", "--epochs", "2", "--data-size", "3000"]


def train_single(tmp_path, *extra):
    out = subprocess.run(
        [sys.executable, str(paths.SCRIPTS / "train_single.py"), *TINY, *extra],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def test_union_of_overlapping_spans_outside_what_a_part_before_took_by_hand():
    spans = [Interval(0, 4), Interval(2, 6), Interval(8, 9)]  # union 0-6 and 8-9
    length, left = _union_length(spans, 1, 10, minus=[Interval(3, 5)])  # within 1-10, 3-5 taken already
    assert length == pytest.approx(2 + 1 + 1)  # 1-3, 5-6, 8-9
    assert [(i.start, i.end) for i in left] == [(1, 3), (5, 6), (8, 9)]


def test_a_compute_run_and_a_slow_storage_run_are_told_apart_by_their_split(tmp_path):
    train_single(tmp_path, "--profile-steps", "2:5", "--profile-dir", str(tmp_path / "fast"))
    train_single(tmp_path, "--profile-steps", "2:5", "--profile-dir", str(tmp_path / "slow"), "--read-latency-ms", "1")
    fast, slow = profiler.split(tmp_path / "fast"), profiler.split(tmp_path / "slow")
    assert len(fast.steps) == len(slow.steps) == 4, "batches 2 to 5 of the last epoch"
    for run in (fast, slow):
        for step in run.steps:
            parts = sum(step[p] for p in profiler.PARTS)
            assert parts == pytest.approx(step["step"], rel=1e-6, abs=1e-9) and min(step.values()) >= 0
        assert run.steps[0]["allreduce"] == 0, "one process: nothing to average"
    # 128 windows a batch, each read waits 1 ms: at least 0.128 s of waiting for input in every step
    assert min(s["input"] for s in slow.steps) >= 0.128
    assert slow.bound() == "input" and fast.bound() == "compute", (fast.mean(), slow.mean())


def test_bad_profile_requests_say_what_to_write(tmp_path):
    for bad in ("4", "a:b", "5:2", "-1:3"):
        with pytest.raises(ValueError, match="FIRST:LAST"):
            profiler.parse_steps(bad)
    with pytest.raises(FileNotFoundError, match="--profile-steps FIRST:LAST --profile-dir"):
        profiler.split(tmp_path)
    (tmp_path / "x.pb").write_bytes(b"")
    with pytest.raises(ValueError, match="no /host:CPU plane"):
        profiler.split(tmp_path / "x.pb")
