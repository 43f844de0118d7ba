"""SageMaker's MPI launch run for real: the `mpirun` line that SDK v3's own mpi_driver builds, run by Open MPI on
`algo-1` of the network lab, reaching `algo-2` through its sshd with keys made for the run; the driver's `-np` bug
and the course's correction, seen in the ranks Open MPI starts; and nothing left after a killed mpirun."""

from __future__ import annotations

import json
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

from utils import launch, netlab, paths, rehearsal

WHY_NOT = netlab.mpi_support()
# CI runs as root with Open MPI and sshd installed by `make env`: there these tests must run, never skip.
needs_mpi_lab = pytest.mark.skipif(os.environ.get("CI") != "true" and bool(WHY_NOT), reason=WHY_NOT)


HOSTS = ["algo-1", "algo-2"]

HANG = """
import os, time
import horovod.tensorflow as hvd
hvd.init()
open(os.path.join(os.environ["HANG"], f"rank-{hvd.rank()}"), "w").close()
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


@pytest.fixture
def lab():
    with netlab.Lab(2, "1gbit", names=HOSTS) as lab:
        lab.start_sshd(envs=[{"SM_CURRENT_HOST": h, "SM_HOSTS": json.dumps(HOSTS)} for h in HOSTS])
        yield lab


def leftovers(folder: Path, mark: str) -> list[str]:
    """Processes of this run still alive: the lab's sshd (their configuration is in its folder), and mpirun, orted
    and ranks on either host (every one of them carries the run's HANG variable)."""
    found = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        line = " ".join(p.info["cmdline"] or [])
        if str(folder) in line or mark in (p.info["environ"] or {}).get("HANG", ""):
            found.append(line[:120])
    return found


@needs_mpi_lab
@needs_horovod
def test_the_sdk_line_starts_P_ranks_and_the_corrected_one_H_times_P_over_ssh(lab):
    plain = sdk_line([])
    assert plain[plain.index("-np") + 1] == "2" and "algo-1:2,algo-2:2" in plain
    algo_1 = {"SM_CURRENT_HOST": "algo-1"}  # the driver's own variables on algo-1, which mpirun inherits
    ranks = lab.mpirun(plain, env=algo_1, cwd=paths.WORKERS, timeout=240, stream=False).records()
    assert [r["size"] for r in ranks] == [2, 2], "the driver's own line: -np 2, Open MPI starts 2 ranks"
    assert {r["host"] for r in ranks} == {"algo-1"}, "filled by slot: both ranks on algo-1, algo-2 idle"

    fixed = lab.mpirun(sdk_line(["-np", "4"]), env=algo_1, cwd=paths.WORKERS, timeout=240, stream=False).records()
    assert [r["rank"] for r in fixed] == [0, 1, 2, 3] and {r["size"] for r in fixed} == {4}
    assert all(r["mpi"] for r in fixed), "Horovod's controller is MPI here, not Gloo"
    assert [r["host"] for r in fixed] == ["algo-1", "algo-1", "algo-2", "algo-2"]
    # a rank on algo-2 was started through algo-2's sshd, and sees algo-2's own variables, as on SageMaker
    assert [r["sm_current_host"] for r in fixed] == [r["host"] for r in fixed]
    assert {r["local_size"] for r in fixed} == {2} and all(r["argv"] == ["--steps", "3"] for r in fixed)
    assert len({r["checksum"] for r in fixed}) == 1, f"the ranks' weights differ: {fixed}"


@needs_mpi_lab
@needs_horovod
def test_mpirun_killed_mid_run_is_reported_and_nothing_is_left(tmp_path):
    (tmp_path / "hang.py").write_text(textwrap.dedent(HANG))
    started = tmp_path / "started"
    started.mkdir()

    def kill_mpirun_once_every_rank_runs() -> None:
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < 4 and time.monotonic() < deadline:
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
        assert len(list(started.iterdir())) == 4, "every rank had started, 2 of them on algo-2 through ssh"
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
