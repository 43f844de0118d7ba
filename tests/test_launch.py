"""The launcher runs workers, reports which one failed first and how, and leaves no process behind."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import needs_horovod
from test_processes import SLEEPER, reused_handle, start

from utils import launch, processes, rank_imports


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def until(check, timeout=10.0):
    """Call `check` until it returns something false or `timeout` s have passed; return its last value."""
    deadline = time.monotonic() + timeout
    while (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def leftovers(run_ids):
    """Live processes of the given runs (found by the marker in their environment)."""
    return [p for run_id in run_ids for p in processes.marked(launch.RUN_MARKER, run_id)]


@pytest.fixture
def no_leftovers(monkeypatch):
    """Fail the test if a process of a run it launched is still alive afterwards; yield those runs' IDs.

    Only this test's runs count: another test session on the machine may have runs of its own.
    """
    run_ids, real = [], launch.run_workers

    def recording(*args, **kwargs):
        run_ids.append(kwargs["run_id"])
        return real(*args, **kwargs)

    monkeypatch.setattr(launch, "run_workers", recording)
    yield run_ids
    stray = until(lambda: leftovers(run_ids))
    described = [(p.pid, " ".join(p.cmdline())) for p in stray if processes.alive(p)]
    processes.stop(stray)
    assert not stray, f"processes left behind: {described}"


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
    assert not {c.pid for c in psutil.Process().children()} & set(result.pids), "every worker must be collected"


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
    import json, sys
    import horovod.tensorflow as hvd
    import tensorflow as tf
    hvd.init()
    s = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
    extras = [m for m in ("IPython", "jax", "matplotlib", "scipy", "sklearn") if m in sys.modules]  # left out in a rank
    print("RESULT " + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "sum": float(s.numpy()[0]), "extras": extras}))
"""

HVD_FAIL = """
    import os, sys, time
    if os.environ["HOROVOD_RANK"] == "1":  # the failure is the launcher's to see: no TensorFlow needed for it
        sys.exit(5)
    time.sleep(120)
"""

HVD_HANG = """
    import os, time
    if os.environ["HOROVOD_RANK"] == "1":  # horovodrun's numbering: the hang is the launcher's to see, not hvd's
        time.sleep(120)   # rank 0 finishes at once; rank 1 never does
"""


@needs_horovod
def test_horovodrun_normal_run(tmp_path, no_leftovers, monkeypatch):
    monkeypatch.delenv(rank_imports.VAR, raising=False)  # the launcher's default, whatever this shell says
    result = launch.launch_horovodrun(script(tmp_path, "ok.py", HVD_OK), 2, timeout=90, stream=False)
    # horovodrun passes the launcher's environment on: its ranks import Keras without its extras (rank_imports)
    assert result.records() == [
        {"rank": 0, "size": 2, "sum": 3.0, "extras": []},
        {"rank": 1, "size": 2, "sum": 3.0, "extras": []},
    ]


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
        # Long enough for rank 0 to start and finish on a busy 2-core machine: else both ranks are still running.
        launch.launch_horovodrun(script(tmp_path, "hang.py", HVD_HANG), 2, timeout=30, stream=False)
    assert time.monotonic() - start < 60
    assert err.value.rank == 1, err.value.reason  # the rank that hung, not the launcher
    assert "hung: rank 1 did not finish within the timeout of 30 s" in err.value.reason


def _rank_times(x):
    import os  # horovod.run's own plumbing returns the results in rank order: no TensorFlow needed for it

    return int(os.environ["HOROVOD_RANK"]) * x


def _rank_1_fails():
    import os
    import time

    if os.environ["HOROVOD_RANK"] == "1":
        raise RuntimeError("rank 1 cannot go on")
    time.sleep(120)


def _rank_1_hangs():
    import os
    import time

    if os.environ["HOROVOD_RANK"] == "1":  # as in HVD_HANG: no TensorFlow to import, rank 0 ends at once
        time.sleep(120)


