"""Rehearsed SageMaker jobs (utils.rehearsal): hand-built CreateTrainingJob requests against moto's S3.

The requests have the captured format (SAGEMAKER_NOTES §2): a `code` channel and an `sm_drivers` channel
holding sourcecode.json and distributed.json, put in the bucket here. Every process really runs; the
runs marked `slow` train the course's scripts (small) and still run in the default `pytest`. A spot job
reclaimed after its first epoch and resumed is checked where lesson 07 runs it (section 6: the checkpoint's epoch,
no model from the reclaimed attempt, epochs 2 to N once, every epoch in the history), which CI executes.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
from pathlib import Path

import boto3
import moto
import pytest
from conftest import needs_horovod

from utils import data, netlab, paths, rehearsal, tracking

BUCKET = "rehearsal-bucket"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
IGNORE = [".env", ".git", "__pycache__", ".DS_Store", ".cache", ".ipynb_checkpoints"]
slow = pytest.mark.slow
#: Why an MPI job cannot run on the network lab here ('' where it can: there `where="auto"` takes the lab).
LAB_WHY = rehearsal.placement("auto", 2, mpi=True)[1]
# CI runs as root with Open MPI and sshd (make env installs them): there these run, never skip.
needs_mpi_lab = pytest.mark.skipif(bool(LAB_WHY) and os.environ.get("CI") != "true", reason=LAB_WHY)

#: An entry script that reports what it was given: rank, arguments, folder, channels' files, variables.
SHOW = """
import json, os, pathlib, sys
rank = int(os.environ.get("HOROVOD_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["SM_CURRENT_HOST_RANK"])
channels = {c: sorted(p.name for p in pathlib.Path(os.environ["SM_CHANNEL_" + c.upper()]).iterdir())
            for c in json.loads(os.environ["SM_CHANNELS"])}
if rank == 0:
    pathlib.Path(os.environ["SM_MODEL_DIR"], "model.txt").write_text("from " + os.environ["SM_CURRENT_HOST"])
if "--checkpoint-dir" in sys.argv:
    folder = pathlib.Path(sys.argv[sys.argv.index("--checkpoint-dir") + 1])
    (folder / f"host-{os.environ['SM_CURRENT_HOST_RANK']}.txt").write_text("state")
names = ("SM_", "HOROVOD_", "MWMS_", "TRAINING_", "MY_", "NCCL_", "OMPI_COMM_WORLD_")
env = {k: v for k, v in os.environ.items() if k.startswith(names) or k in ("PYTHONPATH", "OMP_NUM_THREADS")}
found = {"rank": rank, "argv": sys.argv[1:], "cwd": os.getcwd(), "channels": channels, "env": env}
sys.stdout.write("RESULT " + json.dumps(found) + "\\n")  # one write: Open MPI may interleave two
"""


@pytest.fixture(scope="module")
def s3():
    """moto's in-memory S3 (fake credentials, us-east-1) with the course's series in data/train."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            mp.setenv(name, value)
        with moto.mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key="data/train/series.csv", Body=data.DATASET.read_bytes())
            yield client


def put(s3, key: str, body: str | bytes) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body.encode() if isinstance(body, str) else body)


def channel(name: str, uri: str, distribution: str = "FullyReplicated") -> dict:
    source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": distribution}
    return {"ChannelName": name, "DataSource": {"S3DataSource": source}, "InputMode": "File"}


