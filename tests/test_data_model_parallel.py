"""Pipeline schedules, staleness training, and (in a subprocess with logical devices) data and model
parallelism on real TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utils import data_parallel, gpipe, model_parallel, staleness
from utils.paths import REPO_ROOT


@given(st.integers(1, 8), st.integers(1, 32))
def test_simulated_bubble_equals_gpipe_formula(p, m):
    slots = gpipe.simulate_pipeline(p, m)
    assert len(slots) == 2 * p * m
    assert gpipe.makespan(slots) == pytest.approx(3 * (m + p - 1))  # forward 1 step, backward 2
    assert gpipe.bubble_fraction(slots) == pytest.approx(gpipe.gpipe_bubble(p, m))


@settings(max_examples=30)
@given(st.integers(2, 5), st.integers(1, 6), st.lists(st.floats(0.1, 5), min_size=5, max_size=5))
def test_timeline_respects_dependencies_and_one_task_per_stage(p, m, durations):
    slots = gpipe.simulate_pipeline(p, m, forward=durations[:p], backward=[2 * d for d in durations[:p]])
    end = {(t.kind, t.stage, t.micro): t.end for t in slots}
    for t in slots:
        if t.kind == "F" and t.stage > 0:
            assert t.start >= end[("F", t.stage - 1, t.micro)] - 1e-12
        if t.kind == "B":
            dep = ("B", t.stage + 1, t.micro) if t.stage < p - 1 else ("F", t.stage, t.micro)
            assert t.start >= end[dep] - 1e-12
    for s in range(p):
        mine = sorted((t.start, t.end) for t in slots if t.stage == s)
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(mine, mine[1:]))


def test_naive_schedule_leaves_all_but_one_stage_idle():
    assert gpipe.bubble_fraction(gpipe.simulate_pipeline(4, 1)) == pytest.approx(3 / 4)
    assert gpipe.gpipe_bubble(4, 1) == pytest.approx(3 / 4)
    with pytest.raises(ValueError):
        gpipe.gpipe_bubble(0, 3)
    with pytest.raises(ValueError, match="one per stage"):
        gpipe.simulate_pipeline(3, 2, forward=[1.0, 2.0])
    with pytest.raises(ValueError, match="no tasks"):
        gpipe.bubble_fraction([])


def test_stage_bounds():
    assert model_parallel.stage_bounds(5, 2) == [(0, 3), (3, 5)]
    assert model_parallel.stage_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(ValueError, match="cannot split"):
        model_parallel.stage_bounds(2, 3)


def test_warmup_scaled_lr():
    assert data_parallel.warmup_scaled_lr(0, 0.1, 4, 10) == pytest.approx(0.1)
    assert data_parallel.warmup_scaled_lr(5, 0.1, 4, 10) == pytest.approx(0.25)
    assert data_parallel.warmup_scaled_lr(50, 0.1, 4, 10) == pytest.approx(0.4)
    assert data_parallel.warmup_scaled_lr(0, 0.1, 4, 0) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        data_parallel.warmup_scaled_lr(0, -1, 4, 10)


def test_mlp_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(7, 5)), rng.normal(size=(7, 3))
    params = staleness._mlp_init(5, 4, 3, seed=1)
    params[1] = rng.normal(size=4) * 0.1
    _, grads = staleness.mlp_loss_and_grads(params, x, y)
    eps = 1e-6
    for i, p in enumerate(params):
        flat = p.reshape(-1)
        for k in range(0, flat.size, max(1, flat.size // 5)):
            old = flat[k]
            flat[k] = old + eps
            up = staleness.mlp_loss_and_grads(params, x, y)[0]
            flat[k] = old - eps
            down = staleness.mlp_loss_and_grads(params, x, y)[0]
            flat[k] = old
            assert grads[i].reshape(-1)[k] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-7)


def test_staleness_zero_is_plain_sgd_and_stale_is_worse_at_a_high_rate():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 6))
    y = x @ rng.normal(size=(6, 2))
    steps, fresh = staleness.train_with_staleness(x, y, x, y, staleness=0, steps=200, lr=0.1)
    assert steps[0] == 0 and steps[-1] == 200
    assert fresh[-1] < 0.5 * fresh[0]
    _, stale = staleness.train_with_staleness(x, y, x, y, staleness=16, steps=200, lr=0.1)
    assert stale[-1] > fresh[-1]
    with pytest.raises(ValueError):
        staleness.train_with_staleness(x, y, x, y, staleness=-1, steps=10, lr=0.1)


# The TensorFlow checks need logical devices, which must be set before TensorFlow starts: a subprocess.
TF_CHECK = textwrap.dedent("""
    import json
    import numpy as np
    from utils import data_parallel, devices, gpipe, model_parallel
    cpus = devices.use_logical_cpus(2)
    import tensorflow as tf
    from utils import model
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = rng.normal(size=(64, 2)).astype("float32")
    build = lambda: model.build_forecaster(8, 2, width=16, depth=3, seed=0)
    strategy = tf.distribute.MirroredStrategy(cpus)
    check = data_parallel.check_replica_gradients(strategy, build, x, y)
    run = data_parallel.train_data_parallel(strategy, build, x, y, x, y, per_replica_batch=8, epochs=1,
                                       lr=lambda k: 0.05, verbose=False)
    # The same SGD on one device with the global batch gives the same weights
    single = build()
    import keras
    opt = keras.optimizers.SGD(0.05)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).batch(16, drop_remainder=True)
    for xb, yb in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.reduce_mean(tf.square(yb - single(xb)), axis=-1))
        opt.apply(tape.gradient(loss, single.trainable_variables), single.trainable_variables)
    net = build()
    stages = model_parallel.split_model(net, cpus)
    out, where = model_parallel.run_split(stages, x)
    step = gpipe.pipeline_step(stages, x, y, micro_batches=4)
    ref = model_parallel.full_batch_gradients(stages, x, y)
    print("JSON " + json.dumps({
        "devices": cpus, "replicas": check.replicas, "grad_diff": check.max_abs_difference,
        "grad_scale": check.max_abs_gradient, "replica_weight_diff": run.max_replica_weight_difference,
        "steps": run.steps, "split_diff": float(np.max(np.abs(out.numpy() - net(x).numpy()))),
        "ran_on": [w["ran_on"] for w in where], "weights_on": [w["weights_on"] for w in where],
        "stages": [len(s.layers) for s in stages],
        "pipe_diff": max(float(np.max(np.abs(a - b))) for sa, sb in zip(step.gradients, ref) for a, b in zip(sa, sb)),
        "tasks": len(step.measured), "run_loss": run.train_loss[-1],
        "single_vs_dp": max(float(np.max(np.abs(a - b))) for a, b in zip(run.weights, single.get_weights())),
    }))
