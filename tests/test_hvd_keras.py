"""The Keras 3 bridge keeps ranks identical, and 2 ranks with SGD equal 1 rank on the same global batch."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_horovod

from utils import launch


def _train(per_rank_batch: int, steps: int, optimizer: str, broadcast: bool, seed_by_rank: bool):
    """Train a small forecaster on this rank's shard; return its final weights."""
    import horovod.tensorflow as hvd
    import numpy as np

    from utils import data, hvd_keras, model

    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(per_rank_batch * hvd.size() * steps, 8)).astype("float32")
    y = (x[:, :2] * 0.5 + 0.1).astype("float32")
    xs, ys = data.shard(x, y, hvd.rank(), hvd.size())  # rank r: windows r, r + size, ...: equal shards
    seed = hvd.rank() if seed_by_rank else 0  # different initial weights on purpose: the broadcast must fix them
    net = hvd_keras.distributed(model.build_forecaster(lookback=8, horizon=2, width=16, depth=1, seed=seed))
    model.compile_forecaster(net, learning_rate=0.05, optimizer=optimizer)
    callbacks = [hvd_keras.BroadcastInitialState()] if broadcast else []
    net.fit(
        data.to_dataset(xs, ys, per_rank_batch),
        epochs=1,
        verbose=0,
        shuffle=False,
        callbacks=callbacks + [hvd_keras.AverageMetrics()],
    )
    return [w.tolist() for w in net.get_weights()]


@needs_horovod
def test_two_ranks_end_bit_identical_after_broadcast_and_averaging():
    w0, w1 = launch.horovod_run(_train, 2, args=(16, 20, "adam", True, True), timeout=120, stream=False)
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(w0, w1))


@needs_horovod
def test_two_ranks_with_sgd_match_one_rank_on_the_same_global_batch():
    (single,) = launch.horovod_run(_train, 1, args=(32, 20, "sgd", False, False), timeout=120, stream=False)
    two = launch.horovod_run(_train, 2, args=(16, 20, "sgd", True, False), timeout=120, stream=False)
    for a, b in zip(single, two[0]):
        # Same updates in exact arithmetic; float32 sums in another order differ by rounding only.
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-5)


def test_warmup_schedule_needs_no_horovod():
    # The schedule is plain arithmetic on the callback: it must work (and be tested) without Horovod.
    from utils.hvd_keras import WarmupScaledLR

    cb = WarmupScaledLR(0.1, ranks=4, warmup_steps=10)
    assert cb.lr_at(0) == pytest.approx(0.1)
    assert cb.lr_at(5) == pytest.approx(0.25)  # halfway from 0.1 to 0.4
    assert cb.lr_at(10) == cb.lr_at(99) == pytest.approx(0.4)
    assert WarmupScaledLR(0.1, ranks=4, warmup_steps=0).lr_at(0) == pytest.approx(0.4)  # no warm-up
    with pytest.raises(ValueError):
        WarmupScaledLR(0.0, ranks=1, warmup_steps=1)


def test_warmup_schedule_sets_the_rate_of_a_real_optimizer_step_by_step():
    import keras
    import numpy as np

    from utils.hvd_keras import WarmupScaledLR

    net = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    net.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda b, logs: seen.append(float(net.optimizer.learning_rate))
    )
    x = np.zeros((4, 1), "float32")
    net.fit(x, x, batch_size=1, epochs=1, verbose=0, callbacks=[WarmupScaledLR(0.1, 3, 2), record])
    assert seen == pytest.approx([0.1, 0.2, 0.3, 0.3])
