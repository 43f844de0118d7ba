"""scripts/train_keras_jax.py: Keras 3 on JAX with keras.distribution.DataParallel over 2 CPU devices of one process
(lesson 05's deep dive), run in smoke mode through the course's launcher."""

from __future__ import annotations

import math
import subprocess
import sys

from utils import launch, paths

SCRIPT = paths.SCRIPTS / "train_keras_jax.py"


def test_the_script_trains_data_parallel_on_two_cpu_devices():
    env = launch.worker_env(1, {"COURSE_SMOKE": "1", "KERAS_BACKEND": "jax"})  # XLA_FLAGS: the script sets it
    env.pop("XLA_FLAGS", None)
    run = launch.run_workers(
        [[sys.executable, str(SCRIPT), "--data-size", "2000", "--batch-size", "32"]],
        [env],
        timeout=240,
        run_id=env[launch.RUN_MARKER],
        stream=False,
    )
    (result,) = run.records()
    assert result["backend"] == "jax" and result["size"] == 1
    assert result["devices"] == 2 and result["device_names"] == ["cpu:0", "cpu:1"]
    assert result["weight_devices"] == 2, "every weight must be held on both devices (replicated)"
    assert result["batch"] == 2 * 32 and result["batch_per_replica"] == 32  # the global batch, split in two
    assert len(result["loss"]) == 2, "smoke mode trains 2 epochs"  # utils.mode's default under COURSE_SMOKE=1
    assert all(math.isfinite(v) and v > 0 for v in result["loss"] + result["val_loss"])
    assert result["loss"][-1] < result["loss"][0], f"the training loss did not fall: {result['loss']}"
    assert all(s > 0 for s in result["samples_per_s"] + result["step_seconds"])


def test_another_backend_is_refused_with_what_to_do():
    env = launch.worker_env(1, {"KERAS_BACKEND": "tensorflow"})
    out = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "KERAS_BACKEND='tensorflow'" in out.stderr and "set it to jax" in out.stderr