""")


@pytest.fixture(scope="module")
def tf_result():
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="-1",
        PYTHONPATH=str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    proc = subprocess.run(
        [sys.executable, "-c", TF_CHECK], capture_output=True, text=True, timeout=300, env=env, cwd=REPO_ROOT
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("JSON ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][5:])


def test_mirrored_replicas_average_to_the_global_gradient(tf_result):
    assert tf_result["replicas"] == 2
    assert tf_result["grad_diff"] <= 1e-5 * max(1.0, tf_result["grad_scale"])


def test_replicas_hold_identical_weights_after_training(tf_result):
    assert tf_result["steps"] == 4
    assert tf_result["replica_weight_diff"] == 0.0


def test_data_parallel_sgd_equals_one_device_on_the_global_batch(tf_result):
    assert tf_result["single_vs_dp"] <= 1e-5


def test_split_model_runs_where_placed_and_matches(tf_result):
    assert tf_result["stages"] == [2, 2]
    assert tf_result["ran_on"][0].endswith("CPU:0") and tf_result["ran_on"][-1].endswith("CPU:1")
    assert tf_result["weights_on"][0].endswith("CPU:0") and tf_result["weights_on"][-1].endswith("CPU:1")
    assert tf_result["split_diff"] <= 1e-6


def test_pipeline_gradients_equal_the_whole_batch(tf_result):
    assert tf_result["tasks"] == 2 * 2 * 4
    assert tf_result["pipe_diff"] <= 1e-6
