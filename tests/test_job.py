"""A training script reads its hyperparameters the same way locally and in a SageMaker job."""

import argparse
import json

import pytest

from utils import job


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    return p


def test_local_command_line():
    args = job.parse(_parser(), ["--epochs", "3", "--batch-size=32"], env={})
    assert (args.epochs, args.batch_size, args.lr) == (3, 32, 1e-3)


def test_sagemaker_style_arguments_with_underscores_and_extra_options():
    argv = ["--batch_size", "128", "--lr", "0.01", "--model_dir", "s3://bucket/job/model"]
    args = job.parse(_parser(), argv, env={})
    assert (args.batch_size, args.lr) == (128, 0.01)
    assert not hasattr(args, "model_dir")


def test_sm_hps_gives_typed_defaults_and_the_command_line_wins():
    env = {"SM_HPS": json.dumps({"epochs": 7, "batch_size": 256, "unrelated": "x"})}
    args = job.parse(_parser(), ["--epochs", "2"], env=env)
    assert args.epochs == 2 and args.batch_size == 256 and isinstance(args.batch_size, int)


def test_a_hyperparameter_outside_its_choices_fails_from_sm_hps_as_on_the_command_line(capsys):
    """argparse checks `choices` on the command line but not on a default, which is where SM_HPS goes: a job would
    have passed the check locally and failed on SageMaker, whose launch passes hyperparameters as arguments."""
    parser = _parser()
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
    assert job.parse(parser, [], env={"SM_HPS": json.dumps({"precision": "mixed_bfloat16"})}).precision == (
        "mixed_bfloat16"
    )
    for argv, env in (([], {"SM_HPS": json.dumps({"precision": "mixed_float16"})}), (["--precision=fp8"], {})):
        with pytest.raises(SystemExit) as stopped:
            job.parse(parser, argv, env=env)
        assert stopped.value.code == 2
        assert "argument --precision: invalid choice:" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]"])
def test_bad_sm_hps_says_what_it_should_be(bad):
    with pytest.raises(ValueError, match="SM_HPS"):
        job.parse(_parser(), [], env={"SM_HPS": bad})


def test_local_run_uses_the_given_checkpoint_dir():
    paths = job.job_paths("ckpt", env={})
    assert not paths.on_sagemaker and paths.data_file is None and paths.model_dir is None
    assert str(paths.checkpoint_dir) == "ckpt"
    assert job.job_paths("", env={}).checkpoint_dir is None


def test_sagemaker_variables_are_read(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "series.csv").write_text("timestamp,temperature_f,filled\n")
    env = {
        "SM_MODEL_DIR": "/opt/ml/model",
        "SM_CHANNEL_TRAIN": str(tmp_path / "train"),
        "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data",
    }
    paths = job.job_paths("", env=env)
    assert paths.on_sagemaker
    assert paths.data_file == tmp_path / "train" / "series.csv"
    assert str(paths.model_dir) == "/opt/ml/model" and str(paths.output_dir) == "/opt/ml/output/data"
    assert str(paths.checkpoint_dir) == job.SAGEMAKER_CHECKPOINTS
    elsewhere = job.job_paths("", env={**env, "SM_MODEL_DIR": str(tmp_path / "ml" / "model")})
    assert elsewhere.checkpoint_dir == tmp_path / "ml" / "checkpoints", "the checkpoints sit next to the model folder"


def test_a_channel_of_several_parts_is_read_whole_in_name_order(tmp_path):
    """A series uploaded in parts (OfflineAWS.upload_dataset(parts=n)) is read whole, not only its first file."""
    (tmp_path / "train").mkdir()
    header = "timestamp,temperature_f,filled\n"
    for i, rows in enumerate((["2010-01-01 00:00,40.0,0\n"], ["2010-01-01 01:00,41.0,0\n", "2010-01-01 02:00,42.0,0"])):
        (tmp_path / "train" / f"part-{i:03d}.csv").write_text(header + "".join(rows))
    paths = job.job_paths("", env={"SM_CHANNEL_TRAIN": str(tmp_path / "train")})
    lines = paths.data_file.read_text().splitlines()
    assert lines == [header.strip(), "2010-01-01 00:00,40.0,0", "2010-01-01 01:00,41.0,0", "2010-01-01 02:00,42.0,0"]
    (tmp_path / "train" / "part-002.csv").write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="do not share one header"):
        job.job_paths("", env={"SM_CHANNEL_TRAIN": str(tmp_path / "train")})


def test_empty_train_channel_says_what_to_upload(tmp_path):
    with pytest.raises(FileNotFoundError, match="upload"):
        job.job_paths("", env={"SM_CHANNEL_TRAIN": str(tmp_path)})