@needs_horovod
def test_horovod_run_hang_is_stopped_and_named(no_leftovers):
    start = time.monotonic()
    with pytest.raises(launch.WorkerError) as err:
        launch.horovod_run(_rank_1_hangs, 2, timeout=30, stream=False)  # see test_horovodrun_hang_is_stopped
    assert time.monotonic() - start < 60
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


FIRST_FAILS = """
    import json, os, select, sys, time
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    first, pid_file = int(sys.argv[1]), sys.argv[2]
    if rank == first:
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(pid_file + ".tmp", pid_file)
        sys.exit(3)
    deadline = time.monotonic() + 60
    while not os.path.exists(pid_file) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        select.select([os.pidfd_open(int(open(pid_file).read()))], [], [], 60)  # until the peer has ended
    except ProcessLookupError:
        pass  # it has ended already
    # A peer notices the lost connection a little later. The launcher's waiter threads note each exit's time; the gap
    # must be longer than the delay with which a busy machine wakes them.
    time.sleep(0.5)
    print("lost my peer", flush=True)
    sys.exit(1)
"""


@pytest.mark.parametrize("first", [1, 0])
def test_the_worker_that_failed_first_is_named_not_the_lowest_rank(tmp_path, first, no_leftovers, monkeypatch):
    # The launcher looks only once both workers have ended, so that the order of their exits, not which one it saw
    # first, is what names the first failure (with 0.5 s between them, it would otherwise see the first alone).
    real_look = launch._Watch.look

    def look(self, force=False):
        if any(w.exit for w in self.workers):
            until(lambda: any(w.exit is None for w in self.workers), timeout=30)
        return real_look(self, force)

    monkeypatch.setattr(launch._Watch, "look", look)
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(
            script(tmp_path, "first.py", FIRST_FAILS), 2, args=[first, tmp_path / "pid"], timeout=60, stream=False
        )
    assert err.value.rank == first
    assert err.value.reason.startswith(f"worker {first} exited with code 3")
    assert "then worker" not in err.value.reason or err.value.reason.endswith(
        f"; then worker {1 - first} exited with code 1 (a consequence: its peer was gone)"
    )


def test_later_failures_are_named_as_consequences_of_the_first():
    assert launch._describe_failures([(1, -9), (0, 1)]) == (
        "worker 1 was killed by signal SIGKILL; then worker 0 exited with code 1 (a consequence: its peer was gone)"
    )
    assert launch._describe_failures([(2, 3), (0, 1), (1, 1)]) == (
        "worker 2 exited with code 3; then worker 0 exited with code 1, then worker 1 exited with code 1 "
        "(consequences: their peer was gone)"
    )


STUBBORN = """
    import json, os, signal, subprocess, sys, time
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    ready, late_file = sys.argv[1], sys.argv[2]
    if rank == 1:
        deadline = time.monotonic() + 60
        while not os.path.exists(ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        sys.exit(4)
    # A helper that ignores SIGTERM (so it takes a SIGKILL), and on SIGTERM one more process (for the second scan).
    helper = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                               "signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"], stdout=subprocess.PIPE)
    helper.stdout.readline()

    def start_one_more(*_):
        late = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open(late_file, "w") as f:
            f.write(str(late.pid))
        os._exit(0)

    signal.signal(signal.SIGTERM, start_one_more)
    open(ready, "w").close()
    time.sleep(120)
"""


def test_every_process_of_a_failed_run_has_ended_and_been_collected_when_the_error_comes(tmp_path, no_leftovers):
    children = set(psutil.Process().children(recursive=True))
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(
            script(tmp_path, "stubborn.py", STUBBORN),
            2,
            args=[tmp_path / "ready", tmp_path / "late"],
            timeout=60,
            stream=False,
        )
    # Checked at once, without waiting: nothing of the run runs, and no child of this process is left, not even a zombie.
    assert no_leftovers and leftovers(no_leftovers) == []
    assert set(psutil.Process().children(recursive=True)) - children == set()
    assert err.value.rank == 1 and "worker 1 exited with code 4" in err.value.reason
    late = int((tmp_path / "late").read_text())  # started on SIGTERM, after the first scan or during it
    assert not psutil.pid_exists(late) or not processes.alive(psutil.Process(late))


