"""A plot whose title states a finding says what the plot itself draws, and the executed lesson shows it.

    title = figures.finding(ax, "2 ranks train {r:.2f}x faster than 1", r=("ratio", ("y_at", 2, "Horovod"),
                                                                              ("y_at", 1, "Horovod")))

`finding` computes each fact from the data drawn on the axes (its labelled lines and bars), never from the
variables the plot was made from, formats the title with them and sets it. In a notebook, every figure the kernel
shows carries, in its image's metadata (`course`, beside its text alternative), its titles, a summary of each
series each axes draws (first, last, smallest, largest, mean and median of x and y, and y at each x, finite values
only) and the findings with how each fact was derived. tools/check_lab.py reads them from the executed copy: a
finding whose facts the drawn data no longer give (a series drawn or changed after the title was set), a title
changed after it, and a title that states an outcome (faster, slower, better, worse) without a finding, each fail
the check.

A fact is a spec: (stat, axis, label) with stat one of STATS and axis "x" or "y"; ("y_at", x, label), the y of
the series at that x; ("ratio", a, b) or ("difference", a, b) of two specs; a label matches the one series whose
label starts with it (two series drawn with the same label are told apart as "label", "label (2)", and a label
that starts both is refused).
"""

from __future__ import annotations

import math
import statistics
import sys
from typing import Any

import numpy as np

STATS = ("first", "last", "min", "max", "mean", "median")
#: Words by which a title states an outcome: such a title is made with finding() (tools/check_lab.py).
OUTCOME_WORDS = ("faster", "slower", "better", "worse")
#: Where the facts go in a figure's image output (its metadata, under the image's MIME type).
KEY = "course"
#: How close a fact recomputed from the recorded summary must be to the one the title was made with.
TOLERANCE = 1e-6
#: Where an axes keeps the finding its title was made from.
_FINDING = "_course_finding"


def _numbers(values) -> list[float] | None:
    """The values as floats, masked and non-finite ones left out; None for values that are not numbers (dates,
    categories), which are not summarised."""
    try:
        array = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan).ravel()
    except (TypeError, ValueError):
        return None
    return [float(v) for v in array]


def _summary(xs: list[float] | None, ys: list[float] | None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for axis, values in (("x", xs), ("y", ys)):
        finite = [v for v in values or [] if math.isfinite(v)]
        if finite:
            found[axis] = {
                "first": finite[0],
                "last": finite[-1],
                "min": min(finite),
                "max": max(finite),
                "mean": statistics.fmean(finite),
                "median": statistics.median(finite),
            }
    if xs and ys and len(xs) == len(ys) and len(xs) <= 200:
        found["y_at"] = [[x, y] for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    return found


def drawn(ax) -> dict[str, dict[str, Any]]:
    """The summary of each labelled series the axes draw: lines (matplotlib's Line2D) and bar groups."""
    series: dict[str, dict[str, Any]] = {}

    def add(label: str, summary: dict[str, Any]) -> None:
        name, n = label, 1
        while name in series:
            n += 1
            name = f"{label} ({n})"
        series[name] = summary

    for line in ax.get_lines():
        label = str(line.get_label())
        if not label.startswith("_"):
            add(label, _summary(_numbers(line.get_xdata()), _numbers(line.get_ydata())))
    for group in ax.containers:
        label, patches = str(group.get_label()), getattr(group, "patches", None)
        if label.startswith("_") or not patches:
            continue
        flat = getattr(group, "orientation", "vertical") == "horizontal"
        at = [(p.get_y() + p.get_height() / 2) if flat else (p.get_x() + p.get_width() / 2) for p in patches]
        sizes = [p.get_width() if flat else p.get_height() for p in patches]
        add(label, _summary(_numbers(at), _numbers(sizes)))
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
        if kind == "difference":
            return a - b
        return a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a))
    if kind == "y_at":
        pairs = _series(series, spec[2]).get("y_at") or []
        ys = [y for x, y in pairs if abs(x - spec[1]) <= 1e-9 * max(1.0, abs(x))]
        if len(ys) != 1:
            raise ValueError(f"series {spec[2]!r} has {len(ys)} points at x = {spec[1]}, not one")
        return ys[0]
    if kind in STATS:
        axis, label = spec[1], spec[2]
        summary = _series(series, label).get(axis)
        if summary is None:
            raise ValueError(f"series {label!r} draws no finite {axis} values")
        return summary[kind]
    raise ValueError(f"unknown fact {spec!r}: a stat of {', '.join(STATS)}, y_at, ratio or difference")


