"""SageMaker's MPI launch run for real: the `mpirun` line that SDK v3's own mpi_driver builds, run by Open MPI on
`algo-1` of the network lab, reaching `algo-2` through its sshd with keys made for the run; nothing left after a
killed mpirun. The driver's `-np` bug and the course's correction, seen in the ranks Open MPI starts, are asserted
by lesson 07's deep dive, which CI executes (and where CI must be able to run it)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from utils import launch, netlab, rank_imports, rehearsal

WHY_NOT = netlab.mpi_support()
# CI runs as root with Open MPI and sshd installed by `make env`: there these tests must run, never skip.
needs_mpi_lab = pytest.mark.skipif(os.environ.get("CI") != "true" and bool(WHY_NOT), reason=WHY_NOT)


HOSTS = ["algo-1", "algo-2"]

#: A rank without TensorFlow: MPI initialised (mpi4py's MPI_Init, then a barrier: all four are in one MPI world, as
#: Horovod's would be), it writes whether the course's rank hook is on (COURSE_LEAN_RANKS through mpirun and sshd, the
#: hook from the course's .pth) and its temporary folder, then waits. What the hook leaves out of TensorFlow's import
#: is tests/test_rank_imports.py's to check.
HANG = """
import os, sys, tempfile, time
from mpi4py import MPI
world = MPI.COMM_WORLD
world.Barrier()
hook = any(type(f).__name__ == "ExtrasLeftOut" for f in sys.meta_path)
mine = os.path.join(os.environ["HANG"], f"rank-{world.Get_rank()}")
with open(mine + ".part", "w") as f:
    f.write(f"{os.environ.get('COURSE_LEAN_RANKS')} {hook} {world.Get_size()} {tempfile.gettempdir()}")
