"""The launcher runs workers, reports which one failed and how, and leaves no process behind."""
from __future__ import annotations

import json
import textwrap
import time

import psutil
import pytest

from utils import launch

from conftest import needs_horovod


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def leftovers(run_id_or_pids):
    """Processes still alive from a run (by PID, or with the run's marker in their environment)."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.pid in run_id_or_pids or proc.environ().get(launch.RUN_MARKER) in run_id_or_pids:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return alive


def markers_now():
    found = set()
    for proc in psutil.process_iter():
        try:
            m = proc.environ().get(launch.RUN_MARKER)
            if m:
                found.add(m)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


@pytest.fixture
def no_leftovers():
    """Fail the test if any process of a launched run is still alive afterwards."""
    before = markers_now()
    yield
    time.sleep(0.2)
    stray = [p for p in psutil.process_iter() if _marked(p) and _marked(p) not in before]
    assert not stray, f"processes left behind: {[(p.pid, p.name()) for p in stray]}"


def _marked(proc):
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.environ().get(launch.RUN_MARKER)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


OK = """
    import json, os
    tc = json.loads(os.environ["TF_CONFIG"])
    print("RESULT " + json.dumps({"rank": tc["task"]["index"], "cluster": tc["cluster"]["worker"],
                                  "threads": os.environ["OMP_NUM_THREADS"],
                                  "intra": os.environ["TF_NUM_INTRAOP_THREADS"]}))
"""

FAIL_RANK_1 = """
    import json, os, sys, time
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    if rank == 1:
        print("worker 1 gives up", flush=True)
        sys.exit(7)
    time.sleep(120)   # the others would wait forever in a collective
"""

HANG = """
    import time
    print("started", flush=True)
    time.sleep(120)
"""


def test_tf_workers_normal_run(tmp_path, no_leftovers):
    result = launch.launch_tf_workers(script(tmp_path, "ok.py", OK), 3, threads=2, timeout=30, stream=False)
    records = result.records()
    assert [r["rank"] for r in records] == [0, 1, 2]
    clusters = {json.dumps(r["cluster"]) for r in records}
    assert len(clusters) == 1, "every worker must see the same cluster"
    ports = [int(a.split(":")[1]) for a in records[0]["cluster"]]
    assert len(set(ports)) == 3
    assert all(r["threads"] == "2" and r["intra"] == "2" for r in records)
    assert [w.returncode for w in result.workers] == [0, 0, 0]
    assert not leftovers(result.pids)


def test_tf_worker_that_exits_nonzero_is_named_and_others_are_killed(tmp_path, no_leftovers):
    start = time.monotonic()
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(script(tmp_path, "fail.py", FAIL_RANK_1), 3, timeout=60, stream=False)
    assert time.monotonic() - start < 20, "a failed worker must stop the run at once, not at the timeout"
    assert err.value.rank == 1
    assert "worker 1 exited with code 7" in str(err.value)
    assert "worker 1 gives up" in str(err.value), "the failing worker's log must be shown"


def test_tf_worker_that_hangs_is_stopped_at_the_timeout(tmp_path, no_leftovers):
    start = time.monotonic()
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(script(tmp_path, "hang.py", HANG), 2, timeout=3, stream=False)
    elapsed = time.monotonic() - start
    assert 3 <= elapsed < 15
    assert "hung" in err.value.reason and "3 s" in err.value.reason
    assert "started" in str(err.value)


def test_bad_input_gets_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="at least 1"):
        launch.launch_tf_workers(script(tmp_path, "ok.py", OK), 0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        launch.launch_tf_workers(tmp_path / "missing.py", 2)
    with pytest.raises(ValueError, match="threads"):
        launch.launch_tf_workers(script(tmp_path, "ok.py", OK), 2, threads=0)


HVD_OK = """
    import json
    import horovod.tensorflow as hvd
    import tensorflow as tf
    hvd.init()
    s = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
    print("RESULT " + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "sum": float(s.numpy()[0])}))
"""

HVD_FAIL = """
    import sys, time
    import horovod.tensorflow as hvd
    hvd.init()
    if hvd.rank() == 1:
        sys.exit(5)
    time.sleep(120)
"""

HVD_HANG = """
    import time
    import horovod.tensorflow as hvd
    hvd.init()
    if hvd.rank() == 1:
        time.sleep(120)   # rank 0 finishes; rank 1 never does
"""


@needs_horovod
def test_horovodrun_normal_run(tmp_path, no_leftovers):
    result = launch.launch_horovodrun(script(tmp_path, "ok.py", HVD_OK), 2, timeout=90, stream=False)
    assert result.records() == [{"rank": 0, "size": 2, "sum": 3.0}, {"rank": 1, "size": 2, "sum": 3.0}]


@needs_horovod
def test_horovodrun_failing_rank_is_named(tmp_path, no_leftovers):
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_horovodrun(script(tmp_path, "fail.py", HVD_FAIL), 2, timeout=90, stream=False)
    assert err.value.rank == 1
    assert "rank 1 exited with code 5" in str(err.value)


@needs_horovod
def test_horovodrun_hang_is_stopped(tmp_path, no_leftovers):
    start = time.monotonic()
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_horovodrun(script(tmp_path, "hang.py", HVD_HANG), 2, timeout=20, stream=False)
    assert time.monotonic() - start < 40
    assert err.value.rank == 1, err.value.reason  # the rank that hung, not the launcher
    assert "hung: rank 1 did not finish within the timeout of 20 s" in err.value.reason


def _rank_times(x):
    import horovod.tensorflow as hvd

    hvd.init()
    return hvd.rank() * x


def _rank_1_fails():
    import horovod.tensorflow as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise RuntimeError("rank 1 cannot go on")
    import time

    time.sleep(120)


def _rank_1_hangs():
    import time

    import horovod.tensorflow as hvd

    hvd.init()
    if hvd.rank() == 1:
        time.sleep(120)


@needs_horovod
def test_horovod_run_hang_is_stopped_and_named(no_leftovers):
    start = time.monotonic()
    with pytest.raises(launch.WorkerError) as err:
        launch.horovod_run(_rank_1_hangs, 2, timeout=20, stream=False)
    assert time.monotonic() - start < 40
    assert err.value.rank == 1, err.value.reason


@needs_horovod
def test_horovod_run_returns_each_ranks_result(no_leftovers):
    assert launch.horovod_run(_rank_times, 2, args=(10,), timeout=90, stream=False) == [0, 10]


@needs_horovod
def test_horovod_run_failure_is_reported_and_cleaned_up(no_leftovers):
    with pytest.raises(launch.WorkerError) as err:
        launch.horovod_run(_rank_1_fails, 2, timeout=60, stream=False)
    assert err.value.rank == 1
    assert "rank 1 cannot go on" in str(err.value)


def test_worker_killed_by_a_signal_is_reported(tmp_path, no_leftovers):
    body = """
        import json, os, signal, time
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)
    """
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(script(tmp_path, "kill.py", body), 2, timeout=60, stream=False)
    assert err.value.rank == 0
    assert "killed by signal SIGKILL" in err.value.reason


def test_missing_horovod_gives_a_clear_message(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "horovod.tensorflow", None)  # import now fails as if not built
    ok, why = launch.horovod_available()
    assert not ok
    assert "make horovod" in why and "README" in why
    with pytest.raises(RuntimeError, match="make horovod"):
        launch.launch_horovodrun(script(tmp_path, "ok.py", HVD_OK), 2)
