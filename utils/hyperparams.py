"""Hyperparameters of a training script: command-line arguments, or SageMaker's SM_HPS and `--key value` ones."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Mapping, Sequence


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
        raise ValueError(f"SM_HPS is not valid JSON ({exc}); it should look like {{\"epochs\": 5}}") from exc
    if not isinstance(hps, dict):
        raise ValueError(f"SM_HPS should be a JSON object of hyperparameters, got {type(hps).__name__}")
    known = {a.dest for a in parser._actions}
    # Strings, so that argparse converts them with each option's type, as it does for the command line.
    return {k.replace("-", "_"): str(v) for k, v in hps.items() if k.replace("-", "_") in known}


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None,
          env: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Parse `argv` over defaults from SM_HPS; options the script does not know are reported, not fatal.

    SageMaker adds arguments of its own to some containers (e.g. `--model_dir s3://...`): a script
    that rejected them could not run there unchanged.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    env = os.environ if env is None else env
    parser.set_defaults(**sagemaker_defaults(parser, env))
    args, unknown = parser.parse_known_args(dashed(argv))
    if unknown:
        print(f"ignoring arguments this script does not use: {' '.join(unknown)}", file=sys.stderr, flush=True)
    return args
