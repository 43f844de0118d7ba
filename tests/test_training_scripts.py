"""The training scripts run unchanged inside a SageMaker job: data, hyperparameters and folders from SM_*. The Horovod
script in a rehearsed 2-instance job, and restarted when every epoch is done, is test_rehearsal's (its
hyperparameters, model and checkpoint; the restart's empty loss, its history and its model written again)."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile

import numpy as np
import portpicker
import pytest

from utils import data, launch, paths

SCRIPTS = paths.SCRIPTS


def test_mwms_script_builds_its_cluster_from_the_sagemaker_environment(tmp_path):
    """One process per "host", each with SM_HOSTS and its own SM_CURRENT_HOST, and no TF_CONFIG: as in a job. Its
    hyperparameters include lesson 08's mixed precision: the saved model's layers compute in bfloat16 (its weights stay
    float32) up to lesson 06's float32 output, its loss is finite, and both workers still end with the same weights."""
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
        "SM_HPS": json.dumps({"epochs": 1, "batch_size": 256, "precision": "mixed_bfloat16"}),
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
    assert all(r["replicas"] == 2 for r in ranks)  # one replica per worker on CPU: the batch stays per worker
    assert all(len(r["loss"]) == 1 and r["batch"] == r["batch_per_replica"] == 256 for r in ranks)  # from SM_HPS
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]  # bit-identical weights
    assert ranks[0]["weights_checksum"] == ranks[1]["weights_checksum"]
    assert (model_dir / "forecaster.keras").exists()  # the chief saved the model for deployment
    with zipfile.ZipFile(model_dir / "forecaster.keras") as saved:
        layers = json.loads(saved.read("config.json"))["config"]["layers"]
    policies = {layer["name"]: layer["config"]["dtype"] for layer in layers}  # a policy, or a dtype's name
    assert all(policies[n]["config"]["name"] == "mixed_bfloat16" for n in ("hidden_0", "next_hours")), policies
    assert policies["output_float32"]["config"]["name"] == "float32", policies  # lesson 06's float32 output
    assert all(np.isfinite(r["loss"]).all() for r in ranks)


def _run_single(args: list[str]) -> tuple[int, str]:
    """Run train_single.py through the launcher; return its exit code and output (the error's, when it fails)."""
    env = launch.worker_env(1)
    try:
        run = launch.run_workers(
            [[sys.executable, str(SCRIPTS / "train_single.py"), *args]],
            [env],
            timeout=240,
            run_id=env[launch.RUN_MARKER],
            stream=False,
        )
    except launch.WorkerError as err:
        return 1, str(err)
    return 0, run.workers[0].output


def _result(output: str) -> dict:
    line = next(ln for ln in output.splitlines() if "RESULT " in ln)
    return json.loads(line.split("RESULT ", 1)[1])


def test_single_script_resumed_from_a_checkpoint_of_every_epoch_finishes_at_once(tmp_path):
    """A job restarted after its last checkpoint (a spot reclaim at the very end) must not crash."""
    args = ["--epochs", "2", "--data-size", "2000", "--checkpoint-dir", str(tmp_path / "ck")]
    code, first = _run_single(args)
    assert code == 0, first
    state_before = (tmp_path / "ck" / "state.json").read_text()
    code, second = _run_single(args)
    assert code == 0, f"the resumed run failed:\n{second[-3000:]}"
    assert "resuming after epoch 2" in second
    assert not [ln for ln in second.splitlines() if ln.startswith("epoch ")], "no epoch may be trained again"
    assert "every epoch is done" in second
    result, recorded = _result(second), _result(first)
    assert result["loss"] == [] and result["resumed_after"] == 2
    assert [h["epoch"] for h in result["history"]] == [1, 2]
    assert [h["loss"] for h in result["history"]] == pytest.approx(recorded["loss"])
    assert result["weights_checksum"] == pytest.approx(recorded["weights_checksum"], rel=1e-6)
    assert (tmp_path / "ck" / "state.json").read_text() == state_before, "the checkpoint must be left as it was"
