"""A step's time split from TensorFlow's own profile: recorded by the training scripts on request, read back
without TensorBoard. The Horovod runs (allreduce-bound on a slow lab link) are lesson 04's deep dive."""

from __future__ import annotations

import subprocess
import sys

import pytest

from utils import paths, profiler
from utils.profiler import Interval, _union_length


def test_union_of_overlapping_spans_outside_what_a_part_before_took_by_hand():
    spans = [Interval(0, 4), Interval(2, 6), Interval(8, 9)]  # union 0-6 and 8-9
    length, left = _union_length(spans, 1, 10, minus=[Interval(3, 5)])  # within 1-10, 3-5 taken already
    assert length == pytest.approx(2 + 1 + 1)  # 1-3, 5-6, 8-9
    assert [(i.start, i.end) for i in left] == [(1, 3), (5, 6), (8, 9)]


MODEL = ["--width", "512", "--depth", "3", "--batch-size", "512", "--epochs", "2", "--data-size", "6000"]


def test_a_slow_storage_run_of_the_single_worker_script_is_bound_by_its_input(tmp_path):
    """Lesson 04's model on one process (`train_single.py`, which lesson 04 says takes the same options) with lesson
    01's slow storage: its step is mostly waiting for input, and its computation is still found. Lesson 04 profiles
    `train_horovod.py` with slow storage, with nothing slowed (asserted compute-bound) and, where the network lab
    runs, on a slow link; this is the one run of the single-worker script."""
    out = subprocess.run(
        [sys.executable, str(paths.SCRIPTS / "train_single.py"), *MODEL, "--read-latency-ms", "0.3"]
        + ["--profile-steps", "2:5", "--profile-dir", str(tmp_path / "slow")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    slow = profiler.split(tmp_path / "slow")
    assert len(slow.steps) == 4, "batches 2 to 5 of the last epoch, no validation batch"
    for step in slow.steps:  # no instant counted twice
        assert sum(step[p] for p in profiler.PARTS) == pytest.approx(step["step"], rel=1e-6, abs=1e-9)
    # 512 windows a batch, each read waits 0.3 ms, one at a time: at least 0.15 s of waiting in every step
    assert slow.bound() == "input" and min(s["input"] for s in slow.steps) >= 0.15, slow.mean()
    assert min(s["compute"] for s in slow.steps) > 0, "the training's own kernels were not found in the trace"


def test_the_slow_storage_reads_nothing_ahead():
    """The naive pipeline reads a batch only when it is asked for: a pause between two batches saves nothing."""
    import time

    import numpy as np

    from utils import data

    x, y = np.zeros((512, 48), np.float32), np.zeros((512, 24), np.float32)
    batches = iter(data.to_dataset(x, y, 128, read_latency_s=0.001))
    next(batches)
    time.sleep(0.5)  # a read-ahead thread would fill the next batch meanwhile
    start = time.perf_counter()
    next(batches)
    assert time.perf_counter() - start >= 0.128, "128 reads of 1 ms each, after the batch was asked for"


def synthetic_trace(path):
    """A trace written as TensorFlow writes one, with the async kernels' two ends on different threads: a 10 ms
    step; the batch waited for from 0 to 1 ms; a kernel from 1 to 4 ms; a gradient handed to Horovod at 3 ms
    and its average back at 8 ms; the lines in an order where the allreduce's end comes first."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    for i, name in enumerate(["_p", "_c", "kernel_type", "HorovodAllreduce", "IteratorGetNext", "name"], 1):
        plane.stat_metadata[i].id, plane.stat_metadata[i].name = i, name
    names = ["multi_step_on_iterator", "ExecutorState::ProcessAsync::Start", "ExecutorState::ProcessAsync::Done"]
    names += ["dense/MatMul:_MklMatMul"]
    for i, name in enumerate(names, 1):
        plane.event_metadata[i].id, plane.event_metadata[i].name = i, name

    def event(line, meta, start_ms, length_ms, link=None, kind=None):
        ev = line.events.add(metadata_id=meta, offset_ps=int(start_ms * 1e9), duration_ps=int(length_ms * 1e9))
        if link:
            ev.stats.add(metadata_id=link[0], int64_value=link[1])
        if kind:
            ev.stats.add(metadata_id=3, ref_value=kind)

    python = plane.lines.add(name="python", timestamp_ns=1_000_000)
    event(python, 1, 0, 10)
    event(python, 3, 8, 0.5, (2, 7), 4)  # the allreduce's end: its result back at 8 ms
    data_line = plane.lines.add(name="tf_data_iterator_get_next", timestamp_ns=1_000_000)
    event(data_line, 3, 1, 0.2, (2, 5), 5)
    compute = plane.lines.add(name="tf_Compute/1", timestamp_ns=1_000_000)
    event(compute, 2, 0, 0.01, (1, 5), 5)  # the batch asked for at 0
    event(compute, 4, 1, 3)
    event(compute, 2, 3, 0.01, (1, 7), 4)  # the gradient handed over at 3 ms, while the kernel still runs
    path.write_bytes(space.SerializeToString())
    return path


def test_a_step_is_split_by_hand_on_a_trace_of_known_events(tmp_path):
    step = profiler.split(synthetic_trace(tmp_path / "t.xplane.pb")).steps
    assert len(step) == 1
    got = {k: round(v * 1e3, 6) for k, v in step[0].items()}
    # compute 1-4; input 0-1; allreduce 3-8 less the kernel's 3-4; idle the rest of the 10 ms
    assert got == {"step": 10, "compute": 3, "input": 1, "allreduce": 4, "idle": 2}


def test_the_rank_waited_for_is_read_step_by_step():
    a = profiler.StepSplit([{"step": 1, "compute": 0.1, "input": 0.8, "allreduce": 0.1, "idle": 0}] * 2, None)
    b = profiler.StepSplit([{"step": 1, "compute": 0.1, "input": 0.1, "allreduce": 0.8, "idle": 0}] * 2, None)
    a.steps[1], b.steps[1] = b.steps[1], a.steps[1]  # the slow rank changes in the second step
    assert [s["input"] for s in profiler.waited_for({0: a, 1: b}).steps] == [0.8, 0.8]
    with pytest.raises(ValueError, match="different numbers of steps"):
        profiler.waited_for({0: a, 1: profiler.StepSplit(a.steps[:1], None)})


def test_bad_profile_requests_say_what_to_write(tmp_path):
    for bad in ("4", "a:b", "5:2", "-1:3"):
        with pytest.raises(ValueError, match="FIRST:LAST"):
            profiler.parse_steps(bad)
    with pytest.raises(FileNotFoundError, match="--profile-steps FIRST:LAST --profile-dir"):
        profiler.split(tmp_path)
    (tmp_path / "x.pb").write_bytes(b"")
    with pytest.raises(ValueError, match="no /host:CPU plane"):
        profiler.split(tmp_path / "x.pb")
