"""Data and model parallelism, run for real: logical CPU devices, data-parallel gradient checks and
training, a model split across devices, a GPipe-style pipeline (schedule, simulated timeline, real
execution) and training on stale weights (asynchronous updates)."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

# ---------------------------------------------------------------------------------------------
# Logical devices


def use_logical_cpus(n: int) -> list[str]:
    """Split the CPU into `n` logical TensorFlow devices (call before TensorFlow starts); return their names."""
    import tensorflow as tf  # noqa: PLC0415

    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a whole number of devices, at least 1; got {n!r}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as exc:
        have = tf.config.list_logical_devices("CPU")
        if len(have) < n:
            raise RuntimeError(
                f"TensorFlow has already started with {len(have)} CPU device(s), and devices cannot be added "
                f"afterwards. Restart the kernel and call use_logical_cpus({n}) before any other TensorFlow "
                "call (building a model or a tensor starts TensorFlow)."
            ) from exc
    return [d.name for d in tf.config.list_logical_devices("CPU")][:n]


# ---------------------------------------------------------------------------------------------
# Data parallelism with tf.distribute.MirroredStrategy


def _mse_per_example(y, pred):
    import tensorflow as tf  # noqa: PLC0415

    return tf.reduce_mean(tf.square(y - pred), axis=-1)


@dataclass
class GradientCheck:
    """Per-replica gradients of one global batch, compared with the gradient of the whole batch."""

    replicas: int
    per_replica_batch: int
    replica_gradients: list[list[np.ndarray]]   # [replica][variable], each of its own local mean loss
    global_gradient: list[np.ndarray]           # [variable], of the mean loss over the global batch

    @property
    def mean_of_replicas(self) -> list[np.ndarray]:
        """The element-wise mean over replicas of their gradients, per variable."""
        return [np.mean([g[i] for g in self.replica_gradients], axis=0) for i in range(len(self.global_gradient))]

    @property
    def max_abs_difference(self) -> float:
        """Largest |mean of replica gradients − global-batch gradient| over every weight."""
        return float(max(np.max(np.abs(a - b)) for a, b in zip(self.mean_of_replicas, self.global_gradient)))

    @property
    def max_abs_gradient(self) -> float:
        """Largest |global-batch gradient| (the scale the difference is compared with)."""
        return float(max(np.max(np.abs(g)) for g in self.global_gradient))


def check_replica_gradients(strategy, build_model: Callable[[], object], x: np.ndarray, y: np.ndarray) -> GradientCheck:
    """Gradients of one global batch (x, y) on every replica of `strategy`, and on one device for the whole batch."""
    import tensorflow as tf  # noqa: PLC0415

    n = strategy.num_replicas_in_sync
    if len(x) % n:
        raise ValueError(f"the global batch ({len(x)} examples) must divide evenly over {n} replicas")
    with strategy.scope():
        model = build_model()
    reference = build_model()  # the same weights (same seed), outside the strategy, on one device
    reference.set_weights(model.get_weights())
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(len(x))
    batch = next(iter(strategy.experimental_distribute_dataset(ds)))

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(_mse_per_example(yb, model(xb, training=True)))  # this replica's mean
        return tape.gradient(loss, model.trainable_variables)

    per_replica = strategy.run(replica_step, args=batch)
    replica_grads = [[g.numpy() for g in grads] for grads in
                     zip(*[strategy.experimental_local_results(g) for g in per_replica])]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(_mse_per_example(tf.constant(y), reference(tf.constant(x), training=True)))
    global_grads = [g.numpy() for g in tape.gradient(loss, reference.trainable_variables)]
    return GradientCheck(n, len(x) // n, replica_grads, global_grads)


def warmup_scaled_lr(step: int, base_lr: float, replicas: int, warmup_steps: int) -> float:
    """Linear scaling rule with warm-up: base_lr × replicas, reached linearly over `warmup_steps` steps."""
    if base_lr <= 0 or replicas < 1 or warmup_steps < 0 or step < 0:
        raise ValueError("need base_lr > 0, replicas >= 1, warmup_steps >= 0 and step >= 0")
    target = base_lr * replicas
    if warmup_steps == 0 or step >= warmup_steps:
        return target
    return base_lr + (target - base_lr) * step / warmup_steps


@dataclass
class DataParallelRun:
    """What `train_data_parallel` returns: losses per epoch, wall time, and whether replicas agree."""

    train_loss: list[float]
    val_loss: list[float]
    seconds: float
    steps: int
    max_replica_weight_difference: float
    lr_trace: list[float] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)


def train_data_parallel(strategy, build_model: Callable[[], object], x: np.ndarray, y: np.ndarray,
                        x_val: np.ndarray, y_val: np.ndarray, *, per_replica_batch: int, epochs: int,
                        lr: Callable[[int], float], momentum: float = 0.0, seed: int = 0,
                        label: str = "", verbose: bool = True) -> DataParallelRun:
    """Synchronous data-parallel SGD with a custom loop: each replica's gradient, summed over replicas, one update."""
    import keras  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    n = strategy.num_replicas_in_sync
    global_batch = per_replica_batch * n
    if len(x) < global_batch:
        raise ValueError(f"{len(x)} training examples are fewer than one global batch of {global_batch}")
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=lr(0), momentum=momentum)
        optimizer.build(model.trainable_variables)
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=seed)
          .batch(global_batch, drop_remainder=True))
    dist = strategy.experimental_distribute_dataset(ds)

    @tf.function
    def step(batch):
        def replica_step(xb, yb):
            with tf.GradientTape() as tape:
                per_example = _mse_per_example(yb, model(xb, training=True))
                # Scaled by the GLOBAL batch: summing the replicas' gradients gives the global mean's gradient.
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            # Inside a replica, Keras's optimizer first all-reduces (sums) the gradients over the replicas,
            # then every replica applies the same update to its copy of the weights.
            optimizer.apply(grads, model.trainable_variables)
            return loss
        losses = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    val_x, val_y = tf.constant(x_val), tf.constant(y_val)
    train_loss, val_loss, lrs = [], [], []
    k = 0
    start = time.perf_counter()
    for epoch in range(epochs):
        total, count = 0.0, 0
        for batch in dist:
            rate = lr(k)
            optimizer.learning_rate.assign(rate)
            lrs.append(rate)
            total += float(step(batch))
            count += 1
            k += 1
        train_loss.append(total / count)
        val_loss.append(float(tf.reduce_mean(_mse_per_example(val_y, model(val_x, training=False)))))
        if verbose:
            print(f"{label}epoch {epoch + 1}/{epochs}: train loss {train_loss[-1]:.4f}, val loss {val_loss[-1]:.4f}",
                  flush=True)
    seconds = time.perf_counter() - start
    diff = 0.0
    for var in model.trainable_variables:
        copies = [v.numpy() for v in strategy.experimental_local_results(var.value)]
        if len(copies) != strategy.num_replicas_in_sync:  # one copy per replica, or the comparison means nothing
            raise RuntimeError(f"{var.path} has {len(copies)} local copies for {strategy.num_replicas_in_sync} replicas")
        diff = max(diff, max(float(np.max(np.abs(c - copies[0]))) for c in copies))
    return DataParallelRun(train_loss, val_loss, seconds, k, diff, lrs, [w.copy() for w in model.get_weights()])


