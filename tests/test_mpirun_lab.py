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
from conftest import needs_horovod

from utils import launch, netlab, rank_imports, rehearsal

WHY_NOT = netlab.mpi_support()
# CI runs as root with Open MPI and sshd installed by `make env`: there these tests must run, never skip.
needs_mpi_lab = pytest.mark.skipif(os.environ.get("CI") != "true" and bool(WHY_NOT), reason=WHY_NOT)


HOSTS = ["algo-1", "algo-2"]

HANG = """
import os, sys, time
import horovod.tensorflow as hvd
hvd.init()
extras = [m for m in ("matplotlib", "sklearn") if m in sys.modules]  # what Keras imported beside TF
mine = os.path.join(os.environ["HANG"], f"rank-{hvd.rank()}")
with open(mine + ".part", "w") as f:
    f.write(",".join(extras))
os.rename(mine + ".part", mine)  # whole when it appears: the test kills the run once all four are there
time.sleep(600)
"""


def sdk_line(extra_options: list[str], entry: str = "mpi_ranks.py") -> list[str]:
    """The line SDK v3's mpi_driver builds on algo-1 for 2 instances x 2 processes, run with this Python (the
    container's /opt/venv/bin/python3 is not on this machine): the only change to it."""
    line = rehearsal.driver_command(
        {"process_count_per_node": 2, "mpi_additional_options": extra_options},
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
@needs_horovod
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
        # the ranks on both hosts imported Keras without its extras: COURSE_LEAN_RANKS came through mpirun and sshd
        assert {f.name: f.read_text() for f in started.glob("rank-?")} == {f"rank-{r}": "" for r in range(4)}
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
