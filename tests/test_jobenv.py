"""Training scripts find their data and folders from SageMaker's variables, or fall back to local ones."""
import pytest

from utils import jobenv


def test_local_run_uses_the_given_checkpoint_dir():
    paths = jobenv.job_paths("ckpt", env={})
    assert not paths.on_sagemaker and paths.data_file is None and paths.model_dir is None
    assert str(paths.checkpoint_dir) == "ckpt"
    assert jobenv.job_paths("", env={}).checkpoint_dir is None


def test_sagemaker_variables_are_read(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "series.csv").write_text("timestamp,temperature_f,filled\n")
    env = {"SM_MODEL_DIR": "/opt/ml/model", "SM_CHANNEL_TRAIN": str(tmp_path / "train"),
           "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data"}
    paths = jobenv.job_paths("", env=env)
    assert paths.on_sagemaker
    assert paths.data_file == tmp_path / "train" / "series.csv"
    assert str(paths.model_dir) == "/opt/ml/model" and str(paths.output_dir) == "/opt/ml/output/data"
    assert str(paths.checkpoint_dir) == jobenv.SAGEMAKER_CHECKPOINTS


def test_empty_train_channel_says_what_to_upload(tmp_path):
    with pytest.raises(FileNotFoundError, match="upload"):
        jobenv.job_paths("", env={"SM_CHANNEL_TRAIN": str(tmp_path)})
