"""A training script reads its hyperparameters the same way locally and in a SageMaker job."""
import argparse
import json

import pytest

from utils import hyperparams


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    return p


def test_local_command_line():
    args = hyperparams.parse(_parser(), ["--epochs", "3", "--batch-size=32"], env={})
    assert (args.epochs, args.batch_size, args.lr) == (3, 32, 1e-3)


def test_sagemaker_style_arguments_with_underscores_and_extra_options():
    argv = ["--batch_size", "128", "--lr", "0.01", "--model_dir", "s3://bucket/job/model"]
    args = hyperparams.parse(_parser(), argv, env={})
    assert (args.batch_size, args.lr) == (128, 0.01)
    assert not hasattr(args, "model_dir")


def test_sm_hps_gives_typed_defaults_and_the_command_line_wins():
    env = {"SM_HPS": json.dumps({"epochs": 7, "batch_size": 256, "unrelated": "x"})}
    args = hyperparams.parse(_parser(), ["--epochs", "2"], env=env)
    assert args.epochs == 2 and args.batch_size == 256 and isinstance(args.batch_size, int)


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]"])
def test_bad_sm_hps_says_what_it_should_be(bad):
    with pytest.raises(ValueError, match="SM_HPS"):
        hyperparams.parse(_parser(), [], env={"SM_HPS": bad})
