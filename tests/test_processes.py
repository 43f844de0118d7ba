"""Processes are found by their environment's marker and stopped without ever signalling a reused PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from utils import processes

REPO = Path(__file__).resolve().parent.parent
SLEEPER = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(120)"]
#: A child that starts a grandchild with VAR=VALUE (the arguments) in its environment, prints its PID and waits.
PARENT_OF_MARKED = """
import os, subprocess, sys, time
env = dict(os.environ, **{sys.argv[1]: sys.argv[2]})
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
print(child.pid, flush=True)
time.sleep(120)
"""


def start(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a process that prints one line when it is ready, and wait for that line (kept as `.first_line`)."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    proc.first_line = proc.stdout.readline().strip()
    return proc


@pytest.fixture
def var() -> str:
    """A marker variable no other process has."""
    return f"COURSE_TEST_MARK_{uuid.uuid4().hex[:8].upper()}"


def test_marked_finds_a_marked_grandchild_and_ignores_unmarked_processes(var):
    parent = start([sys.executable, "-c", PARENT_OF_MARKED, var, "blue"])  # its line: the grandchild's PID
    grandchild = psutil.Process(int(parent.first_line))
    unmarked = start(SLEEPER)
    other_value = start(SLEEPER, env=dict(os.environ, **{var: "red"}))
    try:
        assert processes.marked(var, "blue") == [grandchild]
        assert set(processes.marked(var)) == {grandchild, psutil.Process(other_value.pid)}
        assert processes.marked(var, "green") == []
    finally:
        assert (
            processes.stop(
                [psutil.Process(parent.pid), grandchild, psutil.Process(unmarked.pid), psutil.Process(other_value.pid)]
            )
            == []
        )
    assert not {parent.pid, unmarked.pid, other_value.pid} & {c.pid for c in psutil.Process().children()}


def test_marked_leaves_out_the_caller_and_zombies(var):
    marked_env = dict(os.environ, **{var: "x"})
    me = subprocess.run(
        [sys.executable, "-c", f"from utils import processes; print(processes.marked({var!r}))"],
        env=marked_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert me.stdout.strip() == "[]", me.stderr
    zombie = subprocess.Popen([sys.executable, "-c", "pass"], env=marked_env)
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # it has ended but is not collected: a zombie
    try:
        assert psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE
        assert processes.marked(var) == []
    finally:
        zombie.wait()


def test_stop_terminates_then_kills_and_waits_for_everything(var):
    polite = start(SLEEPER)
    stubborn = start(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(120)",
        ]
    )
    handles = [psutil.Process(polite.pid), psutil.Process(stubborn.pid)]
    assert processes.stop(handles, grace=0.5) == []
    # Both were collected by stop() (they are this process's children): nothing is left, not even a zombie.
    assert not any(p.pid in (polite.pid, stubborn.pid) for p in psutil.Process().children())
    assert [h.returncode for h in handles] == [-signal.SIGTERM, -signal.SIGKILL]


def test_stop_of_a_process_that_has_ended_and_was_collected_does_nothing():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    handle = psutil.Process(proc.pid)  # taken while the child is still there (alive or a zombie)
    proc.wait()
    assert processes.stop([handle]) == []


def reuse_pid(pid: int) -> subprocess.Popen | None:
    """Start a sleeper that gets `pid`, by setting the PID the kernel hands out next (root only)."""
    for _ in range(20):  # another program may start a process in between: try again
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        except OSError:
            return None
        proc = start(SLEEPER)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


@contextlib.contextmanager
def reused_handle():
    """A handle of a process that has ended, and a sleeper that now has its PID (skips where PIDs cannot be chosen)."""
    old = subprocess.Popen([sys.executable, "-c", "pass"])
    handle = psutil.Process(old.pid)
    old.wait()
    newcomer = reuse_pid(old.pid)
    if newcomer is None:
        pytest.skip("cannot choose the next PID here (needs root and a writable /proc/sys/kernel/ns_last_pid)")
    try:
        assert newcomer.pid == handle.pid
        yield handle, newcomer
    finally:
        newcomer.kill()
        newcomer.wait()


def test_a_reused_pid_is_never_signalled():
    with reused_handle() as (handle, newcomer):
        assert processes.stop([handle], grace=0.5) == []
        processes.send([handle], signal.SIGKILL)
        assert newcomer.poll() is None, "a process that reused the PID was signalled"


def test_cli_stops_marked_processes_but_not_itself_or_its_ancestors(var):
    marked_env = dict(os.environ, **{var: "run-1"})
    victims = [start(SLEEPER, env=marked_env) for _ in range(2)]
    bystander = start(SLEEPER)
    try:
        # The command runs under a shell that carries the marker too: an ancestor, so it is spared.
        done = subprocess.run(
            ["bash", "-c", f'"{sys.executable}" -m utils.processes stop {var} run-1; echo "shell $?"'],
            env=marked_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.strip() == "shell 0", done.stderr
        assert "[test] stopped 2 process(es) left over by the run" in done.stderr
        assert [v.wait(timeout=1) for v in victims] == [-signal.SIGTERM] * 2
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m utils.processes ARGS`, run from the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "utils.processes", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_cli_says_nothing_when_nothing_is_left_and_explains_its_usage(var):
    done = cli("stop", var, "none")
    assert (done.returncode, done.stderr) == (0, "")
    done = cli("kill")
    assert done.returncode == 2 and "usage: python -m utils.processes stop VAR VALUE" in done.stderr


def sigstop(pid: int) -> psutil.Process:
    """SIGSTOP a process and wait until it is in the stopped state (the signal is delivered asynchronously)."""
    os.kill(pid, signal.SIGSTOP)
    handle, deadline = psutil.Process(pid), time.monotonic() + 10
    while handle.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handle.status() == psutil.STATUS_STOPPED
    return handle


def test_a_stopped_process_is_ended_by_sigterm_at_once_not_after_the_grace():
    """SIGTERM waits in a stopped (SIGSTOP) process's queue; stop() continues it so the SIGTERM acts at once."""
    sleeper = start(SLEEPER)
    handle = sigstop(sleeper.pid)
    started = time.monotonic()
    assert processes.stop([handle], grace=10) == []
    assert time.monotonic() - started < 5, "a stopped process waited for the SIGKILL after the grace"
    assert handle.returncode == -signal.SIGTERM, "ended by the SIGTERM, not the SIGKILL"


