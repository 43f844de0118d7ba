"""A plot whose title states a finding says what the plot itself draws, and the executed lesson shows it.

    title = figures.finding(ax, "2 ranks train {r:.2f}x faster than 1", r=("ratio", ("y_at", 2, "Horovod"),
                                                                              ("y_at", 1, "Horovod")))

`finding` computes each fact from the data drawn on the axes (its labelled lines and bars), never from the
variables the plot was made from, formats the title with them and sets it. In a notebook, every figure the kernel
shows carries, in its image's metadata (`course`, beside its text alternative), each axes' title, a summary of each series it draws (first,
last, smallest, largest, mean and median of x and y, and y at each x) and the findings with how each fact was
derived. tools/check_lab.py reads them from the executed copy: a finding whose facts the drawn data no longer give
(a series drawn or changed after the title was set), a title changed after it, and a title that states an outcome
(faster, slower, better, worse) without a finding, each fail the check.

A fact is a spec: (stat, axis, label) with stat one of STATS and axis "x" or "y"; ("y_at", x, label), the y of
the series at that x; ("ratio", a, b) or ("difference", a, b) of two specs; a label matches the series whose
label starts with it (one series only).
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

STATS = ("first", "last", "min", "max", "mean", "median")
#: Words by which a title states an outcome: such a title is made with finding() (tools/check_lab.py).
OUTCOME_WORDS = ("faster", "slower", "better", "worse")
#: Where the facts go in a figure's image output (its metadata, under the image's MIME type).
KEY = "course"
#: How close a fact recomputed from the recorded summary must be to the one the title was made with.
TOLERANCE = 1e-6


def _numbers(values) -> list[float]:
    out = []
    for v in values:
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            return []  # dates, categories: not summarised
    return out


def _summary(xs: list[float], ys: list[float]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for axis, values in (("x", xs), ("y", ys)):
        if values:
            found[axis] = {
                "first": values[0],
                "last": values[-1],
                "min": min(values),
                "max": max(values),
                "mean": statistics.fmean(values),
                "median": statistics.median(values),
            }
    if xs and len(xs) == len(ys) and len(xs) <= 200:
        found["y_at"] = [[x, y] for x, y in zip(xs, ys)]
    return found


def drawn(ax) -> dict[str, dict[str, Any]]:
    """The summary of each labelled series the axes draw: lines (matplotlib's Line2D) and bar groups."""
    series = {}
    for line in ax.get_lines():
        label = str(line.get_label())
        if not label.startswith("_"):
            series[label] = _summary(_numbers(line.get_xdata()), _numbers(line.get_ydata()))
    for group in ax.containers:
        label, patches = str(group.get_label()), getattr(group, "patches", [])
        if label.startswith("_") or not patches:
            continue
        flat = getattr(group, "orientation", "vertical") == "horizontal"
        at = [(p.get_y() + p.get_height() / 2) if flat else (p.get_x() + p.get_width() / 2) for p in patches]
        sizes = [p.get_width() if flat else p.get_height() for p in patches]
        series[label] = _summary(at, sizes)
    return series


def _series(series: dict, label: str) -> dict:
    matches = [name for name in series if name.startswith(label)]
    if len(matches) != 1:
        raise ValueError(
            f"a finding's label {label!r} matches {len(matches)} drawn series ({', '.join(series) or 'none'}): "
            "give one that starts exactly one series' label"
        )
    return series[matches[0]]


def value(spec, series: dict[str, dict]) -> float:
    """A fact from the drawn series' summaries (see the module's docstring for specs)."""
    kind = spec[0]
    if kind in ("ratio", "difference"):
        a, b = value(spec[1], series), value(spec[2], series)
        return a / b if kind == "ratio" else a - b
    if kind == "y_at":
        pairs = _series(series, spec[2]).get("y_at") or []
        ys = [y for x, y in pairs if abs(x - spec[1]) <= 1e-9 * max(1.0, abs(x))]
        if len(ys) != 1:
            raise ValueError(f"series {spec[2]!r} has {len(ys)} points at x = {spec[1]}, not one")
        return ys[0]
    if kind in STATS:
        axis = spec[1]
        return _series(series, spec[2])[axis][kind]
    raise ValueError(f"unknown fact {spec!r}: a stat of {', '.join(STATS)}, y_at, ratio or difference")


def finding(ax, template: str, **facts) -> str:
    """Set the axes' title to `template` formatted with each fact computed from what the axes draw; return it."""
    series = drawn(ax)
    values = {name: value(spec, series) for name, spec in facts.items()}
    title = template.format(**values)
    ax.set_title(title)
    noted = ax.figure.__dict__.setdefault("_course_findings", [])
    noted.append({"axes": ax.figure.axes.index(ax), "title": title, "facts": facts, "values": values})
    return title


def facts(fig) -> dict[str, Any]:
    """What the figure's image carries: each axes' title and drawn series, and the findings set on it."""
    return {
        "axes": [{"title": ax.get_title(), "series": drawn(ax)} for ax in fig.axes],
        "findings": [
            {**f, "facts": {k: _jsonable(v) for k, v in f["facts"].items()}}
            for f in fig.__dict__.get("_course_findings", [])
        ],
    }


def _jsonable(spec):
    return [_jsonable(s) for s in spec] if isinstance(spec, (tuple, list)) else spec


def problems(recorded: dict[str, Any]) -> list[str]:
    """What is wrong with one figure's recorded facts: a finding the drawn data no longer give, a title changed
    after a finding set it, a title stating an outcome without one."""
    if "error" in recorded:
        return [f"what the figure draws could not be recorded ({recorded['error']}): tools/check_lab.py cannot read it"]
    found, axes = [], recorded.get("axes", [])
    made = set()
    for f in recorded.get("findings", []):
        made.add(f["axes"])
        shown = axes[f["axes"]] if f["axes"] < len(axes) else {"title": "", "series": {}}
        if shown["title"] != f["title"]:
            found.append(
                f"the title {f['title']!r} was changed after it was set from the plot's data: {shown['title']!r}"
            )
        for name, spec in f["facts"].items():
            try:
                now = value(spec, shown["series"])
            except (ValueError, KeyError, ZeroDivisionError) as err:
                found.append(f"the title {f['title']!r}: its {name} cannot be read from what the plot draws ({err})")
                continue
            then = f["values"][name]
            if abs(now - then) > TOLERANCE * max(1.0, abs(then)):
                found.append(
                    f"the title {f['title']!r} says {name} = {then:.4g}, but the plot as shown draws {now:.4g}: set "
                    "the title after the last series is drawn"
                )
    for index, ax in enumerate(axes):
        words = [w for w in OUTCOME_WORDS if w in ax["title"].lower()]
        if words and index not in made:
            found.append(
                f"the title {ax['title']!r} states an outcome ({', '.join(words)}) that is not read from the plot's "
                "data: make it with utils.figures.finding, or say it in a printed sentence"
            )
    return found


def install() -> None:
    """In an IPython kernel, have every figure shown carry facts(fig) beside its text alternative (one metadata
    function for both: utils.site.record_figure_alts); called when utils is imported in a kernel."""
    ip = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if ip is not None:
        from utils import site

        site.record_figure_alts(ip)
