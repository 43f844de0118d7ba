"""Throughput arithmetic of the benchmarks: steady steps, synchronous pace, best of rounds."""

import pytest

from utils import bench


def test_steady_step_drops_the_tracing_epoch():
    assert bench.steady_step([9.0, 1.0, 3.0, 2.0]) == 2.0
    assert bench.steady_step([4.0]) == 4.0
    with pytest.raises(ValueError, match="no step time"):
        bench.steady_step([])


def test_synchronous_ranks_go_at_the_slowest_pace():
    records = [{"batch": 100, "step_seconds": [5, 0.5, 0.5]}, {"batch": 100, "step_seconds": [5, 1.0, 1.0]}]
    assert bench.synchronous_throughput(records) == pytest.approx(200.0)  # 200 samples per 1.0 s step
    assert bench.independent_throughput(records) == pytest.approx(300.0)  # 200/s + 100/s


def test_best_of_rounds_keeps_the_fastest_and_computes_efficiency():
    best = bench.BestOf()
    best.add("1 rank", 100.0, 1.0)
    best.add("2 ranks", 150.0, 1.3)
    best.add("2 ranks", 180.0, 1.1)
    best.add("2 ranks", 170.0, 1.2)
    assert best.speed["2 ranks"] == 180.0 and best.step["2 ranks"] == 1.1
    assert best.efficiency("2 ranks", "1 rank", 2) == pytest.approx(0.9)
    with pytest.raises(KeyError, match="4 ranks"):
        best.efficiency("4 ranks", "1 rank", 4)


def test_allreduce_sizes_are_checked_before_anything_starts():
    with pytest.raises(ValueError, match="at least 4"):
        bench.measure_allreduce([2], [2], repeats=1)


def _rows(best: dict[int, float], repeats: int = 5) -> list[dict]:
    return [
        {"np": 2, "bytes": b, "seconds": 2 * t, "best_seconds": t, "repeats": repeats, "algbw_GBps": 0.0}
        for b, t in best.items()
    ]


def test_a_measurement_slowed_at_small_sizes_is_merged_with_the_next_one_size_by_size():
    # the 4 KiB calls were all slowed by another program: no line with a positive slope fits
    slowed = _rows({4 << 10: 0.030, 256 << 10: 0.001, 4 << 20: 0.004})
    assert not bench._grows_with_size(slowed)
    again = _rows({4 << 10: 0.0002, 256 << 10: 0.0015, 4 << 20: 0.0050}, repeats=3)
    merged = bench.merge_best(slowed, again)
    assert [r["best_seconds"] for r in merged] == [0.0002, 0.001, 0.004]  # each size's best of both
    assert [r["seconds"] for r in merged] == [0.0004, 0.003, 0.010]  # the later medians
    assert {r["repeats"] for r in merged} == {8}
    assert merged[2]["algbw_GBps"] == pytest.approx((4 << 20) / 0.004 / 1e9)
    assert merged[2]["busbw_GBps"] == pytest.approx(merged[2]["algbw_GBps"])  # 2 (N-1) / N = 1 at N = 2
    assert bench._grows_with_size(merged)