os.rename(mine + ".part", mine)  # whole when it appears: the test kills the run once all four are there
time.sleep(600)
"""


def sdk_line(extra_options: list[str], entry: str = "mpi_ranks.py", per_node: int = 2) -> list[str]:
    """The line SDK v3's mpi_driver builds on algo-1 for 2 instances x `per_node` processes, run with this Python
    (the container's /opt/venv/bin/python3 is not on this machine): the only change to it."""
    line = rehearsal.driver_command(
        {"process_count_per_node": per_node, "mpi_additional_options": extra_options},
        {"entry_script": entry},
        HOSTS,
        {"steps": 3},
    )
    return [sys.executable if token == rehearsal.CONTAINER_PYTHON else token for token in line]


def leftovers(folder: Path, mark: str) -> list[str]:
    """Processes of this run still alive: the lab's sshd (their configuration is in its folder), and mpirun, orted
    and ranks on either host (every one of them carries the run's HANG variable)."""
    found = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        line = " ".join(p.info["cmdline"] or [])
        if str(folder) in line or mark in (p.info["environ"] or {}).get("HANG", ""):
            found.append(line[:120])
    return found


def test_the_sdk_line_asks_for_P_ranks_where_H_times_P_are_meant():
    """What Open MPI does with each line (2 ranks on algo-1 from the SDK's own, 4 across both hosts from the
    corrected one, through algo-2's sshd, identical weights) is asserted where lesson 07's deep dive runs them, which
    CI executes; test_ci_can_run_mpirun_on_the_lab makes sure that it runs there."""
    plain = sdk_line([])
    assert plain[plain.index("-np") + 1] == "2" and "algo-1:2,algo-2:2" in plain
    fixed = sdk_line(["-np", "4"])
    assert rehearsal.ranks_in(plain) == 2 and rehearsal.ranks_in(fixed) == 4


def test_ci_can_run_mpirun_on_the_lab():
    """CI runs as root with Open MPI and sshd installed by `make env`: lesson 07's mpirun runs must happen there."""
    if os.environ.get("CI") != "true":
        pytest.skip("outside CI the lesson says why it cannot run mpirun here, and goes on")
    assert not WHY_NOT, WHY_NOT


@needs_mpi_lab
def test_mpirun_killed_mid_run_is_reported_and_nothing_is_left(tmp_path, monkeypatch):
    monkeypatch.delenv(rank_imports.VAR, raising=False)  # the launcher's default, whatever this shell says
    (tmp_path / "hang.py").write_text(textwrap.dedent(HANG))
    started = tmp_path / "started"
    started.mkdir()

    def kill_mpirun_once_every_rank_runs() -> None:
        deadline = time.monotonic() + 120
        while len(list(started.glob("rank-?"))) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        for p in psutil.process_iter(["name", "environ"]):
            if p.info["name"] == "mpirun" and str(tmp_path) in (p.info["environ"] or {}).get("HANG", ""):
                p.send_signal(signal.SIGKILL)

    with netlab.Lab(2, "1gbit", names=HOSTS) as lab:
        lab.start_sshd(envs=[{"HANG": str(started)}] * 2)
        folder = lab._dir
        killer = threading.Thread(target=kill_mpirun_once_every_rank_runs)
        killer.start()
        with pytest.raises(launch.WorkerError) as err:
            lab.mpirun(
                sdk_line(["-np", "4"], "hang.py"), env={"HANG": str(started)}, cwd=tmp_path, timeout=180, stream=False
            )
        killer.join()
        assert len(list(started.glob("rank-?"))) == 4, "every rank had started, 2 of them on algo-2 through ssh"
        # the ranks on both hosts, in one MPI world of 4, have the rank hook on: COURSE_LEAN_RANKS came through mpirun
        # and sshd. Each host's ranks write their temporary files to that host's folder in the lab's, gone with it:
        # algo-2's ranks, started by its sshd, too (an ssh session gets no TMPDIR from its client: /tmp otherwise).
        tmp = [f"{folder}/tmp{h}" for h in (0, 0, 1, 1)]  # ranks 0 and 1 on algo-1, 2 and 3 on algo-2
        assert {f.name: f.read_text() for f in started.glob("rank-?")} == {
            f"rank-{r}": f"1 True 4 {tmp[r]}" for r in range(4)
        }
        assert "killed by signal SIGKILL" in err.value.reason, err.value.reason
    assert not folder.exists(), "the lab's keys, configs and logs are gone"
    deadline = time.monotonic() + 10
    while (left := leftovers(folder, str(started))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"still running after the lab stopped: {left}"


@needs_mpi_lab
def test_mpirun_needs_sshd_first_and_a_real_mpirun_line():
    with netlab.Lab(2, None, names=HOSTS) as lab:
        with pytest.raises(netlab.LabError, match="start_sshd"):
            lab.mpirun(["mpirun", "-np", "2", "true"])
        with pytest.raises(ValueError, match="2 hosts need 2 environments"):
            lab.start_sshd(envs=[{}])
        lab.start_sshd()
        with pytest.raises(ValueError, match="not an mpirun line"):
            lab.mpirun(["python", "x.py"])


#: A rank without TensorFlow or MPI (`python -m mpi4py` only runs the script; nothing here calls MPI_Init): a process
#: that mpirun or algo-2's sshd started, its PID and host written, then it waits.
WAIT = """
import os, socket, time
mine = os.path.join(os.environ["HANG"], "rank-" + os.environ["OMPI_COMM_WORLD_RANK"])
with open(mine + ".part", "w") as f:
    f.write(f"{os.getpid()} {socket.gethostname()}")
os.rename(mine + ".part", mine)
time.sleep(600)
"""


def _signal_algo2_rank(tmp_path: Path, sig: int) -> dict:
    """Run the SDK's line for 2 instances x 1 process (rank 0 on algo-1, rank 1 on algo-2, started through
    algo-2's sshd) and send `sig` to rank 1 once both ranks run; return the WorkerError, when the signal went, and
    whether anything of the run was left after the lab stopped."""
    (tmp_path / "wait.py").write_text(textwrap.dedent(WAIT))
    started = tmp_path / "started"
    started.mkdir()
    sent: dict = {}

    def signal_rank_1() -> None:
        deadline = time.monotonic() + 60
        while len(list(started.glob("rank-?"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        pid, host = (started / "rank-1").read_text().split()
        sent["host"], sent["at"] = host, time.monotonic()
        os.kill(int(pid), sig)

    with netlab.Lab(2, None, names=HOSTS) as lab:
        lab.start_sshd(envs=[{"HANG": str(started)}] * 2)
        folder = lab._dir
        signaller = threading.Thread(target=signal_rank_1)
        signaller.start()
        with pytest.raises(launch.WorkerError) as err:
            lab.mpirun(
                rehearsal.keep_last_np(sdk_line(["-np", "2"], "wait.py", per_node=1), rehearsal.mpirun_version())[0],
                env={"HANG": str(started)},
                cwd=tmp_path,
                timeout=40,
                stream=False,
                log_dir=tmp_path / "logs",
            )
        sent["after"] = time.monotonic() - sent.get("at", time.monotonic())
        signaller.join()
    deadline = time.monotonic() + 10
    while (left := leftovers(folder, str(started))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"error": err.value, "left": left, **sent}


@needs_mpi_lab
def test_a_stopped_rank_on_another_host_fails_the_run_naming_its_host(tmp_path):
    """SIGSTOP of the rank that algo-2's sshd started (not a descendant of mpirun): the launcher sees it stopped
    on its own host and fails the run after STOPPED_AFTER s, naming rank 1 on algo-2, not the timeout."""
    done = _signal_algo2_rank(tmp_path, signal.SIGSTOP)
    err = done["error"]
    assert done["host"] == "algo-2"
    assert err.rank == 1 and "rank 1 on algo-2 was stopped" in err.reason, err.reason
    assert done["after"] < launch.STOPPED_AFTER + 8, f"failed {done['after']:.1f} s after the stop: {err.reason}"
    assert not done["left"], f"still running after the lab stopped: {done['left']}"


@needs_mpi_lab
def test_a_killed_rank_on_another_host_is_named_not_mpirun(tmp_path):
    """SIGKILL of algo-2's rank: mpirun exits 137; the failure names rank 1 on algo-2, from Open MPI's report."""
    done = _signal_algo2_rank(tmp_path, signal.SIGKILL)
    err = done["error"]
    headline = str(err).splitlines()[0]
    assert err.rank == 1 and "rank 1 on algo-2 was killed by signal SIGKILL" in headline, headline
    assert done["after"] < 15 and not done["left"], (done["after"], done["left"])
