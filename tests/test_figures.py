"""utils.figures: a title set from what the axes draw (lines, bars either way), the facts recorded for the JupyterLab
check, and what that check finds wrong in them. (The check itself, in a real notebook: tests/test_check_lab.py.)"""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

from utils import figures


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


def test_a_finding_is_read_from_the_drawn_lines_and_bars(ax):
    ax.plot([1, 2, 4], [100, 180, 300], label="Horovod, 10 ms cycle")
    ax.bar([0, 1], [40, 120], label="mixed")
    ax.barh([5], [7.5], label="sideways")
    title = figures.finding(
        ax,
        "{speed:.1f}x, last {last:.0f}, bars {bars:.0f}, side {side:.1f}",
        speed=("ratio", ("y_at", 2, "Horovod"), ("y_at", 1, "Horovod")),
        last=("last", "y", "Horovod"),
        bars=("ratio", ("max", "y", "mixed"), ("min", "y", "mixed")),
        side=("first", "y", "sideways"),
    )
    assert title == "1.8x, last 300, bars 3, side 7.5" == ax.get_title()
    recorded = figures.facts(ax.figure)
    assert recorded["axes"][0]["finding"]["facts"]["speed"] == ["ratio", ["y_at", 2, "Horovod"], ["y_at", 1, "Horovod"]]
    assert figures.problems(recorded) == []
    json.dumps(recorded, allow_nan=False)  # what the notebook stores: plain JSON


def test_a_label_that_names_no_single_series_is_refused(ax):
    ax.plot([1], [1], label="sync a")
    ax.plot([1], [2], label="sync b")
    with pytest.raises(ValueError, match="'sync' matches 2 drawn series"):
        figures.finding(ax, "{v}", v=("last", "y", "sync"))
    with pytest.raises(ValueError, match="has 0 points at x = 3"):
        figures.finding(ax, "{v}", v=("y_at", 3, "sync a"))


def test_what_the_check_finds_in_recorded_facts(ax):
    ax.plot([1, 2], [2, 6], label="worse")
    figures.finding(ax, "{r:.0f}x", r=("ratio", ("last", "y", "worse"), ("first", "y", "worse")))
    ax.lines[0].set_ydata([2, 4])  # drawn after the title was set
    assert "says r = 3, but the plot as shown draws 2" in figures.problems(figures.facts(ax.figure))[0]
    ax.set_title("typed over")
    assert any("was changed after" in p for p in figures.problems(figures.facts(ax.figure)))
    bare = {"axes": [{"title": "Mixed precision is Faster", "series": {}}]}
    assert "states an outcome (faster)" in figures.problems(bare)[0]
    assert figures.problems({"axes": [{"title": "Throughput against ranks", "series": {}}]}) == []
    assert "figure's title 'bfloat16 is slower'" in figures.problems({"suptitles": ["bfloat16 is slower"]})[0]
    side = {"axes": [{"title": "", "side_titles": ["a worse run"], "series": {}}]}
    assert "'a worse run' states an outcome (worse)" in figures.problems(side)[0]
    damaged = {
        "axes": [
            {
                "title": "t",
                "series": {"a": {"y": {"last": 1.0}}},
                "finding": {"title": "t", "facts": {"v": ["last", "y", "a"]}, "values": {"v": "nan"}},
            }
        ]
    }
    assert "says v = 'nan', but the plot as shown draws 1" in figures.problems(damaged)[0]


def test_gaps_masks_and_dates_are_summarised_without_breaking_the_figure(ax):
    import datetime as dt

    import numpy as np

    ax.plot([1, 2, 3], [1.0, np.nan, 3.0], label="gap")
    ax.plot([1, 2], np.ma.masked_array([5.0, 7.0], mask=[True, False]), label="masked")
    ax.plot([dt.date(2026, 1, 1), dt.date(2026, 1, 2)], [1, 2], label="dated")
    ax.hist([1, 2, 2, 3], label="histogram")
    series = figures.drawn(ax)
    assert series["gap"]["y"]["mean"] == 2.0 and series["masked"]["y"]["first"] == 7.0
    json.dumps(figures.facts(ax.figure), allow_nan=False)
    with pytest.raises(ValueError, match="no finite value"):
        figures.finding(
            ax, "{r}", r=("ratio", ("first", "y", "gap"), ("difference", ("first", "y", "gap"), ("first", "y", "gap")))
        )


def test_a_finding_stays_with_its_axes_in_subfigures_and_after_another_is_removed():
    fig = plt.figure()
    left, right = fig.subfigures(1, 2)
    a, b = left.subplots(), right.subplots()
    for ax in (a, b):
        ax.plot([1, 2], [1, 3], label="s")
        ax.plot([1, 2], [1, 3], label="s")  # the same label twice: told apart, and a bare "s" is refused
    figures.finding(b, "{v:.0f}x faster", v=("ratio", ("last", "y", "s (2)"), ("first", "y", "s (2)")))
    with pytest.raises(ValueError, match="matches 2 drawn series"):
        figures.finding(a, "{v}", v=("last", "y", "s"))
    assert figures.problems(figures.facts(fig)) == []
    a.remove()
    assert figures.problems(figures.facts(fig)) == []
    plt.close(fig)