def test_clean_up_never_signals_a_process_group_by_a_stored_number(tmp_path, monkeypatch, no_leftovers):
    calls = []
    monkeypatch.setattr(os, "killpg", lambda *args: calls.append(args))
    with pytest.raises(launch.WorkerError):
        launch.launch_tf_workers(script(tmp_path, "fail.py", FAIL_RANK_1), 3, timeout=60, stream=False)
    assert calls == []


def test_kill_run_spares_a_pid_that_no_longer_belongs_to_the_run():
    # A bare PID whose process lacks the run's marker: the run's process ended and another program got the PID.
    bystander = start(SLEEPER)
    try:
        assert launch.kill_run("a-run-that-ended", [bystander.pid], grace=0.5) == []
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_kill_run_spares_a_reused_pid_of_a_handle_it_was_given():
    with reused_handle() as (handle, newcomer):
        assert launch.kill_run("a-run-that-ended", [handle], grace=0.5) == []
        assert newcomer.poll() is None, "a process that reused the PID of a run's process was signalled"


def test_kill_run_stops_a_runs_processes_given_by_pid_and_their_descendants():
    env = dict(os.environ, **{launch.RUN_MARKER: "run-by-pid"})
    # The root carries the marker; its child does not (it cleared its environment): found as a descendant.
    root = start(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(120)'], env={}); print(c.pid, flush=True); time.sleep(120)",
        ],
        env=env,
    )
    handle, child = psutil.Process(root.pid), psutil.Process(int(root.first_line))
    assert launch.kill_run("run-by-pid", [root.pid], grace=1) == []
    assert not processes.alive(handle) and not processes.alive(child)
    assert root.pid not in {c.pid for c in psutil.Process().children()}, "kill_run collects this process's child"


BIND = """
    import json, os, socket, sys
    tc = json.loads(os.environ["TF_CONFIG"])
    rank = tc["task"]["index"]
    host, port = tc["cluster"]["worker"][rank].rsplit(":", 1)
    server = socket.socket()
    try:
        server.bind((host, int(port)))   # what TensorFlow does for its gRPC server
    except OSError as e:
        sys.exit(f"worker {rank} could not bind {host}:{port}: {e.strerror}")   # Address already in use
    server.listen()
    print("RESULT " + json.dumps({"rank": rank, "port": int(port)}))
"""


@pytest.fixture
def taken_port():
    """A port another program holds."""
    with socket.socket() as other:
        other.bind(("localhost", 0))
        other.listen()
        yield other.getsockname()[1]


def picking(monkeypatch, choose):
    """Make `free_ports(n)` return `choose(attempt, n, real_free_ports)`; return the list of picks made."""
    real, picks = launch.free_ports, []

    def pick(n):
        picks.append(choose(len(picks) + 1, n, real))
        return picks[-1]

    monkeypatch.setattr(launch, "free_ports", pick)
    return picks


def test_a_run_whose_port_was_taken_starts_again_on_fresh_ports(
    tmp_path, monkeypatch, capsys, taken_port, no_leftovers
):
    picks = picking(monkeypatch, lambda attempt, n, real: [*real(n - 1), taken_port] if attempt == 1 else real(n))
    result = launch.launch_tf_workers(script(tmp_path, "bind.py", BIND), 2, timeout=60, stream=False)
    assert len(picks) == 2 and taken_port not in picks[1]
    assert [r["port"] for r in result.records()] == picks[1]
    out = capsys.readouterr().out
    assert "could not bind its port" in out and "fresh ports (attempt 2 of 3)" in out