# ---------------------------------------------------------------------------------------------
# Model parallelism: layers split over devices


def stage_bounds(n_layers: int, stages: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) layer ranges of `stages` pipeline stages, as even as possible."""
    if stages < 1 or n_layers < stages:
        raise ValueError(f"cannot split {n_layers} layers into {stages} stages: need 1 <= stages <= layers")
    sizes = [n_layers // stages + (1 if i < n_layers % stages else 0) for i in range(stages)]
    starts = np.cumsum([0] + sizes)
    return [(int(starts[i]), int(starts[i + 1])) for i in range(stages)]


@dataclass
class Stage:
    """One stage of a split model: consecutive layers and the device they run on."""

    layers: list
    device: str

    @property
    def variables(self) -> list:
        """The trainable variables of the stage's layers."""
        return [v for layer in self.layers for v in layer.trainable_variables]

    def __call__(self, h):
        import tensorflow as tf  # noqa: PLC0415

        with tf.device(self.device):
            for layer in self.layers:
                h = layer(h)
        return h


def split_model(model, devices: Sequence[str]) -> list[Stage]:
    """Split a sequential Keras model into one contiguous stage per device: each stage's layers are copies
    whose weights are created on that stage's device (explicit placement), with the original's values."""
    import tensorflow as tf  # noqa: PLC0415

    layers = [layer for layer in model.layers if layer.__class__.__name__ != "InputLayer"]
    stages = []
    for i, (a, b) in enumerate(stage_bounds(len(layers), len(devices))):
        placed = []
        with tf.device(devices[i]):
            for layer in layers[a:b]:
                copy = layer.__class__.from_config(layer.get_config())
                copy.build(layer.input.shape)
                copy.set_weights(layer.get_weights())
                placed.append(copy)
        stages.append(Stage(placed, devices[i]))
    return stages