def finding(ax, template: str, **facts) -> str:
    """Set the axes' title to `template` formatted with each fact computed from what the axes draw; return it. A
    fact that is not a finite number is refused: a title cannot state it."""
    values = {name: value(spec, drawn(ax)) for name, spec in facts.items()}
    bad = {name: v for name, v in values.items() if not math.isfinite(v)}
    if bad:
        raise ValueError(f"the plot gives no finite value for {', '.join(bad)} ({bad}): the title cannot state it")
    title = template.format(**values)
    ax.set_title(title)
    setattr(ax, _FINDING, {"title": title, "facts": facts, "values": values})  # a later finding replaces it
    return title


def _jsonable(spec):
    return [_jsonable(s) for s in spec] if isinstance(spec, (tuple, list)) else spec


def _axes_of(fig) -> list:
    """Every axes of a figure, its subfigures' included."""
    found = list(fig.axes)
    for sub in getattr(fig, "subfigs", []):
        found += [ax for ax in _axes_of(sub) if ax not in found]
    return found


def _suptitles(fig) -> list[str]:
    found = [fig.get_suptitle()] if hasattr(fig, "get_suptitle") else []
    for sub in getattr(fig, "subfigs", []):
        found += _suptitles(sub)
    return [t for t in found if t]


def facts(fig) -> dict[str, Any]:
    """What the figure's image carries: its suptitles, each axes' titles (centre, left, right), drawn series and the
    finding its title was made from."""
    axes = []
    for ax in _axes_of(fig):
        made = getattr(ax, _FINDING, None)
        axes.append(
            {
                "title": ax.get_title(),
                "side_titles": [t for t in (ax.get_title("left"), ax.get_title("right")) if t],
                "series": drawn(ax),
                "finding": None
                if made is None
                else {**made, "facts": {k: _jsonable(v) for k, v in made["facts"].items()}},
            }
        )
    return {"suptitles": _suptitles(fig), "axes": axes}


def _outcome(text: str) -> list[str]:
    return [w for w in OUTCOME_WORDS if w in text.lower()]


def problems(recorded: dict[str, Any]) -> list[str]:
    """What is wrong with one figure's recorded facts: a finding the drawn data no longer give, a title changed
    after a finding set it, a title stating an outcome without one."""
    if "error" in recorded:
        return [f"what the figure draws could not be recorded ({recorded['error']}): tools/check_lab.py cannot read it"]
    found = []
    advice = "make it with utils.figures.finding, or say it in a printed sentence"
    for text in recorded.get("suptitles", []):
        if _outcome(text):
            found.append(f"the figure's title {text!r} states an outcome ({', '.join(_outcome(text))}): {advice}")
    for ax in recorded.get("axes", []):
        made = ax.get("finding")
        for text in ax.get("side_titles", []) + ([] if made else [ax["title"]]):
            if _outcome(text):
                found.append(
                    f"the title {text!r} states an outcome ({', '.join(_outcome(text))}) that is not read from the "
                    f"plot's data: {advice}"
                )
        if not made:
            continue
        if ax["title"] != made["title"]:
            found.append(
                f"the title {made['title']!r} was changed after it was set from the plot's data: {ax['title']!r}"
            )
        for name, spec in made["facts"].items():
            then = made["values"].get(name)
            try:
                now = value(spec, ax["series"])
                differs = not (isinstance(then, (int, float)) and math.isclose(now, then, rel_tol=TOLERANCE))
            except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as err:
                found.append(f"the title {made['title']!r}: its {name} cannot be read from what the plot draws ({err})")
                continue
            if differs:
                said = f"{then:.4g}" if isinstance(then, (int, float)) else repr(then)
                found.append(
                    f"the title {made['title']!r} says {name} = {said}, but the plot as shown draws {now:.4g}: set "
                    "the title after the last series is drawn"
                )
    return found


def install() -> None:
    """In an IPython kernel, have every figure shown carry facts(fig) beside its text alternative (one metadata
    function for both: utils.site.record_figure_alts); called when utils is imported in a kernel."""
    ip = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if ip is not None:
        from utils import site

        site.record_figure_alts(ip)