def test_a_port_taken_every_time_gives_up_after_three_attempts(tmp_path, monkeypatch, capsys, taken_port, no_leftovers):
    picks = picking(monkeypatch, lambda attempt, n, real: [taken_port] * n)
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(script(tmp_path, "bind.py", BIND), 1, timeout=60, stream=False)
    assert len(picks) == launch.PORT_ATTEMPTS == 3
    assert "Address already in use" in str(err.value)
    assert capsys.readouterr().out.count("starting the run again on fresh ports") == 2


def test_a_failure_that_is_not_about_ports_is_not_retried(tmp_path, monkeypatch, no_leftovers):
    picks = picking(monkeypatch, lambda attempt, n, real: real(n))
    with pytest.raises(launch.WorkerError):
        launch.launch_tf_workers(script(tmp_path, "fail.py", FAIL_RANK_1), 2, timeout=60, stream=False)
    assert len(picks) == 1


def test_free_ports_are_distinct_unbound_and_below_the_kernels_own_range():
    ports = launch.free_ports(8)
    assert len(set(ports)) == 8
    first, _ = launch.ephemeral_ports()
    if first - launch.LOWEST_PORT >= 1000:  # else portpicker picks, from the kernel's range (the test below)
        assert all(launch.LOWEST_PORT <= p < first for p in ports), (ports, first)
    for port in ports:
        with socket.socket() as s:
            s.bind(("localhost", port))


def test_where_the_kernels_range_leaves_no_room_below_it_free_ports_still_picks_free_ones(monkeypatch):
    monkeypatch.setattr(launch, "ephemeral_ports", lambda: (1024, 65535))
    ports = launch.free_ports(4)
    assert len(set(ports)) == 4 and all(p >= 1024 for p in ports)
    for port in ports:
        with socket.socket() as s:
            s.bind(("localhost", port))


def test_where_no_port_below_the_kernels_range_is_free_portpicker_picks_after_100_tries_each(monkeypatch):
    asked = []
    monkeypatch.setattr(launch, "ephemeral_ports", lambda: (40000, 60999))
    monkeypatch.setattr(launch.portpicker, "is_port_free", lambda port: asked.append(port) or False)
    ports = launch.free_ports(2)
    assert len(set(ports)) == 2 and len(asked) == 200 and all(p < 40000 for p in asked)


def test_a_seeded_global_random_does_not_fix_the_ports():
    state = random.getstate()
    try:
        random.seed(0)
        first = launch.free_ports(3)
        random.seed(0)
        assert launch.free_ports(3) != first
    finally:
        random.setstate(state)


def test_workers_run_on_the_cpu_unless_the_notebook_shows_them_a_gpu(monkeypatch):
    # With TensorFlow's GPU build (a GPU machine), each of several workers would otherwise take the GPU's memory.
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert launch.worker_env(1)["CUDA_VISIBLE_DEVICES"] == "-1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a lesson (or learner) that wants the GPU says so
    assert launch.worker_env(1)["CUDA_VISIBLE_DEVICES"] == "0"


def test_tensorflow_takes_gpu_memory_as_it_needs_it_in_notebooks_and_workers():
    env = {k: v for k, v in os.environ.items() if k != "TF_FORCE_GPU_ALLOW_GROWTH"}
    code = "import os, utils; from utils import launch; print(os.environ['TF_FORCE_GPU_ALLOW_GROWTH'], "
    code += "launch.worker_env(1)['TF_FORCE_GPU_ALLOW_GROWTH'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["true", "true"], out.stderr


def test_a_successful_run_removes_its_own_logs_and_keeps_its_output():
    env = launch.worker_env(1)
    run = launch.run_workers(
        [[sys.executable, "-c", "print('RESULT {\"rank\": 0}')"]],
        [env],
        timeout=60,
        run_id=env[launch.RUN_MARKER],
        stream=False,
    )
    assert not run.log_dir.exists() and run.records() == [{"rank": 0}]


