"""utils.figures: a title set from what the axes draw (lines, bars either way), the facts recorded for the JupyterLab
check, and what that check finds wrong in them. (The check itself, in a real notebook: tests/test_check_lab.py.)"""

from __future__ import annotations

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
    assert recorded["findings"][0]["facts"]["speed"] == ["ratio", ["y_at", 2, "Horovod"], ["y_at", 1, "Horovod"]]
    assert figures.problems(recorded) == []


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
    bare = {"axes": [{"title": "Mixed precision is Faster", "series": {}}], "findings": []}
    assert "states an outcome (faster)" in figures.problems(bare)[0]
    assert figures.problems({"axes": [{"title": "Throughput against ranks", "series": {}}]}) == []
