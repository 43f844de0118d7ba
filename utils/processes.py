"""Find processes by a marker in their environment, and stop processes without signalling a reused PID.

Every function works on `psutil.Process` handles: psutil checks a handle's identity (PID and creation
time) before it sends a signal, so a process that has ended and whose PID was given to another program
is never signalled. A zombie counts as stopped: it has ended, only its parent has not collected it yet.

    python -m utils.processes stop VAR VALUE

stops every process whose environment has VAR=VALUE, except this command and its ancestors, looking again until
none is left (a marked process may start another while it is being stopped).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterable, Sequence

import psutil

#: Longest single wait, in seconds, between two checks for processes that are not children of this one.
_POLL = 0.1


def alive(proc: psutil.Process) -> bool:
    """Whether the process of this handle (not a later one with its PID) is running and not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:
        return True


def marked(var: str, value: str | None = None) -> list[psutil.Process]:
    """Live processes other than this one whose environment has `var` (equal to `value` when given)."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
        except (psutil.Error, OSError):  # gone, a zombie, or another user's
            continue
        if var in env and (value is None or env[var] == value) and alive(proc):
            found.append(proc)
    return found


def send(procs: Iterable[psutil.Process], sig: int) -> None:
    """Send `sig` to each process still running; one that has ended (or whose PID was reused) is skipped."""
    for proc in procs:
        if alive(proc):
            try:
                proc.send_signal(sig)  # psutil raises NoSuchProcess if the PID now names another process
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


def stopped(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes that are stopped (state T: a SIGSTOP, or Ctrl-Z in a terminal): they run nothing until continued."""
    found = []
    for proc in procs:
        try:
            if proc.status() == psutil.STATUS_STOPPED:
                found.append(proc)
        except psutil.Error:  # ended, or another user's
            continue
    return found


def terminate(procs: Sequence[psutil.Process]) -> None:
    """SIGTERM each process still running, then SIGCONT the stopped ones: a stopped process acts on a signal
    (other than SIGKILL) only once it is continued."""
    send(procs, signal.SIGTERM)
    send(stopped(procs), signal.SIGCONT)


def wait(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to `timeout` s for the processes to end, collecting this process's children; return the rest."""
    deadline = time.monotonic() + timeout
    left = list(procs)
    while True:
        _, left = psutil.wait_procs(left, timeout=max(0.0, min(_POLL, deadline - time.monotonic())))
        left = [p for p in left if alive(p)]  # another parent's zombie has ended too
        if not left or time.monotonic() >= deadline:
            return left


def stop(procs: Sequence[psutil.Process], grace: float = 3.0) -> list[psutil.Process]:
    """SIGTERM (and continue) the processes, SIGKILL those left after `grace` s, wait for all; return any left."""
    terminate(procs)
    left = wait(procs, grace)
    send(left, signal.SIGKILL)
    return wait(left, grace)


def stop_marked(
    var: str, value: str, spared: Iterable[psutil.Process] = (), rounds: int = 10
) -> tuple[int, list[psutil.Process]]:
    """Stop every process marked `var`=`value` but `spared`, looking again after each stop until a look finds none
    (at most `rounds` looks): a marked process can start another between a look and its signal (a build's make, a
    shell's loop), and that newcomer is marked too. Return (how many were stopped, those that could not be)."""
    spared, done, left = set(spared), 0, []
    for _ in range(rounds):
        targets = [p for p in marked(var, value) if p not in spared and p not in left]
        if not targets:
            return done, left
        still = stop(targets)
        done, left = done + len(targets) - len(still), left + still
    return done, left + [p for p in marked(var, value) if p not in spared and p not in left]


def main(argv: Sequence[str]) -> int:
    """The command line: `stop VAR VALUE` stops every process marked VAR=VALUE but this one and its ancestors."""
    if len(argv) != 3 or argv[0] != "stop":
        print(
            "usage: python -m utils.processes stop VAR VALUE\n"
            "  stops every process whose environment has VAR=VALUE, except this command and its ancestors",
            file=sys.stderr,
        )
        return 2
    _, var, value = argv
    me = psutil.Process()
    done, left = stop_marked(var, value, spared={me, *me.parents()})
    if done:
        print(f"[test] stopped {done} process(es) left over by the run", file=sys.stderr)
    if left:
        print(
            f"[test] could not stop {len(left)} process(es) marked {var}={value}: PIDs "
            f"{sorted(p.pid for p in left)}; stop them by hand (kill -9 PID)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