def test_a_failed_run_keeps_its_logs_for_reading():
    env = launch.worker_env(1)
    with pytest.raises(launch.WorkerError) as err:
        launch.run_workers(
            [[sys.executable, "-c", "print('why'); raise SystemExit(3)"]],
            [env],
            timeout=60,
            run_id=env[launch.RUN_MARKER],
            stream=False,
        )
    assert "why" in (err.value.log_dir / "worker-0.log").read_text()


#: Worker 1 stops itself (SIGSTOP); worker 0 waits for it, then gives up as Gloo does (its own words) and exits.
STOPPED_PEER = """
    import json, os, signal, sys, time
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    wait = float(sys.argv[1])
    if rank == 1:
        print("worker 1 stops", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP if sys.argv[2] == "stop" else signal.SIGCONT)
        time.sleep(120)
    time.sleep(wait)
    if wait < 60:
        print(f"[gloo/transport/tcp/unbound_buffer.cc:84] Timed out waiting {wait * 1000:.0f}ms for recv operation "
              "to complete", flush=True)
        sys.exit(1)
"""


def test_a_stopped_worker_is_named_not_the_peer_that_timed_out_waiting_for_it(tmp_path, no_leftovers):
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(
            script(tmp_path, "stopped.py", STOPPED_PEER), 2, args=[3, "stop"], timeout=60, stream=False
        )
    assert err.value.rank == 1, err.value.reason
    assert err.value.reason.startswith("worker 1 was stopped (process state T")
    assert "worker 0 exited with code 1" in err.value.reason
    assert "Timed out waiting 3000ms for recv operation to complete" in err.value.reason, "the framework's own words"


def test_a_worker_that_still_runs_when_its_peer_times_out_is_named(tmp_path, no_leftovers):
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(
            script(tmp_path, "mute.py", STOPPED_PEER), 2, args=[3, "run"], timeout=60, stream=False
        )
    assert err.value.rank == 1, err.value.reason
    assert err.value.reason.startswith("worker 1 stopped responding (it was still running when worker 0 gave up")
    assert "Timed out waiting 3000ms" in err.value.reason


def test_a_worker_stopped_for_long_ends_the_run_before_any_timeout(tmp_path, no_leftovers):
    start = time.monotonic()
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(
            script(tmp_path, "stopped.py", STOPPED_PEER), 2, args=[120, "stop"], timeout=90, stream=False
        )
    assert time.monotonic() - start < 30, "the stopped worker must end the run, not the timeout of 90 s"
    assert err.value.rank == 1, err.value.reason
    assert err.value.reason.startswith("worker 1 was stopped (process state T"), err.value.reason


HVD_STOPPED = """
    import os, signal, time
    import horovod.tensorflow as hvd
    import tensorflow as tf
    hvd.init()
    for step in range(10000):
        hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)
        if step == 20 and hvd.rank() == 1:
            print("rank 1 stops", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(0.01)
"""


@needs_horovod
def test_a_stopped_horovod_rank_is_named_with_glooss_timeout_line(tmp_path, no_leftovers):
    """Gloo's timeout fires in rank 0: rank 1, which was stopped, is named, and Gloo's words are quoted."""
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_horovodrun(
            script(tmp_path, "stopped.py", HVD_STOPPED),
            2,
            # Gloo's timeout also bounds the ranks' meeting in hvd.init: with 5 s, a rank that imported TensorFlow
            # that much later than its peer on a busy machine would fail that meeting, not be stopped.
            env={"HOROVOD_GLOO_TIMEOUT_SECONDS": "20"},
            timeout=120,
            stream=False,
            stopped_after=None,  # the launcher waits: Gloo's timeout fires first
        )
    assert err.value.rank == 1, err.value.reason
    assert err.value.reason.startswith("rank 1 was stopped (process state T"), err.value.reason
    assert "Timed out waiting" in err.value.reason, "Gloo's own timeout line is quoted"