def make_request(
    s3,
    name: str,
    code: Path,
    entry: str,
    *,
    count: int = 1,
    hps: dict | None = None,
    distributed: dict | None = None,
    data_channels: list[dict] | None = None,
    checkpoints: bool = False,
    environment: dict | None = None,
    sdk_drivers: bool = False,
) -> dict:
    """A CreateTrainingJob request as ModelTrainer sends it, its code and sm_drivers channels uploaded."""
    inputs = f"{name}/{name}/input"
    for path in sorted(code.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            put(s3, f"{inputs}/code/{path.relative_to(code).as_posix()}", path.read_bytes())
    sourcecode = {
        "source_dir": str(code),
        "requirements": None,
        "entry_script": entry,
        "command": None,
        "args": None,
        "ignore_patterns": IGNORE,
    }
    put(s3, f"{inputs}/sm_drivers/sourcecode.json", json.dumps(sourcecode))
    put(s3, f"{inputs}/sm_drivers/distributed.json", json.dumps(distributed or {}))
    if sdk_drivers:  # ModelTrainer uploads the SDK's container_drivers in this channel too
        drivers = rehearsal.drivers_dir()
        for path in sorted(drivers.rglob("*.py")):
            put(s3, f"{inputs}/sm_drivers/{path.relative_to(drivers).as_posix()}", path.read_bytes())
    request = {
        "TrainingJobName": name,
        "HyperParameters": {k: v if isinstance(v, str) else json.dumps(v) for k, v in (hps or {}).items()},
        "AlgorithmSpecification": {
            "TrainingInputMode": "File",
            "TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.14-cpu-py310",
            "ContainerEntrypoint": ["/bin/bash"],
            "ContainerArguments": [
                "-c",
                "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && /opt/ml/input/data/sm_drivers/sm_train.sh",
            ],
        },
        "RoleArn": ROLE,
        "InputDataConfig": [
            *(data_channels or []),
            channel("code", f"s3://{BUCKET}/{inputs}/code"),
            channel("sm_drivers", f"s3://{BUCKET}/{inputs}/sm_drivers"),
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/output", "CompressionType": "GZIP"},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": count, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    if checkpoints:
        request["CheckpointConfig"] = {"S3Uri": f"s3://{BUCKET}/checkpoints/{name}", "LocalPath": "/opt/ml/checkpoints"}
    if environment:
        request["Environment"] = environment
    return request


@pytest.fixture(scope="module")
def show_code(tmp_path_factory) -> Path:
    code = tmp_path_factory.mktemp("show-code")
    (code / "show.py").write_text(SHOW)
    return code


@pytest.fixture(scope="module")
def course_code(tmp_path_factory) -> Path:
    """A source_dir as a learner stages it: the course's training scripts and the utils package."""
    code = tmp_path_factory.mktemp("course-code")
    for script in ("train_mwms.py", "train_horovod.py"):
        shutil.copy(paths.SCRIPTS / script, code / script)
    shutil.copytree(paths.REPO_ROOT / "utils", code / "utils", ignore=shutil.ignore_patterns("__pycache__"))
    return code


@pytest.fixture(scope="module")
def tiny(s3, show_code, tmp_path_factory):
    """Two instances of the reporting script: a replicated and a sharded channel, a path hyperparameter."""
    for i in range(3):
        put(s3, f"tiny/train/part-{i}.csv", "x\n")
    for i in range(5):
        put(s3, f"tiny/shards/shard-{i}.csv", "x\n")
    request = make_request(
        s3,
        "tiny-job",
        show_code,
        "show.py",
        count=2,
        checkpoints=True,
        hps={"epochs": 2, "checkpoint-dir": "/opt/ml/checkpoints", "learning_rate": "1e-3"},
        data_channels=[
            channel("train", f"s3://{BUCKET}/tiny/train"),
            channel("shards", f"s3://{BUCKET}/tiny/shards", "ShardedByS3Key"),
        ],
        environment={"MY_OUTPUT": "/opt/ml/output/data/extra", "MY_PLAIN": "kept"},
        sdk_drivers=True,
    )
    root = tmp_path_factory.mktemp("tiny")
    return rehearsal.rehearse(request, s3, root=root, timeout=60, stream=False, where="loopback")


def test_two_instances_are_laid_out_like_opt_ml(tiny):
    assert [f.name for f in tiny.instances] == ["algo-1", "algo-2"]
    assert tiny.hosts == rehearsal.host_names(2)
    for i, folder in enumerate(tiny.instances):
        config = folder / "input" / "config"
        hps = json.loads((config / "hyperparameters.json").read_text())
        assert hps == {"epochs": "2", "checkpoint-dir": str(folder / "checkpoints"), "learning_rate": "1e-3"}
        resource = json.loads((config / "resourceconfig.json").read_text())
        assert resource["current_host"] == tiny.hosts[i] and resource["hosts"] == tiny.hosts
        assert resource["current_group_name"] == "homogeneousCluster" and resource["network_interface_name"] == "lo"
        assert resource["instance_groups"] == [
            {"instance_group_name": "homogeneousCluster", "instance_type": "ml.c5.xlarge", "hosts": tiny.hosts}
        ]
        inputs = json.loads((config / "inputdataconfig.json").read_text())
        assert set(inputs) == {"train", "shards", "code", "sm_drivers"}
        assert inputs["shards"] == {
            "TrainingInputMode": "File",
            "S3DistributionType": "ShardedByS3Key",
            "RecordWrapperType": "None",
        }
        for sub in ("model", "output/data", "checkpoints", "input/data/code/show.py", "input/sm_training.env"):
            assert (folder / sub).exists(), sub


def test_fully_replicated_goes_everywhere_and_sharded_splits_by_key(tiny):
    records = tiny.records()
    assert [r["rank"] for r in records] == [0, 1]
    assert all(r["channels"]["train"] == ["part-0.csv", "part-1.csv", "part-2.csv"] for r in records)
    shards = [r["channels"]["shards"] for r in records]
    assert sorted(shards[0] + shards[1]) == [f"shard-{i}.csv" for i in range(5)], "every object exactly once"
    assert shards == [["shard-0.csv", "shard-2.csv", "shard-4.csv"], ["shard-1.csv", "shard-3.csv"]]  # the rule


def test_the_script_gets_sdk_v3_variables_arguments_and_folder(tiny):
    for r in tiny.records():
        env, folder, i = r["env"], tiny.instances[r["rank"]], r["rank"]
        code = str(folder / "input" / "data" / "code")
        assert env["SM_CURRENT_HOST"] == tiny.hosts[i] and json.loads(env["SM_HOSTS"]) == tiny.hosts
        assert env["SM_HOST_COUNT"] == "2" and env["SM_CURRENT_HOST_RANK"] == str(i)
        assert env["SM_MASTER_ADDR"] == tiny.hosts[0] and env["SM_MASTER_PORT"] == "7777"
        assert env["SM_MODEL_DIR"] == str(folder / "model")
        assert env["SM_OUTPUT_FAILURE"] == str(folder / "output" / "failure")
        assert env["SM_CHANNEL_TRAIN"] == str(folder / "input" / "data" / "train")
        assert env["SM_SOURCE_DIR"] == code and env["SM_ENTRY_SCRIPT"] == "show.py"
        assert env["SM_HP_EPOCHS"] == "2" and env["SM_HP_LEARNING_RATE"] == "0.001"
        assert json.loads(env["SM_HPS"])["checkpoint-dir"] == str(folder / "checkpoints")
        assert json.loads(env["SM_TRAINING_ENV"])["job_name"] == "tiny-job"
        assert env["MY_OUTPUT"] == str(folder / "output" / "data" / "extra") and env["MY_PLAIN"] == "kept"
        assert int(env["MWMS_BASE_PORT"]) > 0 and env["OMP_NUM_THREADS"] == "1"
        assert r["cwd"] == code and env["PYTHONPATH"] == code, "the course repository is not importable"
        # basic_script_driver's form: --key value, values through safe_deserialize/safe_serialize
        assert r["argv"] == [
            "--epochs",
            "2",
            "--checkpoint-dir",
            str(folder / "checkpoints"),
            "--learning_rate",
            "0.001",
        ]
        assert tiny.commands[i][1:] == ["show.py", *r["argv"]] and Path(tiny.commands[i][0]).name.startswith("python")
    assert tiny.driver_command == tiny.commands[0]


def test_variable_names_are_those_environment_py_sets(tiny):
    source = (rehearsal.drivers_dir() / "scripts" / "environment.py").read_text()
    body = source[source.index("def set_env") : source.index("def mask_sensitive_info")]
    names = set(re.findall(r'"(SM_[A-Z_]+)"', body)) - {"SM_CHANNEL_", "SM_HP_"}
    assert {"SM_MODEL_DIR", "SM_HOSTS", "SM_HPS", "SM_TRAINING_ENV", "SM_DISTRIBUTED_CONFIG"} <= names
    names -= {"SM_DISTRIBUTED_DRIVER_DIR", "SM_DISTRIBUTED_CONFIG"}  # set only for a distributed job
    assert "SM_CHANNEL_{channel.upper()}" in body and "SM_HP_{key_upper}" in body
    names |= {f"SM_CHANNEL_{c.upper()}" for c in ("train", "shards", "code", "sm_drivers")}
    names |= {"SM_HP_EPOCHS", "SM_HP_CHECKPOINT_DIR", "SM_HP_LEARNING_RATE"}
    for r in tiny.records():
        assert names <= {k for k in r["env"] if k.startswith("SM_")}, names - set(r["env"])


def test_model_artifact_is_the_chiefs_model_folder(tiny, s3):
    assert tiny.model_artifact == f"s3://{BUCKET}/output/tiny-job/output/model.tar.gz"
    body = s3.get_object(Bucket=BUCKET, Key="output/tiny-job/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["model.txt"]
        assert tar.extractfile("model.txt").read().decode() == f"from {tiny.hosts[0]}"
    assert not tiny.interrupted and tiny.ranks == tiny.planned_ranks == 2


def test_every_instances_checkpoints_are_synced(tiny):
    assert tiny.checkpoint_keys == ["checkpoints/tiny-job/host-0.txt", "checkpoints/tiny-job/host-1.txt"]


def test_every_start_restores_the_checkpoint_prefix_not_only_a_resume(tiny, s3, show_code, tmp_path):
    """SageMaker restores what is under CheckpointConfig.S3Uri into every job that names it (AWS, "Resume training
    from a checkpoint"): another job on the tiny job's prefix starts with its files, without resume=True."""
    other = make_request(s3, "other-job", show_code, "show.py", count=2, checkpoints=True)
    other["CheckpointConfig"] = {"S3Uri": f"s3://{BUCKET}/checkpoints/tiny-job", "LocalPath": "/opt/ml/checkpoints"}
    laid = rehearsal.rehearse(other, s3, root=tmp_path, launch_job=False, where="loopback")
    for folder in laid.instances:
        assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["host-0.txt", "host-1.txt"]
    fresh = make_request(s3, "fresh-job", show_code, "show.py", checkpoints=True)
    with pytest.raises(ValueError, match="nothing under .*fresh-job.* to resume from"):
        rehearsal.rehearse(fresh, s3, root=tmp_path, resume=True, launch_job=False, where="loopback")


def test_mpi_line_comes_from_the_sdk_and_the_last_np_wins():
    source = {"entry_script": "train_horovod.py"}
    buggy = rehearsal.driver_command(
        {"process_count_per_node": 2, "mpi_additional_options": []}, source, ["algo-1", "algo-2"], {"epochs": "2"}
    )
    assert buggy[:5] == ["mpirun", "--host", "algo-1:2,algo-2:2", "-np", "2"]  # v3: -np = process_count_per_node
    assert buggy[-5:] == ["-m", "mpi4py", "train_horovod.py", "--epochs", "2"]
    assert rehearsal.ranks_in(buggy) == 2
    fixed = rehearsal.driver_command(
        {"process_count_per_node": 2, "mpi_additional_options": ["-np", "4"]},
        source,
        ["algo-1", "algo-2"],
        {"epochs": "2"},
    )
    assert fixed.count("-np") == 2 and rehearsal.ranks_in(fixed) == 4


def test_ranks_find_their_instance_by_name_not_by_place_in_the_sorted_host_list():
    hosts = rehearsal.host_names(11)  # --host lists them sorted: 127.0.0.1, 127.0.0.10, 127.0.0.11, 127.0.0.2, ...
    if len(set(hosts)) < 11:
        pytest.skip("127.0.0.2 is not a local address here (macOS): every instance is 127.0.0.1")
    line = rehearsal.driver_command(
        {"process_count_per_node": 1, "mpi_additional_options": ["-np", "11"]}, {"entry_script": "train.py"}, hosts, {}
    )
    layout = rehearsal._rank_layout(line, hosts)
    assert [slot.hostname for _, slot in layout] == sorted(hosts)
    assert all(hosts[instance] == slot.hostname for instance, slot in layout)


@pytest.mark.parametrize("extra, ranks", [([], 2), (["-np", "4"], 4)])
def test_mpi_ranks_are_laid_out_by_slot(s3, show_code, tmp_path, extra, ranks):
    """v3's -np 2 on 2 x 2 starts two ranks, both on algo-1; `-np 4` starts all four, two per instance."""
    distributed = {"process_count_per_node": 2, "mpi_additional_options": ["-x", "HOROVOD_CYCLE_TIME=0.1", *extra]}
    request = make_request(
        s3, f"mpi-{ranks}", show_code, "show.py", count=2, hps={"epochs": 1}, distributed=distributed
    )
    done = rehearsal.rehearse(request, s3, root=tmp_path, timeout=60, stream=False, where="loopback")
    assert done.ranks == ranks and done.planned_ranks == 4 and rehearsal.ranks_in(done.driver_command) == ranks
    assert any("2 of the 4 ranks" in n for n in done.notes) == (ranks == 2)
    records = done.records()
    assert [r["rank"] for r in records] == list(range(ranks))
    for r in records:
        env, instance = r["env"], r["rank"] // 2
        assert env["SM_CURRENT_HOST"] == done.hosts[instance] == env["HOROVOD_HOSTNAME"]
        assert env["SM_MODEL_DIR"] == str(done.instances[instance] / "model")
        assert (env["HOROVOD_SIZE"], env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"]) == (
            str(ranks),
            str(r["rank"] % 2),
            "2",
        )
        assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == (str(instance), str(ranks // 2))
        assert (
            env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == "gloo" and env["HOROVOD_GLOO_IFACE"] == "lo"
        )
        assert int(env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) > 0 and env["HOROVOD_CYCLE_TIME"] == "0.1"  # -x forwarded
        assert r["argv"] == ["--epochs", "1"] and r["cwd"] == str(done.instances[instance] / "input" / "data" / "code")


@slow
def test_mwms_script_on_two_instances(s3, course_code, tmp_path):
    request = make_request(
        s3,
        "mwms-job",
        course_code,
        "train_mwms.py",
        count=2,
        hps={"epochs": 2, "data-size": 2000, "batch-size": 64},
        data_channels=[channel("train", f"s3://{BUCKET}/data/train")],
    )
    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/course"
    request["Environment"] = {**request.get("Environment", {}), **tracking.job_environment(arn, "rehearsed")}
    store = tmp_path / "tracking" / "mlflow.db"
    done = rehearsal.rehearse(request, s3, root=tmp_path, timeout=240, stream=False, tracking_store=store)
    assert any(str(store) in note for note in done.notes), done.notes  # said, not done silently
    runs = tracking.runs(store)  # the managed server's ARN stood in for by the local store: one run, the chief's
    assert list(zip(runs.run, runs.world_size, runs.status)) == [("mwms-job", 2, "FINISHED")]
    records = done.records()
    assert [r["rank"] for r in records] == [0, 1] and all(r["size"] == 2 for r in records)
    assert all(len(r["loss"]) == 2 for r in records)
    assert records[0]["weights_checksum"] == records[1]["weights_checksum"]
    with tarfile.open(
        fileobj=io.BytesIO(s3.get_object(Bucket=BUCKET, Key="output/mwms-job/output/model.tar.gz")["Body"].read())
    ) as tar:
        assert tar.getnames() == ["forecaster.keras"]


@slow
@needs_horovod
def test_horovod_script_on_two_instances_then_restarted_after_its_last_checkpoint(s3, course_code, tmp_path):
    """Two instances, one rank each, started by mpirun on the lab (or Gloo on loopback); then the same job reclaimed
    right after its last checkpoint: the restart finds every epoch done and writes its model again."""
    request = make_request(
        s3,
        "late-reclaim",
        course_code,
        "train_horovod.py",
        count=2,
        checkpoints=True,
        hps={"epochs": 1, "data-size": 2000, "batch-size": 64, "checkpoint-dir": "/opt/ml/checkpoints"},
        distributed={"process_count_per_node": 1, "mpi_additional_options": ["-np", "2"]},
        data_channels=[channel("train", f"s3://{BUCKET}/data/train")],
    )
    first = rehearsal.rehearse(request, s3, root=tmp_path, timeout=240, stream=False)
    assert first.where == ("loopback" if LAB_WHY else "lab"), first.why_loopback
    trained = first.records()
    assert first.ranks == 2 and [r["size"] for r in trained] == [2, 2]
    assert all(len(r["loss"]) == 1 and r["batch"] == 64 for r in trained)  # the job's hyperparameters
    assert trained[0]["weights_checksum"] == trained[1]["weights_checksum"]
    assert (first.instances[0] / "model" / "forecaster.keras").exists()  # rank 0 saved the model for deployment
    assert "checkpoints/late-reclaim/state.json" in first.checkpoint_keys
    s3.delete_object(Bucket=BUCKET, Key="output/late-reclaim/output/model.tar.gz")  # the restart must write it
    second = rehearsal.rehearse(request, s3, root=tmp_path, timeout=240, stream=False, resume=True)
    assert not second.interrupted and second.model_artifact
    assert "every epoch is done" in second.output(0)
    records = second.records()
    assert all(r["loss"] == [] and r["resumed_after"] == 1 for r in records)
    assert [h["epoch"] for h in records[0]["history"]] == [1]
    assert records[0]["history"][0]["loss"] == pytest.approx(trained[0]["loss"][0])
    assert records[0]["weights_checksum"] == records[1]["weights_checksum"]
    body = s3.get_object(Bucket=BUCKET, Key="output/late-reclaim/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["forecaster.keras"]


def test_bad_requests_get_errors_that_say_what_to_do(s3, show_code, tmp_path):
    good = make_request(s3, "bad-job", show_code, "show.py", hps={"epochs": 1})
    with pytest.raises(ValueError, match="not a CreateTrainingJob request.*ResourceConfig"):
        rehearsal.rehearse({"TrainingJobName": "x"}, s3, root=tmp_path)
    with pytest.raises(ValueError, match="InstanceCount must be .* at least 1, got 0"):
        rehearsal.rehearse(
            {**good, "ResourceConfig": {**good["ResourceConfig"], "InstanceCount": 0}}, s3, root=tmp_path
        )
    without_code = {**good, "InputDataConfig": [c for c in good["InputDataConfig"] if c["ChannelName"] != "code"]}
    with pytest.raises(ValueError, match="built without source_code"):
        rehearsal.rehearse(without_code, s3, root=tmp_path)
    empty = {**good, "InputDataConfig": [channel("train", f"s3://{BUCKET}/nothing/here"), *good["InputDataConfig"]]}
    with pytest.raises(ValueError, match="channel 'train': no object under s3://rehearsal-bucket/nothing/here"):
        rehearsal.rehearse(empty, s3, root=tmp_path)
    with pytest.raises(ValueError, match="need checkpoints.*no CheckpointConfig"):
        rehearsal.rehearse(good, s3, root=tmp_path, interrupt_after_epoch=1)
    two_epochs = make_request(s3, "two-epochs", show_code, "show.py", hps={"epochs": 2}, checkpoints=True)
    for late in (2, 3):
        with pytest.raises(ValueError, match=f"interrupt_after_epoch={late}.*trains 2 epoch.*resume=True"):
            rehearsal.rehearse(two_epochs, s3, root=tmp_path, interrupt_after_epoch=late)
    missing = make_request(s3, "bad-entry", show_code, "train.py")
    with pytest.raises(ValueError, match=r"entry script 'train.py' .* holds \['show.py'\]"):
        rehearsal.rehearse(missing, s3, root=tmp_path)


# ---- on the network lab: instances are hosts algo-i with their own /opt/ml, MPI jobs launched by mpirun over ssh ----


@needs_mpi_lab
def test_on_the_lab_instances_are_algo_hosts_with_their_own_opt_ml(s3, show_code, tmp_path):
    for i in range(5):
        put(s3, f"lab/shards/shard-{i}.csv", "x\n")
    request = make_request(
        s3,
        "lab-job",
        show_code,
        "show.py",
        count=2,
        checkpoints=True,
        hps={"epochs": 1, "checkpoint-dir": "/opt/ml/checkpoints"},
        data_channels=[channel("shards", f"s3://{BUCKET}/lab/shards", "ShardedByS3Key")],
        environment={"MY_OUTPUT": "/opt/ml/output/data/extra"},
    )
    done = rehearsal.rehearse(request, s3, root=tmp_path, timeout=60, stream=False, where="lab")
    assert done.where == "lab" and done.hosts == ["algo-1", "algo-2"] and not done.why_loopback
    for r in done.records():
        env, i = r["env"], r["rank"]
        assert env["SM_CURRENT_HOST"] == f"algo-{i + 1}" and json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"]
        assert env["SM_MODEL_DIR"] == "/opt/ml/model" and env["SM_CHANNEL_SHARDS"] == "/opt/ml/input/data/shards"
        assert env["SM_NETWORK_INTERFACE_NAME"] == "eth0" and env["MY_OUTPUT"] == "/opt/ml/output/data/extra"
        assert "MWMS_BASE_PORT" not in env, "each host is a machine: MWMS listens on port 2222 of every host"
        assert r["cwd"] == env["PYTHONPATH"] == "/opt/ml/input/data/code"
        assert r["argv"] == ["--epochs", "1", "--checkpoint-dir", "/opt/ml/checkpoints"]
    # each host saw its own /opt/ml: its own share of the sharded channel, its own checkpoint file
    shards = [r["channels"]["shards"] for r in done.records()]
    assert shards == [["shard-0.csv", "shard-2.csv", "shard-4.csv"], ["shard-1.csv", "shard-3.csv"]]
    assert [sorted(p.name for p in (f / "checkpoints").iterdir()) for f in done.instances] == [
        ["host-0.txt"],
        ["host-1.txt"],
    ]
    assert done.checkpoint_keys == ["checkpoints/lab-job/host-0.txt", "checkpoints/lab-job/host-1.txt"]
    assert not Path("/opt/ml").exists() or Path("/opt/ml").is_dir(), "nothing was made on this machine"


@needs_mpi_lab
@pytest.mark.parametrize("extra, ranks", [([], 2), (["-np", "4"], 4)])
def test_on_the_lab_the_drivers_mpirun_line_runs_over_ssh(s3, show_code, tmp_path, extra, ranks):
    """The driver's own line, run by Open MPI on algo-1: v3's -np 2 starts two ranks on algo-1; -np 4 starts
    four, two of them on algo-2 through its sshd, each rank in its own instance's environment."""
    distributed = {"process_count_per_node": 2, "mpi_additional_options": ["-x", "HOROVOD_CYCLE_TIME=0.1", *extra]}
    request = make_request(
        s3, f"lab-mpi-{ranks}", show_code, "show.py", count=2, hps={"epochs": 1}, distributed=distributed
    )
    done = rehearsal.rehearse(request, s3, root=tmp_path, timeout=120, stream=False, where="lab")
    assert done.where == "lab" and done.driver_command[0] == "mpirun"
    # the line run: the driver's own (with Open MPI 5 here: without its earlier -np and unbound, see the next test)
    assert done.commands == [rehearsal.as_open_mpi_41_reads(done.driver_command, rehearsal.mpirun_version())[0]]
    assert done.ranks == ranks and done.planned_ranks == 4
    records = done.records()
    assert [r["rank"] for r in records] == list(range(ranks))
    for r in records:
        env, instance = r["env"], r["rank"] // 2
        assert env["OMPI_COMM_WORLD_SIZE"] == str(ranks) and env["SM_CURRENT_HOST"] == f"algo-{instance + 1}"
        assert env["SM_MODEL_DIR"] == "/opt/ml/model" and env["HOROVOD_CYCLE_TIME"] == "0.1"  # -x forwarded
        assert r["cwd"] == "/opt/ml/input/data/code" and r["argv"] == ["--epochs", "1"]


@needs_mpi_lab
def test_on_the_lab_open_mpi_5_runs_the_line_with_the_last_np_and_the_line_aws_runs_is_kept(
    s3, show_code, tmp_path, monkeypatch, capsys
):
    """Where this machine's mpirun is Open MPI 5 (it keeps the first -np; SageMaker's 4.1 keeps the last), the lab
    runs the driver's line without its -np 2 and says so in one line; driver_command stays the line AWS runs.
    Played here with the version said to be 5.0.11: this machine's mpirun starts the line it is given."""
    ran = []
    real_mpirun = netlab.Lab.mpirun
    monkeypatch.setattr(rehearsal, "mpirun_version", lambda program="mpirun": (5, 0, 11))
    monkeypatch.setattr(
        netlab.Lab, "mpirun", lambda lab, line, **kw: ran.append(list(line)) or real_mpirun(lab, line, **kw)
    )
    distributed = {"process_count_per_node": 2, "mpi_additional_options": ["-np", "4"]}
    request = make_request(s3, "lab-ompi5", show_code, "show.py", count=2, hps={"epochs": 1}, distributed=distributed)
    done = rehearsal.rehearse(request, s3, root=tmp_path, timeout=120, stream=False, where="lab")
    aws = done.driver_command
    assert aws[3:5] == ["-np", "2"] and aws.count("-np") == 2 and rehearsal.ranks_in(aws) == 4, "AWS's line, as built"
    unbound = [aws[0], "--bind-to", "none", *aws[1:3], *aws[5:]]  # 4 ranks: Open MPI 4.1 binds them to a socket
    assert ran == done.commands == [unbound], "run without the driver's -np 2, and unbound"
    assert len([n for n in done.notes if "adds --bind-to none" in n]) == 1
    notes = [n for n in done.notes if "keeps the first -np" in n]
    printed = [line for line in capsys.readouterr().out.splitlines() if "keeps the first -np" in line]
    assert printed == [f"[rehearsal] {notes[0]}"] and len(notes) == 1 and "Open MPI 5.0.11" in notes[0]
    assert done.ranks == 4 and [r["rank"] for r in done.records()] == [0, 1, 2, 3]


@needs_mpi_lab
def test_on_the_lab_a_line_with_more_ranks_than_slots_gets_the_clear_error(s3, show_code, tmp_path):
    distributed = {"process_count_per_node": 1, "mpi_additional_options": ["-np", "3"]}
    request = make_request(s3, "lab-too-many", show_code, "show.py", count=2, distributed=distributed)
    with pytest.raises(ValueError, match="asks for 3 ranks .* offers 2 slots"):
        rehearsal.rehearse(request, s3, root=tmp_path, timeout=60, stream=False, where="lab")


def test_where_is_checked_and_loopback_says_why():
    with pytest.raises(ValueError, match="where must be 'auto', 'lab' or 'loopback'"):
        rehearsal.placement("cloud", 2, mpi=False)
    assert rehearsal.placement("loopback", 2, mpi=False) == (False, "where='loopback' was asked for")
    on_lab, why = rehearsal.placement("auto", 17, mpi=False)
    assert not on_lab and "more than the lab's 16 hosts" in why
