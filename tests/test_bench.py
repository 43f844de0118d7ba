"""Throughput arithmetic of the benchmarks: steady steps, synchronous pace, best of rounds."""

import pytest

from utils import bench, steady


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


def test_progress_prints_one_short_line_per_result_and_hides_the_workers_lines(capsys):
    show = bench.progress("2 ranks")
    assert not show('[1,0]<stdout>:RESULT {"rank": 0, "np": 2, "bytes": 4096, "best_seconds": 0.00111}')
    assert not show('RESULT {"variant": "grouped_allreduce", "best_seconds": 0.0035}')
    assert not show("2026-01-01 I tensorflow/core/platform/cpu_feature_guard.cc: chatter")
    assert not show("RESULT {not json")
    assert capsys.readouterr().out.splitlines() == [
        "  2 ranks: 4 KiB measured (best call 1.11 ms)",
        "  2 ranks: grouped_allreduce measured (best call 3.50 ms)",
    ]
    assert [bench.describe_bytes(b) for b in (100, 4 << 10, 3 << 19, 64 << 20)] == [
        "100 B",
        "4 KiB",
        "1.5 MiB",
        "64 MiB",
    ]


def _fusion(times: dict[str, tuple[float, float]], spread: float = 0.05) -> list[dict]:
    """Rows of both settings: variant -> (best ms on, best ms off), each median `spread` above its best."""
    rows = []
    for variant, (on, off) in times.items():
        for setting, best in ((bench.FUSION_ON, on), (bench.FUSION_OFF, off)):
            record = {
                "variant": variant,
                "tensors": 64,
                "best_seconds": best / 1e3,
                "seconds": best * (1 + spread) / 1e3,
            }
            rows += bench.fusion_rows(setting, [record])
    return rows


def test_the_fusion_reading_follows_the_numbers():
    quiet = steady.Contention(seconds=30, cores=2, others_cpu_seconds=0.6, steal_seconds=0)
    rows = _fusion({bench.EAGER: (104, 98), bench.IN_GRAPH: (5.9, 21.5), bench.GROUPED: (3.5, 16.1)})
    text = bench.fusion_reading(rows, quiet)
    assert "the same within the spread of the calls" in text and "fused or not" in text
    assert "makes the tf.function 3.6× slower" in text and "makes grouped_allreduce 4.6× slower" in text
    assert "30× less than 64 eager calls" in text and "other programs took 1%" in text
    assert bench.fusion_saving(rows, quiet) == pytest.approx((21.5 - 5.9, 21.5))
    # the eager calls 186 against 109 ms: not the same, and not fusion's doing either
    rows = _fusion({bench.EAGER: (186, 109), bench.IN_GRAPH: (57.5, 78.6), bench.GROUPED: (56.7, 49.5)})
    text = bench.fusion_reading(rows)
    assert "fused or not" not in text and "1.7× apart" in text and "cannot say what made the difference" in text
    assert "makes the tf.function 1.4× slower" in text
    assert "leaves grouped_allreduce within the spread of the calls (56.7 and 49.5 ms)" in text
    rows = _fusion({bench.EAGER: (100, 100), bench.IN_GRAPH: (60, 30), bench.GROUPED: (10, 10)})
    assert "makes the tf.function 2.0× faster" in bench.fusion_reading(rows)
    assert bench.fusion_saving(rows) is None  # fusion saved nothing there


def test_a_gap_within_the_calls_spread_is_not_clear():
    rows = _fusion({bench.EAGER: (100, 140), bench.IN_GRAPH: (10, 25), bench.GROUPED: (5, 9)}, spread=0.5)
    assert not bench.fusion_gap(rows, bench.EAGER).clear  # 40 ms apart, but the calls spread over 70 ms
    assert bench.fusion_gap(rows, bench.IN_GRAPH).clear  # 15 ms apart: more than a quarter and the 12.5 ms spread
    assert bench.fusion_gap(rows, bench.GROUPED).on == 5
    with pytest.raises(ValueError, match="fusion off"):
        bench.fusion_gap([r for r in rows if r["setting"] == bench.FUSION_ON], bench.EAGER)


def test_a_busy_machine_gets_no_fusion_verdict():
    busy = steady.Contention(seconds=30, cores=2, others_cpu_seconds=24, steal_seconds=0)
    rows = _fusion({bench.EAGER: (186, 109), bench.IN_GRAPH: (5.9, 21.5), bench.GROUPED: (3.5, 16.1)})
    text = bench.fusion_reading(rows, busy)
    assert (
        text.startswith("Other programs took 40% of this machine's 2 cores") and "did not have the same machine" in text
    )
    assert "×" not in text and "Run the cell again when the machine is quieter" in text
    assert bench.fusion_saving(rows, busy) is None