HVD_KILLS_HOROVODRUN = """
    import os, signal, time
    import horovod.tensorflow as hvd
    import psutil
    from utils import launch
    hvd.init()
    if hvd.rank() == 0:
        # the launcher's horovodrun process, by its command line (not a path that holds the word)
        runner = next(p for p in psutil.Process().parents() if p.cmdline()[1:4] == list(launch.HOROVODRUN[1:]))
        runner.send_signal(signal.SIGKILL)
    time.sleep(120)
"""


@needs_horovod
def test_horovodrun_itself_killed_is_said_so_and_no_rank_is_blamed(tmp_path, no_leftovers):
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_horovodrun(script(tmp_path, "kill.py", HVD_KILLS_HOROVODRUN), 2, timeout=90, stream=False)
    assert err.value.rank is None, err.value.reason
    assert err.value.reason.startswith("horovodrun was killed by signal SIGKILL"), err.value.reason


def test_failed_runs_keep_only_the_newest_logs_in_the_courses_runs_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "LOG_ROOT", tmp_path / "logs")
    monkeypatch.setattr(launch, "KEEP_LOGS", 3)
    # An older run of another session that is still running: its folder must stay, whatever its age.
    busy_env = launch.worker_env(1)
    (tmp_path / "logs" / f"run-20000101-000000-{busy_env[launch.RUN_MARKER][:8]}").mkdir(parents=True)
    busy = subprocess.Popen(SLEEPER, env=busy_env, stdout=subprocess.PIPE, text=True)
    busy.stdout.readline()
    try:
        folders = []
        for i in range(5):
            env = launch.worker_env(1)
            with pytest.raises(launch.WorkerError) as err:
                launch.run_workers(
                    [[sys.executable, "-c", f"print('run {i}'); raise SystemExit(3)"]],
                    [env],
                    timeout=60,
                    run_id=env[launch.RUN_MARKER],
                    stream=False,
                )
            folders.append(err.value.log_dir)
            assert err.value.log_dir.parent == tmp_path / "logs"
            assert f"Full logs: {err.value.log_dir}" in str(err.value) and "newest 3 failed runs" in str(err.value)
    finally:
        busy.kill()
        busy.wait()
    kept = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert kept == sorted([f"run-20000101-000000-{busy_env[launch.RUN_MARKER][:8]}", *(f.name for f in folders[-3:])])
    assert "run 4" in (folders[-1] / "worker-0.log").read_text()


def test_a_worker_still_stopped_at_the_timeout_is_named(tmp_path, no_leftovers):
    with pytest.raises(launch.WorkerError) as err:
        launch.launch_tf_workers(
            script(tmp_path, "stopped.py", STOPPED_PEER),
            2,
            args=[120, "stop"],
            timeout=8,
            stopped_after=None,
            stream=False,
        )
    assert err.value.rank == 1, err.value.reason
    assert err.value.reason == "hung: worker 1 was stopped (process state T) at the timeout of 8 s"


def test_the_frameworks_timeout_lines_are_found_and_shortened():
    """Lines Horovod 0.28.1 (Gloo) printed here when its peer was stopped: in a collective, and at the rendezvous."""
    collective = (
        "[0]<stderr>:[2026-11-25 09:51:05.391571: E /tmp/tmp.hcp8wC5YvQ/horovod-0.28.1/horovod/common/operations.cc:697]"
        " [0]: Horovod background loop uncaught exception: [/tmp/tmp.hcp8wC5YvQ/horovod-0.28.1/third_party/"
        "compatible17_gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms for recv operation to complete"
    )
    rendezvous = (
        "[0]<stderr>:  what():  [/tmp/tmp.hcp8wC5YvQ/horovod-0.28.1/horovod/common/gloo/http_store.cc:54] Wait timeout "
        "after 30 seconds for key(s): 1. You may want to increase the timeout via HOROVOD_GLOO_TIMEOUT_SECONDS"
    )
    assert launch._peer_timeout(f"[0]<stdout>:epoch 1/5\n{collective}\n") == (
        "[2026-11-25 09:51:05.391571: E operations.cc:697] [0]: Horovod background loop uncaught exception: "
        "[unbound_buffer.cc:81] Timed out waiting 5000ms for recv operation to complete"
    )
    assert launch._peer_timeout(rendezvous) == (
        "what():  [http_store.cc:54] Wait timeout after 30 seconds for key(s): 1. You may want to increase the timeout "
        "via HOROVOD_GLOO_TIMEOUT_SECONDS"
    )
    assert launch._peer_timeout("Traceback (most recent call last):\nValueError: bad shape") is None


