"""The course's forecasting model (Keras 3): build, compile, train on one worker, and a naive baseline."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


def build_forecaster(
    lookback: int = 48, horizon: int = 24, width: int = 128, depth: int = 2, seed: int = 0, name: str = "forecaster"
):
    """An MLP that maps `lookback` past hours to the next `horizon` hours (uncompiled Keras model).

    `width` and `depth` scale its compute: later lessons make it larger to be compute-bound.
    """
    import keras

    for label, v in (("lookback", lookback), ("horizon", horizon), ("width", width)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{label} must be a whole number of at least 1, got {v!r}")
    if not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ValueError(f"depth (hidden layers) must be a whole number of at least 0, got {depth!r}")
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(lookback,), name="past_hours")
    h = inputs
    for i in range(depth):
        h = keras.layers.Dense(width, activation="relu", name=f"hidden_{i}")(h)
    outputs = keras.layers.Dense(horizon, name="next_hours")(h)
    return keras.Model(inputs, outputs, name=name)


def gradient_bytes_by_layer(model, bytes_per_value: int = 4) -> list[int]:
    """The gradient bytes of each layer that has weights, in the order the backward pass computes them (the last
    layer first): what an allreduce that starts as soon as a gradient is ready receives, one layer after another."""
    return [
        bytes_per_value * sum(int(np.prod(w.shape)) for w in layer.trainable_weights)
        for layer in reversed(model.layers)
        if layer.trainable_weights
    ]


def compile_forecaster(model, learning_rate: float = 1e-3, optimizer: str = "adam"):
    """Compile with mean squared error, mean absolute error as a metric, and the named optimizer."""
    import keras

    choices = {"adam": keras.optimizers.Adam, "sgd": keras.optimizers.SGD}
    if optimizer not in choices:
        raise ValueError(f"optimizer must be one of {sorted(choices)}, got {optimizer!r}")
    model.compile(optimizer=choices[optimizer](learning_rate=learning_rate), loss="mse", metrics=["mae"])
    return model


def seasonal_naive(x: np.ndarray, horizon: int, season: int = 24) -> np.ndarray:
    """Forecast each of the next `horizon` hours as the value one `season` earlier (the classic baseline)."""
    x = np.asarray(x)
    if x.shape[1] < season:
        raise ValueError(f"the lookback ({x.shape[1]}) must cover one season ({season}) for this baseline")
    last = x[:, -season:]
    reps = int(np.ceil(horizon / season))
    return np.tile(last, (1, reps))[:, :horizon]


def mse(prediction: np.ndarray, target: np.ndarray) -> float:
    """Mean squared error between two arrays of the same shape."""
    prediction, target = np.asarray(prediction, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if prediction.shape != target.shape:
        raise ValueError(f"shapes differ: prediction {prediction.shape}, target {target.shape}")
    return float(np.mean((prediction - target) ** 2))


@dataclass
class TrainResult:
    """What `train_forecaster` returns: per-epoch losses and the wall time of `fit`."""

    history: dict[str, list[float]]
    seconds: float

    @property
    def final_val_loss(self) -> float:
        """Validation loss after the last epoch."""
        return self.history["val_loss"][-1]


def train_forecaster(
    model,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    epochs: int = 5,
    batch_size: int = 64,
    seed: int = 0,
    verbose: bool = True,
) -> TrainResult:
    """Fit on one worker, printing one line per epoch; return the history and the wall time."""
    import keras

    from utils.data import to_dataset

    train = to_dataset(x_train, y_train, batch_size, shuffle=True, seed=seed)
    val = to_dataset(x_val, y_val, batch_size=max(batch_size, 256))

    class OneLine(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if verbose:
                logs = logs or {}
                print(
                    f"epoch {epoch + 1}/{epochs}: loss {logs.get('loss', float('nan')):.4f}, "
                    f"val_loss {logs.get('val_loss', float('nan')):.4f}",
                    flush=True,
                )

    start = time.perf_counter()
    history = model.fit(train, validation_data=val, epochs=epochs, verbose=0, shuffle=False, callbacks=[OneLine()])
    seconds = time.perf_counter() - start
    return TrainResult(history={k: [float(v) for v in vals] for k, vals in history.history.items()}, seconds=seconds)


def mse_per_example(y, pred):
    """Mean squared error of each example (averaged over the horizon), as a TensorFlow tensor."""
    import tensorflow as tf

    return tf.reduce_mean(tf.square(y - pred), axis=-1)


@dataclass
class CurvePoint:
    """One point of a learning curve: the best validation loss at a training-set size, and its cost."""

    windows: int
    best_val_loss: float
    epochs: int
    epoch_seconds: list[float]
    wall_seconds: float

    @property
    def seconds_per_epoch(self) -> float:
        """Median training time of one pass over the data: validation passes and the first epoch (tracing) excluded."""
        steady = self.epoch_seconds[1:] or self.epoch_seconds
        return float(np.median(steady))


def learning_curve_point(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    *,
    max_epochs: int,
    patience: int = 3,
    batch_size: int = 64,
    seed: int = 0,
) -> CurvePoint:
    """Train the course forecaster on (x_train, y_train) until the validation loss stops improving; time it."""
    import keras

    from utils.data import to_dataset

    if len(x_train) < 1 or len(x_train) != len(y_train):
        raise ValueError(
            f"give as many targets as windows, at least one: {len(x_train)} windows, {len(y_train)} targets"
        )
    if not isinstance(max_epochs, int) or max_epochs < 1 or not isinstance(patience, int) or patience < 1:
        raise ValueError(
            f"max_epochs and patience must be whole numbers of at least 1, got {max_epochs!r}, {patience!r}"
        )

    class TrainingTime(keras.callbacks.Callback):
        """Adds up the time of the training batches only (validation runs after them in each epoch)."""

        def on_train_begin(self, logs=None):
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.start = self.end = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.end = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(self.end - self.start)

    net = compile_forecaster(build_forecaster(lookback=x_train.shape[1], horizon=y_train.shape[1], seed=seed))
    timer = TrainingTime()
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=patience, restore_best_weights=True)
    start = time.perf_counter()
    history = net.fit(
        to_dataset(x_train, y_train, batch_size, shuffle=True, seed=seed),
        validation_data=to_dataset(x_val, y_val, 1024),
        epochs=max_epochs,
        verbose=0,
        callbacks=[timer, stop],
        shuffle=False,
    )  # the dataset is shuffled already
    wall = time.perf_counter() - start
    losses = history.history["val_loss"]
    return CurvePoint(
        windows=len(x_train),
        best_val_loss=float(min(losses)),
        epochs=len(losses),
        epoch_seconds=timer.seconds,
        wall_seconds=wall,
    )


def restore_state(net, saved) -> None:
    """Copy a saved model's weights and optimizer state into `net` (built, e.g. inside a strategy's scope)."""
    if len(net.weights) != len(saved.weights):
        raise ValueError(
            f"the saved model has {len(saved.weights)} weights and this one {len(net.weights)}: "
            "build the same architecture (width, depth) as the checkpoint, or start from a new folder"
        )
    for target, source in zip(net.weights, saved.weights):
        target.assign(source.numpy())
    if saved.optimizer is not None and net.optimizer is not None:
        if not net.optimizer.built:
            net.optimizer.build(net.trainable_variables)
        pairs = list(zip(net.optimizer.variables, saved.optimizer.variables))
        if len(net.optimizer.variables) != len(saved.optimizer.variables) or any(
            tuple(a.shape) != tuple(b.shape) for a, b in pairs
        ):
            raise ValueError("the saved optimizer's state does not fit this optimizer: use the same --optimizer")
        for target, source in pairs:  # same order: iterations, learning rate, then one set per variable
            target.assign(source.numpy())