def test_cluster_reads_hosts_and_index():
    found = job.cluster({"SM_HOSTS": '["algo-1", "algo-2", "algo-3"]', "SM_CURRENT_HOST": "algo-3"})
    assert found.hosts == ["algo-1", "algo-2", "algo-3"] and found.index == 2


def test_no_cluster_outside_a_job():
    assert job.cluster({}) is None


@pytest.mark.parametrize(
    "env, says",
    [
        ({"SM_HOSTS": '["algo-1"]', "SM_CURRENT_HOST": "algo-9"}, "not in SM_HOSTS"),
        ({"SM_HOSTS": "[]", "SM_CURRENT_HOST": "algo-1"}, "non-empty JSON list"),
        ({"SM_HOSTS": "algo-1,algo-2", "SM_CURRENT_HOST": "algo-1"}, "not valid JSON"),
        ({"SM_CURRENT_HOST": "algo-1"}, "not valid JSON"),
    ],
)
def test_bad_cluster_environment_says_what_is_wrong(env, says):
    with pytest.raises(ValueError, match=says):
        job.cluster(env)


def test_tf_config_is_built_from_the_sagemaker_hosts():
    env = {"SM_HOSTS": '["algo-1", "algo-2"]', "SM_CURRENT_HOST": "algo-2"}
    found = job.set_tf_config(env)
    assert found.index == 1
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["algo-1:2222", "algo-2:2222"]},  # each instance a machine: one port for all
        "task": {"type": "worker", "index": 1},
    }
    # hosts that share one address (the loopback rehearsal) set MWMS_BASE_PORT: host i listens on it + i
    env = {"SM_HOSTS": '["a", "b", "c"]', "SM_CURRENT_HOST": "a", "MWMS_BASE_PORT": "40000"}
    job.set_tf_config(env)
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == ["a:40000", "b:40001", "c:40002"]


def test_a_tf_config_already_set_wins_and_is_checked():
    env = {
        "TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}}),
        "SM_HOSTS": '["algo-1"]',
        "SM_CURRENT_HOST": "algo-1",
    }
    found = job.set_tf_config(env)
    assert found.hosts == ["h:1", "h:2"] and found.index == 0
    with pytest.raises(ValueError, match="not one of the 2 worker task"):
        job.set_tf_config({"TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"index": 5}})})
    with pytest.raises(ValueError, match="cluster description"):
        job.set_tf_config({"TF_CONFIG": "worker 0"})


def test_a_chief_in_tf_config_is_task_0_and_the_workers_follow():
    """As a TFJob with a Chief replica sets TF_CONFIG (lesson 09), and as TensorFlow numbers the tasks
    (multi_worker_util.id_in_cluster): chief 0, then worker i as 1 + i."""
    cluster = {"chief": ["j-chief-0.ns.svc:2222"], "worker": ["j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"]}
    ranks = {}
    for kind, index in (("chief", 0), ("worker", 0), ("worker", 1)):
        env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})}
        found = job.set_tf_config(env)
        ranks[found.current_host] = found.index
        assert found.hosts == cluster["chief"] + cluster["worker"]
    assert ranks == {"j-chief-0.ns.svc:2222": 0, "j-worker-0.ns.svc:2222": 1, "j-worker-1.ns.svc:2222": 2}
    for bad, message in (
        ({"type": "ps", "index": 0}, "task type is 'ps'"),
        ({"type": "chief", "index": 1}, "1 chief task"),
    ):
        with pytest.raises(ValueError, match=message):
            job.set_tf_config({"TF_CONFIG": json.dumps({"cluster": cluster, "task": bad})})


def test_no_cluster_means_one_worker_and_no_tf_config():
    env = {}
    assert job.set_tf_config(env).hosts == ["localhost"] and "TF_CONFIG" not in env


def test_a_horovod_job_with_fewer_ranks_than_it_asks_for_stops_with_what_to_do():
    env = {"SM_HOST_COUNT": "2", "SM_DISTRIBUTED_CONFIG": '{"process_count_per_node": 4, "mpi_additional_options": []}'}
    assert job.expected_world_size(env) == 8
    job.check_world_size(8, env)
    with pytest.raises(SystemExit, match="runs 4 rank.*asks for 8.*-np 8"):
        job.check_world_size(4, env)  # v3's -np bug: one instance's worth
    gpus = {**env, "SM_DISTRIBUTED_CONFIG": '{"process_count_per_node": null}', "SM_NUM_GPUS": "2"}
    assert job.expected_world_size(gpus) == 4
    assert job.expected_world_size({}) is None  # not a SageMaker MPI job: no check
    job.check_world_size(3, {})
