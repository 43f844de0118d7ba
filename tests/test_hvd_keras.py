"""The Keras 3 bridge keeps ranks identical, and 2 ranks with SGD equal 1 rank on the same global batch."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_horovod

from utils import launch

pytestmark = needs_horovod


def _train(per_rank_batch: int, steps: int, optimizer: str, broadcast: bool, seed_by_rank: bool):
    """Train a small forecaster on this rank's shard; return its final weights."""
    import horovod.tensorflow as hvd
    import numpy as np

    from utils import data, hvd_keras, model

    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(per_rank_batch * hvd.size() * steps, 8)).astype("float32")
    y = (x[:, :2] * 0.5 + 0.1).astype("float32")
    xs, ys = x[hvd.rank() :: hvd.size()], y[hvd.rank() :: hvd.size()]
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


def test_two_ranks_end_bit_identical_after_broadcast_and_averaging():
    w0, w1 = launch.horovod_run(_train, 2, args=(16, 20, "adam", True, True), timeout=120, stream=False)
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(w0, w1))


def test_two_ranks_with_sgd_match_one_rank_on_the_same_global_batch():
    (single,) = launch.horovod_run(_train, 1, args=(32, 20, "sgd", False, False), timeout=120, stream=False)
    two = launch.horovod_run(_train, 2, args=(16, 20, "sgd", True, False), timeout=120, stream=False)
    for a, b in zip(single, two[0]):
        # Same updates in exact arithmetic; float32 sums in another order differ by rounding only.
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-5)


def test_warmup_schedule():
    pytest.importorskip("horovod.tensorflow")
    from utils.hvd_keras import WarmupScaledLR

    cb = WarmupScaledLR(0.1, ranks=4, warmup_steps=10)
    assert cb.lr_at(0) == pytest.approx(0.1)
    assert cb.lr_at(5) == pytest.approx(0.25)
    assert cb.lr_at(10) == cb.lr_at(99) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        WarmupScaledLR(0.0, ranks=1, warmup_steps=1)
