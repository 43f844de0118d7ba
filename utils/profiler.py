"""Where a training step's time goes: a few steps recorded with TensorFlow's profiler, and read back with code.

The training scripts record on request (`--profile-steps 4:7 --profile-dir DIR`): `ProfileSteps` starts
`tf.profiler.experimental` before the first of those batches of the last epoch and stops it after the last
(or when validation begins), which writes `DIR/plugins/profile/<time>/<host>.xplane.pb` (an XSpace protocol
buffer, TensorFlow's own trace format; TensorBoard's profile plugin shows the same file). `split` reads it
without TensorBoard. A step is one call of Keras's training function (`multi_step_on_iterator`: one batch);
Python between two calls (the callbacks) is in no step. Each instant of a step goes to the first of these
that holds at that instant:

- compute: a TensorFlow kernel runs on one of the executor's threads (`tf_Compute/...`);
- input: the step waits for its batch (the asynchronous `IteratorGetNext` kernel, from its start to the
  moment its result is handed back);
- allreduce: a gradient is out for averaging (a Horovod or collective kernel, from the moment the tensor is
  handed to Horovod to the moment its average is handed back). An asynchronous kernel leaves two short events
  in the trace, its start on an executor thread and its end on the thread that finished it (Horovod's
  background thread), linked by an id: TensorBoard's trace viewer shows no bar between them;
- idle: none of them, inside the call (launching the step's function, copies, scheduling).

So an allreduce that overlaps computation counts as compute. What is left of it is the wait the step could
not hide: the transfer, the wait for Horovod's next cycle and its negotiation, and the wait for the slowest
rank to hand over the same gradient. A faster link saves at most the transfer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PARTS = ("compute", "input", "allreduce", "idle")
#: The kernels that average gradients across workers: Horovod's, and tf.distribute's collectives.
ALLREDUCE_KERNELS = ("HorovodAllreduce", "HorovodGroupedAllreduce", "CollectiveReduceV2", "CollectiveReduce")
#: The Python thread's event for one training step of Keras 3's `fit` (one batch per call by default).
STEP_EVENTS = ("multi_step_on_iterator",)


def profile_callback(first: int, last: int, logdir, epochs: int):
    """A Keras callback that records batches `first`..`last` of the last of `epochs` epochs into `logdir`."""
    import keras
    import tensorflow as tf

    if not 0 <= first <= last:
        raise ValueError(f"--profile-steps wants FIRST:LAST with 0 <= FIRST <= LAST, got {first}:{last}")

    class ProfileSteps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epoch, self.on = -1, False

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if self.epoch == epochs - 1 and batch == first:
                tf.profiler.experimental.start(str(logdir))
                self.on = True

        def on_train_batch_end(self, batch, logs=None):
            if self.on and batch == last:
                tf.profiler.experimental.stop()
                self.on = False

        def on_test_begin(self, logs=None):  # validation runs the same function: its batches are no training steps
            if self.on:  # the epoch had fewer batches than asked for: keep what was recorded
                tf.profiler.experimental.stop()
                self.on = False

        on_train_end = on_test_begin

    return ProfileSteps()


def parse_steps(text: str) -> tuple[int, int]:
    """'4:7' -> (4, 7): the batches (counted from 0) of the last epoch to record."""
    try:
        first, last = (int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"--profile-steps wants FIRST:LAST, two batch numbers such as 4:7, got {text!r}") from None
    if not 0 <= first <= last:
        raise ValueError(f"--profile-steps wants FIRST:LAST with 0 <= FIRST <= LAST, got {text!r}")
    return first, last


def trace_file(logdir) -> Path:
    """The newest `.xplane.pb` that the profiler wrote under `logdir`."""
    found = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))
    if not found:
        raise FileNotFoundError(
            f"no profile under {logdir}: run the training script with --profile-steps FIRST:LAST --profile-dir "
            f"{logdir} (and at least FIRST + 1 batches in its last epoch)"
        )
    return found[-1]


@dataclass(frozen=True)
class Interval:
    start: float  # seconds, on the trace's clock
    end: float


def _union_length(intervals: list[Interval], lo: float, hi: float, minus: list[Interval]) -> tuple[float, list]:
    """Length of the union of `intervals` within [lo, hi] outside the union `minus`, and that part as intervals."""
    cut = sorted((max(i.start, lo), min(i.end, hi)) for i in intervals if i.end > lo and i.start < hi)
    merged: list[list[float]] = []
    for s, e in cut:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    blocked = sorted((i.start, i.end) for i in minus)
    left: list[Interval] = []
    for s, e in merged:
        pieces = [(s, e)]
        for bs, be in blocked:
            pieces = [p for ps, pe in pieces for p in ((ps, min(pe, bs)), (max(ps, be), pe)) if p[1] > p[0]]
        left += [Interval(a, b) for a, b in pieces]
    return sum(i.end - i.start for i in left), left


@dataclass(frozen=True)
class StepSplit:
    """Each recorded step's length and its parts (seconds): rows of `steps`, one per step."""

    steps: list[dict]
    path: Path

    def mean(self) -> dict[str, float]:
        """The parts' mean over the recorded steps, and the mean step, in seconds."""
        n = len(self.steps)
        return {k: sum(s[k] for s in self.steps) / n for k in ("step", *PARTS)}

    def shares(self) -> dict[str, float]:
        """Each part's share of the recorded steps' total time."""
        total = sum(s["step"] for s in self.steps)
        return {k: sum(s[k] for s in self.steps) / total for k in PARTS}

    def bound(self) -> str:
        """The part that takes most of the recorded steps' time (idle included: a step of mostly idle is no
        compute-bound step)."""
        shares = self.shares()
        return max(PARTS, key=shares.get)


