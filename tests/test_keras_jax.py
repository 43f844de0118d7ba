"""scripts/train_keras_jax.py: Keras 3 on JAX with keras.distribution.DataParallel over 2 CPU devices of one process.
Its training run is lesson 05's deep dive, which CI executes and which asserts what the run must show (2 devices,
every weight on both, finite losses close to MWMS's); here, only what the lesson cannot show: a wrong backend."""

from __future__ import annotations

import subprocess
import sys

from utils import launch, paths

SCRIPT = paths.SCRIPTS / "train_keras_jax.py"


def test_another_backend_is_refused_with_what_to_do():
    env = launch.worker_env(1, {"KERAS_BACKEND": "tensorflow"})
    out = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "KERAS_BACKEND='tensorflow'" in out.stderr and "set it to jax" in out.stderr
