"""The SageMaker job contract seen from a training script: hyperparameters, data channel, folders, hosts.

In a job SageMaker passes hyperparameters as `--key value` arguments and SM_HPS, the data channels as
SM_CHANNEL_<NAME> folders, the model folder as SM_MODEL_DIR and the hosts as SM_HOSTS/SM_CURRENT_HOST;
outside a job the same script runs with local defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def dashed(argv: Sequence[str]) -> list[str]:
    """Option names with dashes: SageMaker passes `--batch_size 64` where the script declares `--batch-size`."""
    out = []
    for item in argv:
        if item.startswith("--") and "_" in item.split("=", 1)[0]:
            name, eq, value = item.partition("=")
            item = name.replace("_", "-") + eq + value
        out.append(item)
    return out


def sagemaker_defaults(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> dict[str, str]:
    """The script's options found in SM_HPS (a JSON object SageMaker sets in a job), as parser defaults."""
    text = env.get("SM_HPS", "")
    if not text:
        return {}
    try:
        hps = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f'SM_HPS is not valid JSON ({exc}); it should look like {{"epochs": 5}}') from exc
    if not isinstance(hps, dict):
        raise ValueError(f"SM_HPS should be a JSON object of hyperparameters, got {type(hps).__name__}")
    known = {a.dest for a in parser._actions}
    # Strings, so that argparse converts them with each option's type, as it does for the command line.
    return {k.replace("-", "_"): str(v) for k, v in hps.items() if k.replace("-", "_") in known}


def parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """Parse `argv` over defaults from SM_HPS; options the script does not know are reported, not fatal; a value
    outside an option's `choices` exits with argparse's usage line, wherever it came from.

    SageMaker adds arguments of its own to some containers (e.g. `--model_dir s3://...`): a script
    that rejected them could not run there unchanged.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    env = os.environ if env is None else env
    parser.set_defaults(**sagemaker_defaults(parser, env))
    args, unknown = parser.parse_known_args(dashed(argv))
    if unknown:
        print(f"ignoring arguments this script does not use: {' '.join(unknown)}", file=sys.stderr, flush=True)
    # argparse checks `choices` on the command line only, not on a default: a value from SM_HPS is checked here, as
    # SageMaker's own launch (hyperparameters passed as arguments) would have argparse check it.
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list) else [value]  # an option with nargs gives a list
        if action.choices is not None and value is not None and any(v not in action.choices for v in values):
            allowed = ", ".join(repr(c) for c in action.choices)
            parser.error(
                f"argument {'/'.join(action.option_strings)}: invalid choice: {value!r} (choose from {allowed})"
            )
    return args


SAGEMAKER_CHECKPOINTS = "/opt/ml/checkpoints"  # synced to S3 by SageMaker when a job sets CheckpointConfig


@dataclass
class JobPaths:
    """Data file, model folder, output folder and checkpoint folder of one training run."""

    on_sagemaker: bool
    data_file: Path | None
    model_dir: Path | None
    output_dir: Path | None
    checkpoint_dir: Path | None


def job_paths(checkpoint_dir: str = "", env: Mapping[str, str] | None = None) -> JobPaths:
    """Read SM_CHANNEL_TRAIN (every .csv file in it, joined in name order when there are several), SM_MODEL_DIR,
    SM_OUTPUT_DATA_DIR (in a SageMaker job) or use local defaults."""
    env = os.environ if env is None else env
    on_sagemaker = "SM_MODEL_DIR" in env or "SM_CHANNEL_TRAIN" in env
    data_file = None
    if env.get("SM_CHANNEL_TRAIN"):
        channel = Path(env["SM_CHANNEL_TRAIN"])
        csvs = sorted(channel.glob("*.csv"))
        if not csvs:
            raise FileNotFoundError(
                f"the train channel {channel} holds no .csv file: upload the series CSV "
                "(data/seattle_hourly_temperature_2010.csv or one in its format) to that S3 prefix"
            )
        data_file = csvs[0] if len(csvs) == 1 else joined_csv(csvs)
    # In a job the model folder is /opt/ml/model and the checkpoints /opt/ml/checkpoints: the latter is found
    # next to the former, so that a rehearsal of the job (utils.rehearsal), whose /opt/ml is a folder of
    # its own, never writes this machine's /opt/ml.
    default = (
        str(Path(env["SM_MODEL_DIR"]).parent / "checkpoints") if env.get("SM_MODEL_DIR") else SAGEMAKER_CHECKPOINTS
    )
    ckpt = checkpoint_dir or (default if on_sagemaker else "")
    return JobPaths(
        on_sagemaker=on_sagemaker,
        data_file=data_file,
        model_dir=Path(env["SM_MODEL_DIR"]) if env.get("SM_MODEL_DIR") else None,
        output_dir=Path(env["SM_OUTPUT_DATA_DIR"]) if env.get("SM_OUTPUT_DATA_DIR") else None,
        checkpoint_dir=Path(ckpt) if ckpt else None,
    )


def joined_csv(parts: Sequence[Path]) -> Path:
    """One CSV of a channel's several files (a series uploaded in parts), joined in name order with one header, in a
    new temporary folder: a script reads the whole channel, not its first file. Parts with different headers are
    refused."""
    import tempfile

    header, rows = None, []
    for part in parts:
        lines = Path(part).read_text().splitlines(keepends=True)
        if not lines:
            continue
        if header is None:
            header = lines[0]
        elif lines[0] != header:
            raise ValueError(
                f"the train channel's files do not share one header ({parts[0].name}: {header.strip()!r}, "
                f"{Path(part).name}: {lines[0].strip()!r}): upload one series, in one file or in parts of it"
            )
        rows += lines[1:]
        if rows and not rows[-1].endswith("\n"):
            rows[-1] += "\n"
    target = Path(tempfile.mkdtemp(prefix="channel-")) / "train.csv"
    target.write_text((header or "") + "".join(rows))
    return target


@dataclass
class Cluster:
    """The hosts of a job and which one this process runs on (SM_HOSTS, SM_CURRENT_HOST)."""

    hosts: list[str]
    current_host: str

    @property
    def index(self) -> int:
        """Position of this host in the job's host list (0 is the chief)."""
        return self.hosts.index(self.current_host)