def split_ranks(logdir) -> dict[int, StepSplit]:
    """Each rank's split, from the traces a Horovod run wrote under `logdir`/rank<r>."""
    found = {int(d.name[4:]): split(d) for d in sorted(Path(logdir).glob("rank*")) if d.name[4:].isdigit()}
    if not found:
        raise FileNotFoundError(f"no rank<r> folder under {logdir}: was it the --profile-dir of a Horovod run?")
    return found


def waited_for(splits: dict[int, StepSplit]) -> StepSplit:
    """Step by step, the split of the rank the others waited for: the one with the smaller allreduce part in that
    step. An allreduce ends only when every rank has handed its gradient over, so a rank slowed by its input or
    its computation shows that part, while the ranks waiting for it show the same time as allreduce; which rank
    is slower can change from one step to the next. (Where every rank waits on the link, every rank shows the
    allreduce part.) The ranks record the same batches, so their steps line up by position."""
    counts = {r: len(s.steps) for r, s in splits.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"the ranks recorded different numbers of steps ({counts}): record the same batches on each")
    ranks = sorted(splits)
    rows = [
        {**min((splits[r].steps[i] for r in ranks), key=lambda row: row["allreduce"])} for i in range(counts[ranks[0]])
    ]
    return StepSplit(rows, splits[ranks[0]].path)


def split(logdir) -> StepSplit:
    """Read the profile under `logdir` (or an .xplane.pb file) and split each recorded training step."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = Path(logdir)
    path = path if path.suffix == ".pb" else trace_file(path)
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    host = [p for p in space.planes if p.name == "/host:CPU"]
    if not host:
        raise ValueError(f"{path} holds no /host:CPU plane: not a TensorFlow profile of a CPU run")
    plane = host[0]
    meta, stat_names = plane.event_metadata, {k: v.name for k, v in plane.stat_metadata.items()}

    def stats(event) -> dict:
        out = {}
        for s in [*meta[event.metadata_id].stats, *event.stats]:
            value = s.WhichOneof("value")
            out[stat_names.get(s.metadata_id, "")] = (
                stat_names.get(s.ref_value) if value == "ref_value" else getattr(s, value)
            )
        return out

    steps, compute, begun, waits = [], [], {}, {"input": [], "allreduce": []}
    for line in plane.lines:
        base = line.timestamp_ns * 1e-9
        for ev in line.events:
            name = meta[ev.metadata_id].name
            t0 = base + ev.offset_ps * 1e-12
            span = Interval(t0, t0 + ev.duration_ps * 1e-12)
            if name in STEP_EVENTS:
                steps.append(span)
            elif line.name.startswith("tf_Compute") and ":" in name and "::" not in name:
                compute.append(span)  # a kernel: "scope/op:Type"
            elif name.startswith("ExecutorState::ProcessAsync::"):  # an asynchronous kernel's start or end
                s = stats(ev)
                kind = "input" if s.get("kernel_type") == "IteratorGetNext" else None
                kind = "allreduce" if s.get("kernel_type") in ALLREDUCE_KERNELS else kind
                if kind is None:
                    continue
                # The start carries a producer id (_p), its end the same id as consumer (_c); the result is
                # handed back when the end event begins (the rest of it passes the outputs on).
                if name.endswith("Start") and "_p" in s:
                    begun.setdefault(s["_p"], [kind, None, None])[1] = t0
                elif name.endswith("Done") and "_c" in s:
                    begun.setdefault(s["_c"], [kind, None, None])[2] = t0
    for kind, start, end in begun.values():  # the threads' lines come in no set order: paired by id, then
        if start is not None and end is not None and end >= start:
            waits[kind].append(Interval(start, end))
    if not steps:
        raise ValueError(f"{path} holds no training step ({' or '.join(STEP_EVENTS)}): was it recorded during fit?")
    rows = []
    for st in sorted(steps, key=lambda i: i.start):
        row = {"step": st.end - st.start}
        taken: list[Interval] = []
        for part, spans in (("compute", compute), ("input", waits["input"]), ("allreduce", waits["allreduce"])):
            row[part], got = _union_length(spans, st.start, st.end, taken)
            taken += got
        row["idle"] = max(row["step"] - row["compute"] - row["input"] - row["allreduce"], 0.0)
        rows.append(row)
    return StepSplit(rows, path)