def run_split(stages: Sequence[Stage], x) -> tuple[object, list[dict[str, object]]]:
    """Forward `x` through the stages; return the output and where each layer's output was computed."""
    import tensorflow as tf  # noqa: PLC0415

    h = tf.convert_to_tensor(x)
    where = []
    for s, stage in enumerate(stages):
        with tf.device(stage.device):
            for layer in stage.layers:
                h = layer(h)
                where.append({"stage": s, "layer": layer.name, "requested": stage.device,
                              "weights_on": layer.weights[0].value.device if layer.weights else "",
                              "ran_on": h.device, "output_shape": tuple(h.shape)})
    return h, where


# ---------------------------------------------------------------------------------------------
# Pipeline schedules and their timeline


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


def simulate_pipeline(stages: int, micro_batches: int, forward: float | Sequence[float] = 1.0,
                      backward: float | Sequence[float] = 2.0) -> list[Slot]:
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


# ---------------------------------------------------------------------------------------------
# The pipeline, executed for real on the split model


@dataclass
class PipelineStep:
    """One GPipe training step run for real: loss, accumulated gradients per stage, measured tasks."""

    loss: float
    gradients: list[list[np.ndarray]]   # [stage][variable]
    measured: list[Slot]                # wall-clock seconds since the step started, tasks run one after another
    order: list[Slot]                   # the simulated schedule that fixed the order


def pipeline_step(stages: Sequence[Stage], x: np.ndarray, y: np.ndarray, micro_batches: int) -> PipelineStep:
    """Run forward and backward of one batch as GPipe does, task by task in the schedule's order, on each stage's device.

    Gradients of the micro-batches are accumulated, so they equal the gradient of the whole batch's mean loss.
    """
    import tensorflow as tf  # noqa: PLC0415

    if micro_batches < 1 or len(x) % micro_batches:
        raise ValueError(f"the batch ({len(x)} examples) must split evenly into {micro_batches} micro-batches")
    p, size = len(stages), len(x) // micro_batches
    xs = [tf.constant(x[j * size:(j + 1) * size]) for j in range(micro_batches)]
    ys = [tf.constant(y[j * size:(j + 1) * size]) for j in range(micro_batches)]
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
                        out = tf.reduce_sum(_mse_per_example(ys[j], out)) / len(x)
                tapes[(s, j)], inputs[(s, j)], outputs[(s, j)] = tape, h, out
            else:
                upstream = None if s == p - 1 else out_grads[(s + 1, j)]
                g = tapes.pop((s, j)).gradient(outputs[(s, j)], [inputs[(s, j)]] + stage.variables,
                                               output_gradients=upstream)
                out_grads[(s, j)] = g[0]
                grads[s] = [a + b for a, b in zip(grads[s], g[1:])]
                if s == p - 1:
                    loss_total += float(outputs[(s, j)])
        measured.append(Slot(s, j, task.kind, start, time.perf_counter() - t0))
    return PipelineStep(loss_total, [[g.numpy() for g in gs] for gs in grads], measured, order)


def full_batch_gradients(stages: Sequence[Stage], x: np.ndarray, y: np.ndarray) -> list[list[np.ndarray]]:
    """The gradient of the whole batch's mean loss through the split model, per stage (the reference)."""
    import tensorflow as tf  # noqa: PLC0415

    with tf.GradientTape() as tape:
        h = tf.constant(x)
        for stage in stages:
            h = stage(h)
        loss = tf.reduce_mean(_mse_per_example(tf.constant(y), h))
    flat = tape.gradient(loss, [v for st in stages for v in st.variables])
    out, k = [], 0
    for st in stages:
        out.append([g.numpy() for g in flat[k:k + len(st.variables)]])
        k += len(st.variables)
    return out


