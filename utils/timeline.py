"""Read a Horovod timeline (HOROVOD_TIMELINE, Chrome trace format) and draw it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Span:
    """One activity of one tensor in the timeline: e.g. NEGOTIATE_ALLREDUCE from start to end (µs)."""

    tensor: str
    activity: str
    start_us: float
    end_us: float
    depth: int


def read_timeline(path: str | Path) -> list[Span]:
    """Parse a timeline file into spans (a file cut short by a killed run is read up to its last event)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no timeline at {path}: run Horovod with HOROVOD_TIMELINE={path}")
    text = path.read_text().strip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    events = json.loads(text)
    names: dict[int, str] = {}
    open_spans: dict[int, list[tuple[str, float]]] = {}
    spans: list[Span] = []
    for ev in events:
        pid, ph = ev.get("pid"), ev.get("ph")
        if ph == "M" and ev.get("name") == "process_name" and "name" in ev.get("args", {}):
            names[pid] = ev["args"]["name"]
        elif ph == "B":
            open_spans.setdefault(pid, []).append((ev["name"], float(ev["ts"])))
        elif ph == "E" and open_spans.get(pid):
            activity, start = open_spans[pid].pop()
            spans.append(Span(names.get(pid, str(pid)), activity, start, float(ev["ts"]), len(open_spans[pid])))
    return spans


def merge_intervals(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge overlapping (start, end) intervals: e.g. the spans of tensors reduced in one fused operation."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if b < a:
            raise ValueError(f"an interval ends before it starts: ({a}, {b})")
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def fused_window(
    spans: list[Span], marker: str = "Grouped", last_us: float = 30_000, lead_us: float = 2000, limit: int = 400
) -> list[Span]:
    """The spans of the last call of tensors named with `marker`: those in its final `last_us` µs, `lead_us` before."""
    named = [s for s in spans if marker in s.tensor]
    if not named:
        raise ValueError(f"no tensor named with {marker!r} in the timeline: was the run's grouped call recorded?")
    last = max(s.end_us for s in named)
    first = min(s.start_us for s in named if s.start_us > last - last_us)
    return [s for s in named if s.end_us >= first - lead_us][:limit]


@dataclass
class StepComm:
    """The allreduces of one training step, as a timeline shows them (times in µs)."""

    first_submit_us: float  # the first gradient handed to Horovod (start of its negotiation)
    last_submit_us: float  # the last gradient handed to Horovod: the backward pass is over by then
    end_us: float  # the last allreduce of the step finished
    reduced_early: list[str]  # gradients whose allreduce finished before the last gradient was handed over
    order: list[str]  # gradients in the order they were handed over
    fused: list[list[str]] = field(default_factory=list)  # gradients reduced together in one operation (2+)


def fused_groups(spans: list[Span], activity: str = "GLOO_ALLREDUCE") -> list[list[str]]:
    """Tensors whose `activity` spans overlap, i.e. that one fused operation reduced; groups of 2 or more."""
    groups: list[tuple[float, list[str]]] = []  # (end of the group, its tensors)
    for s in sorted((s for s in spans if s.activity == activity), key=lambda s: s.start_us):
        name = s.tensor.split("/")[-1]
        if groups and s.start_us <= groups[-1][0]:
            end, names = groups[-1]
            groups[-1] = (max(end, s.end_us), names + [name])
        else:
            groups.append((s.end_us, [name]))
    return [sorted(set(names)) for _, names in groups if len(set(names)) > 1]


def gradient_steps(spans: list[Span], prefix: str = "grad_") -> list[StepComm]:
    """Group the allreduces of tensors named `prefix...` into training steps (each tensor once per step)."""

    def short(s: Span) -> str:
        return s.tensor.split("/")[-1]

    negotiations = sorted(
        (s for s in spans if s.activity == "NEGOTIATE_ALLREDUCE" and short(s).startswith(prefix)),
        key=lambda s: s.start_us,
    )
    groups: list[list[Span]] = []
    for s in negotiations:
        if not groups or short(s) in {short(g) for g in groups[-1]}:
            groups.append([])
        groups[-1].append(s)
    reductions = [s for s in spans if s.activity == "ALLREDUCE" and short(s).startswith(prefix)]
    steps = []
    for i, group in enumerate(groups):
        start = group[0].start_us
        stop = groups[i + 1][0].start_us if i + 1 < len(groups) else float("inf")
        mine = [r for r in reductions if start <= r.start_us < stop]
        ops = [s for s in spans if short(s).startswith(prefix) and start <= s.start_us < stop]
        last_submit = max(g.start_us for g in group)
        steps.append(
            StepComm(
                first_submit_us=start,
                last_submit_us=last_submit,
                end_us=max((r.end_us for r in mine), default=last_submit),
                reduced_early=sorted({short(r) for r in mine if r.end_us <= last_submit}),
                order=[short(g) for g in group],
                fused=fused_groups(ops),
            )
        )
    return steps


def plot_timeline(spans: list[Span], ax=None, title: str = "Horovod timeline"):
    """Draw spans as bars: one row per tensor, nested activities thinner, colour per activity."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.5 + 0.45 * max(1, len({s.tensor for s in spans}))))
    tensors = sorted({s.tensor for s in spans})
    activities = sorted({s.activity for s in spans})
    colours = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(activities)}
    t0 = min((s.start_us for s in spans), default=0.0)
    for s in sorted(spans, key=lambda s: s.depth):  # nested activities drawn over their parents
        row = tensors.index(s.tensor)
        height = 0.8 / (1 + s.depth)
        ax.barh(
            row,
            (s.end_us - s.start_us) / 1e3,
            left=(s.start_us - t0) / 1e3,
            height=height,
            color=colours[s.activity],
            edgecolor="none",
        )
    ax.set_yticks(range(len(tensors)), tensors)
    ax.set_xlabel("time since the first event (ms)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[a]) for a in activities]
    ax.legend(handles, activities, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return ax
