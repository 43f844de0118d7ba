"""Where a training script reads its data and writes its outputs: SageMaker's variables, or local defaults."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

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
    """Read SM_CHANNEL_TRAIN, SM_MODEL_DIR, SM_OUTPUT_DATA_DIR (in a SageMaker job) or use local defaults."""
    env = os.environ if env is None else env
    on_sagemaker = "SM_MODEL_DIR" in env or "SM_CHANNEL_TRAIN" in env
    data_file = None
    if env.get("SM_CHANNEL_TRAIN"):
        channel = Path(env["SM_CHANNEL_TRAIN"])
        csvs = sorted(channel.glob("*.csv"))
        if not csvs:
            raise FileNotFoundError(f"the train channel {channel} holds no .csv file: upload the series CSV "
                                    "(data/seattle_hourly_temperature_2010.csv or one in its format) to that S3 prefix")
        data_file = csvs[0]
    ckpt = checkpoint_dir or (SAGEMAKER_CHECKPOINTS if on_sagemaker else "")
    return JobPaths(
        on_sagemaker=on_sagemaker,
        data_file=data_file,
        model_dir=Path(env["SM_MODEL_DIR"]) if env.get("SM_MODEL_DIR") else None,
        output_dir=Path(env["SM_OUTPUT_DATA_DIR"]) if env.get("SM_OUTPUT_DATA_DIR") else None,
        checkpoint_dir=Path(ckpt) if ckpt else None,
    )