def test_stopped_finds_only_processes_in_the_stopped_state():
    running, stopped = start(SLEEPER), start(SLEEPER)
    sigstop(stopped.pid)
    try:
        handles = [psutil.Process(running.pid), psutil.Process(stopped.pid)]
        assert processes.stopped(handles) == [handles[1]]
    finally:
        assert processes.stop([psutil.Process(p.pid) for p in (running, stopped)]) == []


def test_cli_also_stops_what_a_marked_process_started_while_it_was_being_stopped(var):
    """A marked process can start another after the look that found it (a build's make, a shell's loop): here a
    shell starts one when its SIGTERM comes, which no single look can find. The command looks again until none is
    left."""
    spawner = subprocess.Popen(
        [
            "bash",
            "-c",
            'trap "sleep 60 >/dev/null & echo spawned \\$!; exit 0" TERM; echo ready; while :; do sleep 0.2; done',
        ],
        env=dict(os.environ, **{var: "run-2"}),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert spawner.stdout.readline().strip() == "ready"
        done = cli("stop", var, "run-2")
        assert done.returncode == 0, done.stderr
        assert spawner.wait(timeout=10) == 0
        said = spawner.stdout.read().split()
        assert said[:1] == ["spawned"], said  # the newcomer was started after the shell's SIGTERM
        assert processes.marked(var, "run-2") == [], "the newcomer (marked too) runs on"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(spawner.pid, signal.SIGKILL)
        for proc in processes.marked(var, "run-2"):
            with contextlib.suppress(psutil.Error):
                proc.kill()
