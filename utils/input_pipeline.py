"""Input-pipeline lever of lesson 01: the same costly tf.data pipeline built naive or tuned, and timed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: The pipeline variants `build_pipeline` knows, from slowest to fastest.
VARIANTS = ("naive", "parallel map", "parallel map + cache + prefetch")


def slow_wait(latency_s: float) -> np.float32:
    """The wait of one read from remote storage (it releases the Python GIL, as real I/O does)."""
    if latency_s > 0:
        time.sleep(latency_s)
    return np.float32(0.0)


def slow_read(
    index: int, values: np.ndarray, lookback: int, horizon: int, latency_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Read window `index` as if from remote storage: wait `latency_s`, then cut it from `values`."""
    slow_wait(latency_s)
    i = int(index)
    window = np.asarray(values[i : i + lookback + horizon], dtype=np.float32)
    return window[:lookback], window[lookback:]


def build_pipeline(
    values: np.ndarray,
    variant: str,
    *,
    lookback: int = 48,
    horizon: int = 24,
    batch_size: int = 64,
    latency_s: float = 0.001,
    feature_work: int = 8,
):
    """A tf.data pipeline of (window, target) batches from `values`, with a read latency and feature work per window.

    `variant` is one of VARIANTS: "naive" maps one window at a time; "parallel map" maps several at once
    (`num_parallel_calls=AUTOTUNE`); the last also caches the prepared windows after the first epoch and
    prefetches batches while the consumer works.
    """
    import tensorflow as tf

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    values = np.asarray(values, dtype=np.float32)
    count = len(values) - lookback - horizon + 1
    if count < 1:
        raise ValueError(
            f"a series of {len(values)} steps holds no window of {lookback} + {horizon} steps: use a longer one"
        )
    if latency_s < 0 or feature_work < 0:
        raise ValueError("latency_s and feature_work must not be negative")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")

    def read(i):
        x, y = tf.py_function(
            lambda j: slow_read(int(j), values, lookback, horizon, latency_s), [i], [tf.float32, tf.float32]
        )
        x.set_shape([lookback])
        y.set_shape([horizon])
        return x, y

    def features(x, y):
        # Deliberate per-window computation (a stand-in for feature engineering): repeated smoothing.
        for _ in range(feature_work):
            x = 0.5 * x + 0.25 * tf.roll(x, 1, 0) + 0.25 * tf.roll(x, -1, 0)
        return x, y

    ds = tf.data.Dataset.range(count)
    if variant == "naive":
        ds = ds.map(read).map(features)
    else:
        ds = ds.map(read, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.map(features, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if variant == VARIANTS[2]:
        ds = ds.cache()
    ds = ds.batch(batch_size)
    if variant == VARIANTS[2]:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds


@dataclass
class PipelineTiming:
    """Per-epoch wall times of one pipeline, the samples per epoch, and the derived throughput."""

    variant: str
    samples: int
    epoch_seconds: list[float]

    @property
    def samples_per_s(self) -> list[float]:
        """Throughput of each epoch."""
        return [self.samples / s for s in self.epoch_seconds]

    @property
    def total_seconds(self) -> float:
        """Wall time of all epochs together."""
        return float(sum(self.epoch_seconds))

    @property
    def mean_samples_per_s(self) -> float:
        """Samples of all epochs divided by their total wall time."""
        return self.samples * len(self.epoch_seconds) / self.total_seconds


def time_pipeline(
    ds, variant: str, epochs: int = 2, consume: Callable | None = None, progress: bool = True
) -> PipelineTiming:
    """Iterate `ds` for `epochs`, calling `consume(x, y)` on each batch (a training step), and time each epoch."""
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a whole number of at least 1, got {epochs!r}")
    samples, times = 0, []
    for epoch in range(epochs):
        start, seen = time.perf_counter(), 0
        for x, y in ds:
            if consume is not None:
                consume(x, y)
            seen += int(x.shape[0])
        times.append(time.perf_counter() - start)
        samples = seen
        if progress:
            print(
                f"  {variant}, epoch {epoch + 1}/{epochs}: {times[-1]:.2f} s, {seen / times[-1]:,.0f} samples/s",
                flush=True,
            )
    return PipelineTiming(variant=variant, samples=samples, epoch_seconds=times)
