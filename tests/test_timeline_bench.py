"""Horovod timelines parse (even when cut short), and the allreduce benchmark writes its table."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
from conftest import needs_horovod

from utils import paths, timeline

EVENTS = [
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_0"}},
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 100, "pid": 1},
    {"ph": "E", "ts": 150, "pid": 1},
    {"ph": "B", "name": "ALLREDUCE", "ts": 160, "pid": 1},
    {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 165, "pid": 1},
    {"ph": "E", "ts": 190, "pid": 1},
    {"ph": "E", "ts": 200, "pid": 1},
]


def test_timeline_spans_nest_and_name_tensors(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(EVENTS))
    spans = timeline.read_timeline(path)
    assert [(s.tensor, s.activity, s.start_us, s.end_us, s.depth) for s in spans] == [
        ("grad_0", "NEGOTIATE_ALLREDUCE", 100, 150, 0),
        ("grad_0", "GLOO_ALLREDUCE", 165, 190, 1),
        ("grad_0", "ALLREDUCE", 160, 200, 0),
    ]


def test_gradient_steps_split_by_repeated_tensors_and_find_early_reductions():
    S = timeline.Span
    spans = [  # step 1: grad_1 handed over at 0 and reduced by 20, grad_0 handed over at 30
        S("grad_1", "NEGOTIATE_ALLREDUCE", 0, 10, 0),
        S("grad_1", "ALLREDUCE", 10, 20, 0),
        S("grad_0", "NEGOTIATE_ALLREDUCE", 30, 40, 0),
        S("grad_0", "ALLREDUCE", 40, 50, 0),
        # step 2: both handed over together; nothing reduced before the last one was handed over
        S("grad_1", "NEGOTIATE_ALLREDUCE", 100, 110, 0),
        S("grad_0", "NEGOTIATE_ALLREDUCE", 100, 110, 0),
        S("x/grad_0", "ALLREDUCE", 110, 130, 0),
        S("grad_1", "ALLREDUCE", 110, 130, 0),
        S("metric_loss", "NEGOTIATE_ALLREDUCE", 5, 6, 0),  # not a gradient: ignored
    ]
    steps = timeline.gradient_steps(spans)
    assert [(s.first_submit_us, s.last_submit_us, s.end_us) for s in steps] == [(0, 30, 50), (100, 100, 130)]
    assert steps[0].reduced_early == ["grad_1"] and steps[1].reduced_early == []
    assert steps[0].order == ["grad_1", "grad_0"]


def test_fused_groups_are_the_tensors_reduced_in_one_overlapping_operation():
    S = timeline.Span
    spans = [
        S("grad_3", "GLOO_ALLREDUCE", 0, 10, 1),  # alone
        S("grad_0", "GLOO_ALLREDUCE", 20, 30, 1),  # grad_0, grad_1 and grad_2 overlap: one operation
        S("grad_1", "GLOO_ALLREDUCE", 21, 29, 1),
        S("x/grad_2", "GLOO_ALLREDUCE", 29, 35, 1),
        S("grad_4", "GLOO_ALLREDUCE", 40, 50, 1),  # alone again
        S("grad_5", "NEGOTIATE_ALLREDUCE", 40, 50, 0),  # another activity: ignored
    ]
    assert timeline.fused_groups(spans) == [["grad_0", "grad_1", "grad_2"]]
    steps = timeline.gradient_steps(
        [S("grad_0", "NEGOTIATE_ALLREDUCE", 0, 5, 0), S("grad_1", "NEGOTIATE_ALLREDUCE", 1, 5, 0)]
        + [S("grad_0", "GLOO_ALLREDUCE", 6, 9, 1), S("grad_1", "GLOO_ALLREDUCE", 6, 9, 1)]
    )
    assert steps[0].fused == [["grad_0", "grad_1"]]


def test_timeline_cut_short_is_read_up_to_its_last_event(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("[\n" + ",".join(json.dumps(e) for e in EVENTS[:3]) + ",")
    assert len(timeline.read_timeline(path)) == 1
    with pytest.raises(FileNotFoundError, match="HOROVOD_TIMELINE"):
        timeline.read_timeline(tmp_path / "none.json")


@needs_horovod
def test_benchmark_script_in_smoke_mode_writes_its_table(tmp_path):
    out = tmp_path / "bench.csv"
    env = dict(os.environ, COURSE_SMOKE="1")
    subprocess.run(
        [
            sys.executable,
            str(paths.REPO_ROOT / "tools/bench_allreduce.py"),
            "--out",
            str(out),
            "--ranks",
            "3",
            "--repeats",
            "2",
        ],
        env=env,
        check=True,
        timeout=180,
        capture_output=True,
    )
    rows = list(csv.DictReader(out.open()))
    assert [int(r["bytes"]) for r in rows] == [4 << 10, 256 << 10, 4 << 20]
    for r in rows:
        assert int(r["np"]) == 3 and 0 < float(r["best_seconds"]) <= float(r["seconds"])
        assert float(r["algbw_GBps"]) == pytest.approx(int(r["bytes"]) / float(r["best_seconds"]) / 1e9)
        assert float(r["busbw_GBps"]) == pytest.approx(float(r["algbw_GBps"]) * 4 / 3)  # 2(N-1)/N at N = 3


def test_overlapping_intervals_merge_into_one_operation():
    assert timeline.merge_intervals([(5, 7), (0, 2), (1, 3), (3, 4), (8, 9)]) == [(0, 4), (5, 7), (8, 9)]
    assert timeline.merge_intervals([]) == []
    with pytest.raises(ValueError, match="ends before it starts"):
        timeline.merge_intervals([(3, 1)])


def test_fused_window_keeps_the_last_grouped_call():
    spans = [
        timeline.Span("Grouped.a", "ALLREDUCE", 0, 10, 0),
        timeline.Span("other", "ALLREDUCE", 100_000, 100_050, 0),
        timeline.Span("Grouped.a", "ALLREDUCE", 100_000, 100_100, 0),
        timeline.Span("Grouped.b", "NEGOTIATE", 99_000, 100_010, 0),
    ]
    window = timeline.fused_window(spans)
    assert {(s.tensor, s.start_us) for s in window} == {("Grouped.a", 100_000), ("Grouped.b", 99_000)}
    with pytest.raises(ValueError, match="no tensor named"):
        timeline.fused_window(spans, marker="Nope")
