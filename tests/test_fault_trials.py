"""Bad input to the course's tools gets one line that says what to do, and nothing is left behind: the trials of the
2026-11-28 fault report outside the workspace (N02, N04: lessons run with pytest; A02, A04: AWS settings; M02: the
tracking store; C01, C02: checkpoints). Each test names its trial."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from utils.paths import REPO_ROOT


def nbmake(*paths, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "--rootdir", str(REPO_ROOT), "--nbmake"]
    cmd += [*map(str, paths), "-p", "no:cacheprovider", "-q", "--color=no"]
    return subprocess.run(
        cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )


def test_N02_a_malformed_notebook_fails_in_one_line(tmp_path):
    good = json.loads((REPO_ROOT / "notebooks" / "00_start_here.ipynb").read_text())
    (tmp_path / "cut.ipynb").write_text(json.dumps(good)[:300])
    for c in good["cells"]:
        c.pop("metadata")
    (tmp_path / "nometa.ipynb").write_text(json.dumps(good))
    done = nbmake(tmp_path / "cut.ipynb", tmp_path / "nometa.ipynb", env={"COURSE_SMOKE": "1"})
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "INTERNAL ERROR" not in out and "Traceback" not in out, out
    assert f"{tmp_path / 'cut.ipynb'} is not a valid notebook" in out
    assert f"{tmp_path / 'nometa.ipynb'} is not a valid notebook (" in out and "metadata" in out


@pytest.mark.parametrize("value", ["on"])
def test_N04_an_unknown_COURSE_SMOKE_is_one_line(value):
    done = nbmake(REPO_ROOT / "notebooks" / "00_start_here.ipynb", env={"COURSE_SMOKE": value})
    assert done.returncode == 4  # pytest's usage error
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert lines == [
        f"ERROR: COURSE_SMOKE={value!r} is not understood: set it to 1 for smoke mode or 0 (or unset it) for full mode."
    ], lines


def test_A02_a_role_arn_with_an_empty_path_segment_is_refused():
    from utils import sagemaker_job

    assert "'//'" in sagemaker_job.role_arn_problem("arn:aws:iam::123456789012:role//R")
    with pytest.raises(PermissionError, match="not an IAM path"):
        sagemaker_job.check_role_arn("arn:aws:iam::123456789012:role//R")
    assert sagemaker_job.role_arn_problem("arn:aws:iam::123456789012:role/R") is None
    assert sagemaker_job.role_arn_problem("arn:aws:iam::123456789012:role/team/R") is None


def test_A04_an_aws_config_that_does_not_parse_leaves_the_offline_rehearsal_alone(tmp_path, monkeypatch):
    """The offline path (moto) never reads the learner's ~/.aws files; the online path's check says it in one line."""
    from utils import sagemaker_job

    config = tmp_path / "config"
    config.write_text("[default\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(config))
    with sagemaker_job.offline_aws() as aws:
        assert aws.s3.list_buckets()["Buckets"]
    assert os.environ["AWS_CONFIG_FILE"] == str(config)  # put back
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(PermissionError) as caught:
        sagemaker_job.credentials_session()
    assert "\n" not in str(caught.value) and "Unable to parse config file" in str(caught.value)


def test_M02_a_folder_in_place_of_the_tracking_store_is_refused_at_once(tmp_path):
    from utils import tracking

    (tmp_path / "mlflow.db").mkdir()
    with pytest.raises(tracking.DamagedStore) as caught:
        tracking._check_store(tmp_path / "mlflow.db")
    assert "is a folder, not a store file" in str(caught.value) and "\n" not in str(caught.value)
    assert (tmp_path / "mlflow.db").is_dir()  # left as it is


def test_C01_a_checkpoint_path_that_is_a_file_is_refused_in_one_line(tmp_path, monkeypatch):
    from utils import checkpoint

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    (tmp_path / "f").write_text("x")
    for where in (tmp_path / "f", tmp_path / "f" / "below"):
        with pytest.raises(checkpoint.CheckpointError) as caught:
            checkpoint.EpochCheckpoint(where)
        assert "is a file" in str(caught.value) and "\n" not in str(caught.value)
    assert (tmp_path / "f").read_text() == "x"


def test_C02_a_save_that_fails_on_a_full_disk_leaves_no_keras_scratch_folder(tmp_path, monkeypatch):
    """Keras's .keras save keeps its assets in a `tmp*` folder of the temporary folder and removes it only after the
    weights are written into the archive; here that write fails as on a full disk (ENOSPC), in Keras's own code."""
    import keras
    from keras.src.saving import saving_lib

    from utils import checkpoint

    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)

    def full(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(saving_lib.H5IOStore, "close", full)
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    net.compile(optimizer="sgd", loss="mse")
    import numpy as np

    x = np.zeros((8, 4), "float32")
    with pytest.raises(checkpoint.CheckpointError):
        net.fit(x, x[:, :2], epochs=1, verbose=0, callbacks=[checkpoint.EpochCheckpoint(tmp_path / "ck")])
    assert list(scratch.iterdir()) == []


# --- nvidia-smi that hangs, ignores SIGTERM, leaves a child holding its output, or prints garbage (S02-S04) -------


def smi(monkeypatch, tmp_path, body: str) -> None:
    from conftest import path_with_nvidia_smi

    monkeypatch.setenv("PATH", path_with_nvidia_smi(tmp_path / "bin", body))


def test_S02_an_nvidia_smi_that_ignores_sigterm_is_stopped_with_a_reason(monkeypatch, tmp_path):
    from utils import envinfo

    smi(monkeypatch, tmp_path, 'trap "" TERM; sleep 600')
    start = time.monotonic()
    assert envinfo.nvidia_gpus(timeout=1) == ([], "nvidia-smi failed (no answer in 1 s)")
    assert time.monotonic() - start < 10


def test_S03_a_child_holding_nvidia_smis_output_does_not_hold_the_answer(monkeypatch, tmp_path):
    from utils import envinfo

    pidfile = tmp_path / "child.pid"
    smi(monkeypatch, tmp_path, f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' & sleep 600")
    start = time.monotonic()
    try:
        assert envinfo.nvidia_gpus(timeout=1)[1] == "nvidia-smi failed (no answer in 1 s)"
        assert time.monotonic() - start < 10  # not the child's 60 s
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_S04_what_nvidia_smi_prints_is_quoted_as_one_readable_line(monkeypatch, tmp_path):
    from utils import envinfo

    smi(monkeypatch, tmp_path, r"printf '\033[2J\033[31mfail\033[0med\a here\000 \377\376\n'; exit 3")
    found, why = envinfo.nvidia_gpus(timeout=10)
    assert found == [] and why.startswith("nvidia-smi failed (exit 3: failed here")
    assert why.isprintable(), repr(why)
    smi(monkeypatch, tmp_path, "exit 0")
    assert envinfo.nvidia_gpus(timeout=10) == ([], "nvidia-smi lists no GPU (exit 0: no output)")
