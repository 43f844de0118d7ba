"""The baseline forecaster builds, trains, and beats trivial predictors on the course data."""

from __future__ import annotations

import numpy as np
import pytest

from utils import data, model


@pytest.fixture(scope="module")
def splits():
    values = data.load_series()["temperature_f"].to_numpy()[: 24 * 120]  # 120 days
    return data.prepare(values, lookback=48, horizon=24)


def test_shapes_and_size_scale_with_width_and_depth():
    small = model.build_forecaster(48, 24, width=16, depth=1)
    big = model.build_forecaster(48, 24, width=64, depth=3)
    out = small(np.zeros((5, 48), dtype=np.float32))
    assert tuple(out.shape) == (5, 24)
    assert small.count_params() == 48 * 16 + 16 + 16 * 24 + 24
    assert big.count_params() > 10 * small.count_params()
    with pytest.raises(ValueError, match="width"):
        model.build_forecaster(48, 24, width=0)


def test_same_seed_same_weights():
    a = model.build_forecaster(seed=4).get_weights()
    b = model.build_forecaster(seed=4).get_weights()
    c = model.build_forecaster(seed=5).get_weights()
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not all(np.array_equal(u, v) for u, v in zip(a, c))


def test_seasonal_naive_repeats_yesterday():
    x = np.arange(48, dtype=np.float32)[None, :]
    assert model.seasonal_naive(x, horizon=24).tolist() == [list(range(24, 48))]
    assert model.seasonal_naive(x, horizon=30)[0, 24:].tolist() == list(range(24, 30))


def test_training_lowers_validation_loss_and_beats_the_mean(splits, capsys):
    m = model.compile_forecaster(model.build_forecaster(width=32, depth=1, seed=0), learning_rate=3e-3)
    before = model.mse(m.predict(splits.x_val, verbose=0), splits.y_val)
    result = model.train_forecaster(
        m, splits.x_train, splits.y_train, splits.x_val, splits.y_val, epochs=4, batch_size=64
    )
    assert "epoch 4/4" in capsys.readouterr().out
    assert len(result.history["val_loss"]) == 4 and result.seconds > 0
    assert result.final_val_loss < before
    mean_predictor = model.mse(np.zeros_like(splits.y_val), splits.y_val)  # normalised data: mean is ~0
    assert result.final_val_loss < 0.5 * mean_predictor


def test_bad_optimizer_name():
    with pytest.raises(ValueError, match="optimizer"):
        model.compile_forecaster(model.build_forecaster(), optimizer="adamw2")


def test_restore_state_copies_weights_and_optimizer_state():
    course_model = model
    x, y = np.ones((8, 48), np.float32), np.zeros((8, 24), np.float32)
    trained = course_model.compile_forecaster(course_model.build_forecaster(width=8, depth=1, seed=1))
    trained.train_on_batch(x, y)
    fresh = course_model.compile_forecaster(course_model.build_forecaster(width=8, depth=1, seed=2))
    course_model.restore_state(fresh, trained)
    assert all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), trained.get_weights()))
    assert int(fresh.optimizer.iterations.numpy()) == 1
    assert all(
        np.array_equal(a.numpy(), b.numpy()) for a, b in zip(fresh.optimizer.variables, trained.optimizer.variables)
    )
    with pytest.raises(ValueError, match="same architecture"):
        course_model.restore_state(course_model.build_forecaster(width=8, depth=2), trained)


def test_gradient_bytes_by_layer_come_last_layer_first_and_add_up():
    net = model.build_forecaster(width=32, depth=2)
    layers = model.gradient_bytes_by_layer(net)
    assert sum(layers) == 4 * net.count_params()
    dense = [layer for layer in net.layers if layer.trainable_weights]
    assert layers[0] == 4 * dense[-1].count_params() and layers[-1] == 4 * dense[0].count_params()
