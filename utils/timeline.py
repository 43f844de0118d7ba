"""Read a Horovod timeline (HOROVOD_TIMELINE, Chrome trace format) and draw it."""
from __future__ import annotations

import json
from dataclasses import dataclass
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


def plot_timeline(spans: list[Span], ax=None, title: str = "Horovod timeline"):
    """Draw spans as bars: one row per tensor, nested activities thinner, colour per activity."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.5 + 0.45 * max(1, len({s.tensor for s in spans}))))
    tensors = sorted({s.tensor for s in spans})
    activities = sorted({s.activity for s in spans})
    colours = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(activities)}
    t0 = min((s.start_us for s in spans), default=0.0)
    for s in spans:
        row = tensors.index(s.tensor)
        height = 0.8 / (1 + s.depth)
        ax.barh(row, (s.end_us - s.start_us) / 1e3, left=(s.start_us - t0) / 1e3, height=height,
                color=colours[s.activity], edgecolor="none")
    ax.set_yticks(range(len(tensors)), tensors)
    ax.set_xlabel("time since the first event (ms)")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[a]) for a in activities]
    ax.legend(handles, activities, loc="upper right", fontsize=8)
    return ax