def cluster(env: Mapping[str, str] | None = None) -> Cluster | None:
    """The job's hosts read from SM_HOSTS and SM_CURRENT_HOST, or None outside a SageMaker job."""
    env = os.environ if env is None else env
    if "SM_HOSTS" not in env and "SM_CURRENT_HOST" not in env:
        return None
    try:
        hosts = json.loads(env.get("SM_HOSTS", ""))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f'SM_HOSTS is not valid JSON ({exc}); SageMaker sets it as a list, e.g. ["algo-1", "algo-2"]'
        ) from exc
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise ValueError(f"SM_HOSTS must be a non-empty JSON list of host names, got {env.get('SM_HOSTS')!r}")
    current = env.get("SM_CURRENT_HOST", "")
    if current not in hosts:
        raise ValueError(f"SM_CURRENT_HOST={current!r} is not in SM_HOSTS={hosts}: set it to one of those names")
    return Cluster(hosts=hosts, current_host=current)


#: Port of every host's tf.distribute server in a job: each instance is a machine of its own, so all listen on the
#: same port (as TFJob's pods do). Where the hosts share one address (the loopback rehearsal), the variable
#: MWMS_BASE_PORT is set, and host i listens on MWMS_BASE_PORT + i.
MWMS_PORT = 2222


def tf_config_from_cluster(found: Cluster, base_port: int | None = None) -> dict:
    """The TF_CONFIG of this host in a MultiWorkerMirroredStrategy cluster of the job's hosts: port MWMS_PORT on
    every host, or base_port + i on host i (hosts that share an address)."""
    ports = [MWMS_PORT] * len(found.hosts) if base_port is None else [base_port + i for i in range(len(found.hosts))]
    return {
        "cluster": {"worker": [f"{host}:{port}" for host, port in zip(found.hosts, ports, strict=True)]},
        "task": {"type": "worker", "index": found.index},
    }


def set_tf_config(env: MutableMapping[str, str] | None = None) -> Cluster:
    """This worker's place in the cluster: from TF_CONFIG if set, else built from SM_HOSTS (and then set)."""
    env = os.environ if env is None else env
    if env.get("TF_CONFIG"):
        try:
            config = json.loads(env["TF_CONFIG"])
            chiefs, workers = list(config["cluster"].get("chief", [])), list(config["cluster"].get("worker", []))
            kind, index = str(config["task"].get("type", "worker")), int(config["task"]["index"])
        except (AttributeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"TF_CONFIG is not a worker's cluster description ({type(exc).__name__}: {exc}); it should look like "
                '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}'
            ) from exc
        if kind not in ("chief", "worker"):
            raise ValueError(
                f"TF_CONFIG's task type is {kind!r}: this script runs MultiWorkerMirroredStrategy, whose tasks are "
                "a 'chief' (at most one) and 'worker's"
            )
        members = chiefs if kind == "chief" else workers
        if not 0 <= index < len(members):
            raise ValueError(f"TF_CONFIG's task index {index} is not one of the {len(members)} {kind} task(s) it lists")
        # The chief, where there is one, is task 0 and the workers follow, as TensorFlow numbers them
        # (multi_worker_util.id_in_cluster); a TFJob with a Chief replica sets TF_CONFIG this way (lesson 09).
        rank = index if kind == "chief" else len(chiefs) + index
        hosts = chiefs + workers
        return Cluster(hosts=hosts, current_host=hosts[rank])
    found = cluster(env)
    if found is None:  # one worker on its own: the strategy needs no TF_CONFIG
        return Cluster(hosts=["localhost"], current_host="localhost")
    base = int(env["MWMS_BASE_PORT"]) if env.get("MWMS_BASE_PORT") else None
    env["TF_CONFIG"] = json.dumps(tf_config_from_cluster(found, base))
    return found


def expected_world_size(env: Mapping[str, str] | None = None) -> int | None:
    """The ranks an MPI job asks for: SM_HOST_COUNT × process_count_per_node (SM_DISTRIBUTED_CONFIG, else SM_NUM_GPUS,
    else 1, as SDK v3's mpi_driver counts them); None outside a SageMaker MPI job."""
    env = os.environ if env is None else env
    if not env.get("SM_HOST_COUNT") or not env.get("SM_DISTRIBUTED_CONFIG"):
        return None
    try:
        config = json.loads(env["SM_DISTRIBUTED_CONFIG"]) or {}
        per_node = int(config.get("process_count_per_node") or 0) or int(env.get("SM_NUM_GPUS") or 0) or 1
        return int(env["SM_HOST_COUNT"]) * per_node
    except (AttributeError, TypeError, ValueError):
        return None


def check_world_size(size: int, env: Mapping[str, str] | None = None) -> None:
    """Stop a job whose launcher started another number of ranks than it asks for (SDK v3's mpi_driver passes
    `-np process_count_per_node`, so without a correcting `-np` a job of H instances runs on one): one line that says
    what to do, instead of paying for H instances and training on one."""
    expected = expected_world_size(env)
    if expected is not None and size != expected:
        raise SystemExit(
            f"this job runs {size} rank(s) but asks for {expected} (SM_HOST_COUNT × process_count_per_node): the "
            f"mpirun line's -np is wrong. Add -np {expected} to MPI(mpi_additional_options=[...]) (the last -np wins)"
        )
