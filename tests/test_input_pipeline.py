"""Every input-pipeline variant of lesson 01 yields the same windows; the timer counts what it saw."""

import numpy as np
import pytest

from utils import data, input_pipeline


def _batches(ds):
    return [(x.numpy(), y.numpy()) for x, y in ds]


def test_slow_read_cuts_the_right_window():
    values = np.arange(100, dtype=np.float32)
    x, y = input_pipeline.slow_read(5, values, lookback=4, horizon=2, latency_s=0.0)
    assert x.tolist() == [5, 6, 7, 8] and y.tolist() == [9, 10]


def test_variants_yield_identical_batches():
    values = data.synthetic_series(200, seed=1)
    ref_x, ref_y = data.make_windows(values, 24, 6)
    outputs = [
        _batches(
            input_pipeline.build_pipeline(
                values, v, lookback=24, horizon=6, batch_size=16, latency_s=0.0, feature_work=0
            )
        )
        for v in input_pipeline.VARIANTS
    ]
    for batches in outputs:
        x = np.concatenate([b[0] for b in batches])
        y = np.concatenate([b[1] for b in batches])
        np.testing.assert_allclose(x, ref_x, rtol=1e-6)
        np.testing.assert_allclose(y, ref_y, rtol=1e-6)


def test_time_pipeline_counts_samples_and_calls_the_consumer():
    values = data.synthetic_series(120, seed=2)
    ds = input_pipeline.build_pipeline(
        values, input_pipeline.VARIANTS[2], lookback=24, horizon=6, batch_size=32, latency_s=0.0
    )
    calls = []
    timing = input_pipeline.time_pipeline(ds, "cached", epochs=2, consume=lambda x, y: calls.append(1), progress=False)
    windows = 120 - 24 - 6 + 1
    assert timing.samples == windows and len(timing.epoch_seconds) == 2
    assert len(calls) == 2 * int(np.ceil(windows / 32))
    assert timing.mean_samples_per_s > 0


def test_throughput_of_known_epoch_times():
    timing = input_pipeline.PipelineTiming("naive", samples=100, epoch_seconds=[1.0, 3.0])
    assert timing.samples_per_s == [100.0, pytest.approx(33.333333)]
    assert timing.total_seconds == 4.0
    assert timing.mean_samples_per_s == 50.0  # 200 samples in 4 s, not the mean of 100 and 33.3 per s


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="variant must be one of"):
        input_pipeline.build_pipeline(np.zeros(100), "fast")
    with pytest.raises(ValueError, match="longer"):
        input_pipeline.build_pipeline(np.zeros(10), "naive")
    with pytest.raises(ValueError, match="epochs"):
        input_pipeline.time_pipeline([], "naive", epochs=0)