def mean_durations(slots: Sequence[Slot], stages: int) -> tuple[list[float], list[float]]:
    """Mean measured forward and backward duration of each stage (seconds per micro-batch)."""
    fwd = [float(np.mean([t.end - t.start for t in slots if t.stage == s and t.kind == "F"])) for s in range(stages)]
    bwd = [float(np.mean([t.end - t.start for t in slots if t.stage == s and t.kind == "B"])) for s in range(stages)]
    return fwd, bwd


def plot_timeline(slots: Sequence[Slot], ax, title: str, unit: str = "time steps") -> None:
    """Draw a pipeline timeline: one row per stage, forward tasks light, backward tasks dark, labelled by micro-batch."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    cmap = plt.get_cmap("tab10")
    stages = sorted({t.stage for t in slots})
    for t in slots:
        color = cmap(t.micro % 10)
        ax.barh(t.stage, t.end - t.start, left=t.start, color=color, alpha=0.45 if t.kind == "F" else 0.95,
                edgecolor="black", linewidth=0.5)
        if len(slots) <= 64:
            ax.text((t.start + t.end) / 2, t.stage, f"{t.kind}{t.micro}", ha="center", va="center", fontsize=7)
    ax.set_yticks(stages, [f"stage {s}" for s in stages])
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)


# ---------------------------------------------------------------------------------------------
# Asynchronous updates: gradients computed on stale weights


def _mlp_init(n_in: int, hidden: int, n_out: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(0, np.sqrt(2 / n_in), (n_in, hidden)), np.zeros(hidden),
            rng.normal(0, np.sqrt(1 / hidden), (hidden, n_out)), np.zeros(n_out)]


def mlp_loss_and_grads(params: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """Mean squared error of a one-hidden-layer ReLU network and its gradient (NumPy, by hand)."""
    w1, b1, w2, b2 = params
    z = x @ w1 + b1
    h = np.maximum(z, 0.0)
    pred = h @ w2 + b2
    err = pred - y
    loss = float(np.mean(err ** 2))
    d_pred = 2.0 * err / err.size
    d_h = d_pred @ w2.T
    d_z = d_h * (z > 0)
    return loss, [x.T @ d_z, d_z.sum(0), h.T @ d_pred, d_pred.sum(0)]


def train_with_staleness(x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, *, staleness: int,
                         steps: int, lr: float, batch_size: int = 64, hidden: int = 32, seed: int = 0,
                         eval_every: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """SGD in which the gradient applied at step t was computed on the weights of step t − `staleness`.

    This is what an asynchronous worker does: it reads the weights, computes, and by the time its gradient
    arrives the others have applied `staleness` updates. Returns (steps, validation loss) every `eval_every` steps
    (inf once the loss overflows).
    """
    if staleness < 0 or steps < 1 or lr <= 0 or batch_size < 1:
        raise ValueError("need staleness >= 0, steps >= 1, lr > 0 and batch_size >= 1")
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    params = _mlp_init(x.shape[1], hidden, y.shape[1], seed)
    history: deque[list[np.ndarray]] = deque([params], maxlen=staleness + 1)
    rng = np.random.default_rng(seed + 1)
    at, losses = [], []
    with np.errstate(all="ignore"):
        for t in range(steps + 1):
            if t % eval_every == 0 or t == steps:
                val = mlp_loss_and_grads(params, x_val, y_val)[0]
                at.append(t)
                losses.append(val if np.isfinite(val) else np.inf)
                if not np.isfinite(val):
                    break
            if t == steps:
                break
            idx = rng.integers(0, len(x), batch_size)
            old = history[0]  # the weights `staleness` updates ago (or the oldest kept, early on)
            _, g = mlp_loss_and_grads(old, x[idx], y[idx])
            params = [p - lr * gi for p, gi in zip(params, g)]
            history.append(params)
    return np.array(at), np.array(losses)
