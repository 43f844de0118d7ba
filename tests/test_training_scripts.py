"""The Horovod training script runs unchanged inside a SageMaker job: data, hyperparameters and folders from SM_*."""

from __future__ import annotations

import json
import shutil
import sys

import portpicker
from conftest import needs_horovod

from utils import checkpoint, data, launch, paths

SCRIPTS = paths.SCRIPTS


@needs_horovod
def test_horovod_script_reads_the_sagemaker_environment(tmp_path):
    channel, model_dir = tmp_path / "input" / "train", tmp_path / "model"
    channel.mkdir(parents=True)
    model_dir.mkdir()
    shutil.copy(data.DATASET, channel / "series.csv")
    env = {
        "SM_CHANNEL_TRAIN": str(channel),
        "SM_MODEL_DIR": str(model_dir),
        "SM_OUTPUT_DATA_DIR": str(tmp_path / "output"),
        "SM_HPS": json.dumps({"epochs": 1, "batch_size": 256}),
    }
    run = launch.launch_horovodrun(
        SCRIPTS / "train_horovod.py",
        2,
        args=["--checkpoint-dir", str(tmp_path / "ck")],
        env=env,
        timeout=180,
        stream=False,
    )
    ranks = run.records()
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(len(r["loss"]) == 1 and r["batch"] == 256 for r in ranks)  # hyperparameters from SM_HPS
    assert ranks[0]["weights_checksum"] == ranks[1]["weights_checksum"]
    assert (model_dir / "forecaster.keras").exists()  # rank 0 saved the model for deployment
    assert checkpoint.latest(tmp_path / "ck").epoch == 1


def test_mwms_script_builds_its_cluster_from_the_sagemaker_environment(tmp_path):
    """One process per "host", each with SM_HOSTS and its own SM_CURRENT_HOST, and no TF_CONFIG: as in a job."""
    channel, model_dir = tmp_path / "input" / "train", tmp_path / "model"
    channel.mkdir(parents=True)
    model_dir.mkdir()
    shutil.copy(data.DATASET, channel / "series.csv")
    base = next(p for p in launch.free_ports(20) if portpicker.is_port_free(p + 1))  # host i listens on base + i
    common = {
        "SM_HOSTS": json.dumps(["localhost", "127.0.0.1"]),
        "MWMS_BASE_PORT": str(base),
        "SM_CHANNEL_TRAIN": str(channel),
        "SM_MODEL_DIR": str(model_dir),
        "SM_HPS": json.dumps({"epochs": 1, "batch_size": 256}),
    }
    base_env = launch.worker_env(1)  # one run: both processes carry the same marker
    envs = [{**base_env, **common, "SM_CURRENT_HOST": host, "TF_CONFIG": ""} for host in ("localhost", "127.0.0.1")]
    run = launch.run_workers(
        [[sys.executable, str(SCRIPTS / "train_mwms.py")]] * 2,
        envs,
        timeout=180,
        run_id=envs[0][launch.RUN_MARKER],
        stream=False,
    )
    ranks = run.records()
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["size"] == 2 for r in ranks)
    assert all(len(r["loss"]) == 1 and r["batch"] == 256 for r in ranks)  # hyperparameters from SM_HPS
    assert ranks[0]["weights_checksum"] == ranks[1]["weights_checksum"]
    assert (model_dir / "forecaster.keras").exists()  # the chief saved the model for deployment
