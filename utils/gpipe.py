"""GPipe pipelines: the schedule, its simulated timeline and bubble, and a real step on a split model."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from utils.model import mse_per_example
from utils.model_parallel import Stage


@dataclass(frozen=True)
class Slot:
    """One task of a pipeline timeline: a forward (F) or backward (B) pass of one micro-batch on one stage."""

    stage: int
    micro: int
    kind: str
    start: float
    end: float


def gpipe_order(stages: int, micro_batches: int) -> list[list[tuple[str, int]]]:
    """Each stage's task order in GPipe: every forward in micro-batch order, then every backward in reverse."""
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"need at least 1 stage and 1 micro-batch, got {stages} and {micro_batches}")
    order = [("F", j) for j in range(micro_batches)] + [("B", j) for j in reversed(range(micro_batches))]
    return [list(order) for _ in range(stages)]


def simulate_pipeline(
    stages: int, micro_batches: int, forward: float | Sequence[float] = 1.0, backward: float | Sequence[float] = 2.0
) -> list[Slot]:
    """The earliest-start timeline of GPipe's schedule, given each stage's forward and backward duration.

    F(s, j) waits for F(s−1, j); B(s, j) waits for B(s+1, j) (the last stage for its own F); a stage runs
    one task at a time, in `gpipe_order`. Durations are per micro-batch (one number, or one per stage).
    """
    for name, value in (("forward", forward), ("backward", backward)):
        if np.ndim(value) not in (0, 1) or (np.ndim(value) == 1 and len(value) != stages):
            raise ValueError(f"{name} must be one duration or one per stage ({stages}), got {value!r}")
    fwd = np.broadcast_to(np.asarray(forward, dtype=float), (stages,))
    bwd = np.broadcast_to(np.asarray(backward, dtype=float), (stages,))
    if (fwd < 0).any() or (bwd < 0).any():
        raise ValueError("durations must be zero or positive")
    order = gpipe_order(stages, micro_batches)
    end: dict[tuple[str, int, int], float] = {}
    free = [0.0] * stages
    nxt = [0] * stages
    slots: list[Slot] = []
    remaining = stages * 2 * micro_batches
    while remaining:
        progressed = False
        for s in range(stages):
            while nxt[s] < len(order[s]):
                kind, j = order[s][nxt[s]]
                if kind == "F":
                    dep = ("F", s - 1, j) if s > 0 else None
                else:
                    dep = ("B", s + 1, j) if s < stages - 1 else ("F", s, j)
                if dep is not None and dep not in end:
                    break
                start = max(free[s], end[dep] if dep else 0.0)
                stop = start + (fwd[s] if kind == "F" else bwd[s])
                end[(kind, s, j)] = stop
                free[s] = stop
                slots.append(Slot(s, j, kind, start, stop))
                nxt[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # pragma: no cover (the GPipe order never deadlocks)
            raise RuntimeError("the schedule deadlocked")
    return sorted(slots, key=lambda t: (t.start, t.stage))


def makespan(slots: Sequence[Slot]) -> float:
    """Time from the first task's start to the last task's end."""
    return max(t.end for t in slots) - min(t.start for t in slots)


def bubble_fraction(slots: Sequence[Slot]) -> float:
    """Share of stage-time spent idle: 1 − busy / (stages × makespan)."""
    if not slots:
        raise ValueError("no tasks in the timeline: build one with simulate_pipeline(stages, micro_batches)")
    stages = len({t.stage for t in slots})
    busy = sum(t.end - t.start for t in slots)
    return 1.0 - busy / (stages * makespan(slots))


def gpipe_bubble(stages: int, micro_batches: int) -> float:
    """GPipe's bubble fraction (p − 1) / (m + p − 1) for p stages and m micro-batches."""
    if stages < 1 or micro_batches < 1:
        raise ValueError(f"need at least 1 stage and 1 micro-batch, got {stages} and {micro_batches}")
    return (stages - 1) / (micro_batches + stages - 1)


def mean_durations(slots: Sequence[Slot], stages: int) -> tuple[list[float], list[float]]:
    """Mean measured forward and backward duration of each stage (seconds per micro-batch)."""
    fwd = [float(np.mean([t.end - t.start for t in slots if t.stage == s and t.kind == "F"])) for s in range(stages)]
    bwd = [float(np.mean([t.end - t.start for t in slots if t.stage == s and t.kind == "B"])) for s in range(stages)]
    return fwd, bwd


def plot_timeline(slots: Sequence[Slot], ax, title: str, unit: str = "time steps") -> None:
    """Draw a pipeline timeline: one row per stage, forward tasks light, backward tasks dark, labelled by micro-batch
    where the bar is wide enough for its label (too short a task keeps its colour only)."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    stages = sorted({t.stage for t in slots})
    span = max(t.end for t in slots) - min(t.start for t in slots)
    for t in slots:
        color = cmap(t.micro % 10)
        ax.barh(
            t.stage,
            t.end - t.start,
            left=t.start,
            color=color,
            alpha=0.45 if t.kind == "F" else 0.95,
            edgecolor="black",
            linewidth=0.5,
        )
        if len(slots) <= 64 and t.end - t.start >= span / 30:  # a label only where it fits inside its bar
            ax.text((t.start + t.end) / 2, t.stage, f"{t.kind}{t.micro}", ha="center", va="center", fontsize=7)
    ax.set_yticks(stages, [f"stage {s}" for s in stages])
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)


@dataclass
class PipelineStep:
    """One GPipe training step run for real: loss, accumulated gradients per stage, measured tasks."""

    loss: float
    gradients: list[list[np.ndarray]]  # [stage][variable]
    measured: list[Slot]  # wall-clock seconds since the step started, tasks run one after another
    order: list[Slot]  # the simulated schedule that fixed the order


def pipeline_step(stages: Sequence[Stage], x: np.ndarray, y: np.ndarray, micro_batches: int) -> PipelineStep:
    """Run forward and backward of one batch as GPipe does, task by task in the schedule's order, on each stage's device.

    Gradients of the micro-batches are accumulated, so they equal the gradient of the whole batch's mean loss.
    """
    import tensorflow as tf

    if micro_batches < 1 or len(x) % micro_batches:
        raise ValueError(f"the batch ({len(x)} examples) must split evenly into {micro_batches} micro-batches")
    p, size = len(stages), len(x) // micro_batches
    xs = [tf.constant(x[j * size : (j + 1) * size]) for j in range(micro_batches)]
    ys = [tf.constant(y[j * size : (j + 1) * size]) for j in range(micro_batches)]
    order = simulate_pipeline(p, micro_batches, 1.0, 2.0)
    tapes, inputs, outputs, out_grads = {}, {}, {}, {}
    grads = [[tf.zeros_like(v) for v in st.variables] for st in stages]
    loss_total = 0.0
    measured = []
    t0 = time.perf_counter()
    for task in order:
        s, j = task.stage, task.micro
        stage = stages[s]
        start = time.perf_counter() - t0
        with tf.device(stage.device):
            if task.kind == "F":
                h = xs[j] if s == 0 else outputs[(s - 1, j)]
                with tf.GradientTape() as tape:
                    tape.watch(h)
                    out = stage(h)
                    if s == p - 1:  # the last stage also computes this micro-batch's share of the mean loss
                        out = tf.reduce_sum(mse_per_example(ys[j], out)) / len(x)
                tapes[(s, j)], inputs[(s, j)], outputs[(s, j)] = tape, h, out
            else:
                upstream = None if s == p - 1 else out_grads[(s + 1, j)]
                g = tapes.pop((s, j)).gradient(
                    outputs[(s, j)], [inputs[(s, j)]] + stage.variables, output_gradients=upstream
                )
                out_grads[(s, j)] = g[0]
                grads[s] = [a + b for a, b in zip(grads[s], g[1:])]
                if s == p - 1:
                    loss_total += float(outputs[(s, j)])
        measured.append(Slot(s, j, task.kind, start, time.perf_counter() - t0))
    return PipelineStep(loss_total, [[g.numpy() for g in gs] for gs in grads], measured, order)