def test_rank_lines_reassemble_a_long_line_that_mpirun_forwarded_in_pieces():
    """mpirun --tag-output forwards a rank's long line in pieces, each tagged, and another rank's line can come
    between them (seen with 2 kB RESULT lines of two ranks on one host)."""
    text = (
        "Open MPI says something\n"
        '[1,0]<stdout>:RESULT {"rank": 0, "x": [1,'
        '[1,1]<stdout>:RESULT {"rank": 1, "x": [3, 4]}\n'
        "[1,0]<stdout>:2]}\n"
        "[1,1]<stderr>:a warning\n"
    )
    assert launch.rank_lines(text) == [
        "Open MPI says something",
        'RESULT {"rank": 0, "x": [1,2]}',
        "a warning",
        'RESULT {"rank": 1, "x": [3, 4]}',
    ]
    result = launch.RunResult(workers=[launch.WorkerResult(0, 0, Path("-"), text)], seconds=1.0, log_dir=Path("-"))
    assert result.records() == [{"rank": 0, "x": [1, 2]}, {"rank": 1, "x": [3, 4]}]


@pytest.mark.parametrize(
    "report, expected",
    [
        (
            "mpirun noticed that process rank 1 with PID 31328 on node algo-2 exited on signal 9 (Killed).",
            (1, "rank 1 on algo-2 was killed by signal SIGKILL"),
        ),
        (
            "The first process to do so was:\n\n  Process name: [[60821,1],3]\n  Exit code:    3\n",
            (3, "rank 3 exited with code 3"),
        ),
        ("  Process name: [[60821,1],0]\n  Exit code:    137\n", (0, "rank 0 was killed by signal SIGKILL")),
        (
            "MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD\nwith errorcode 5.",
            (2, "rank 2 called MPI_Abort (error code 5)"),
        ),
        ("[algo-1:19827] Warning: could not find environment variable", None),
    ],
)
def test_mpirun_reports_name_the_rank_that_failed(report, expected):
    """Open MPI 4's own words for a rank killed by a signal (with its node), one that exited with an error, and
    one that called MPI_Abort; mpirun failing by itself names no rank."""
    assert launch.mpirun_failure(report) == expected


def test_a_silent_run_says_it_is_still_running_and_a_streamed_one_does_not(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launch, "QUIET_NOTE_S", 0.3)
    sleeper = [sys.executable, "-c", "import time; time.sleep(1.2)"]
    launch.run_workers([sleeper], [dict(os.environ)], timeout=30, run_id="quiet-note", stream=False)
    silent = capsys.readouterr().out
    assert "the worker: " in silent and "still running" in silent
    launch.run_workers([sleeper], [dict(os.environ)], timeout=30, run_id="quiet-note-2", stream=lambda line: False)
    assert "still running" in capsys.readouterr().out, "a filter that shows no line leaves the cell as quiet"

    def speaks(line: str) -> bool:
        return False

    speaks.speaks_for_itself = True
    launch.run_workers([sleeper], [dict(os.environ)], timeout=30, run_id="quiet-note-3", stream=speaks)
    assert "still running" not in capsys.readouterr().out, "a stream that speaks for itself gets no note"
