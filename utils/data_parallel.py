"""Data parallelism with tf.distribute.MirroredStrategy: replica gradients checked, learning-rate warm-up, a training loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from utils.model import mse_per_example


@dataclass
class GradientCheck:
    """Per-replica gradients of one global batch, compared with the gradient of the whole batch."""

    replicas: int
    per_replica_batch: int
    replica_gradients: list[list[np.ndarray]]  # [replica][variable], each of its own local mean loss
    global_gradient: list[np.ndarray]  # [variable], of the mean loss over the global batch

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
    import tensorflow as tf

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
            loss = tf.reduce_mean(mse_per_example(yb, model(xb, training=True)))  # this replica's mean
        return tape.gradient(loss, model.trainable_variables)

    per_replica = strategy.run(replica_step, args=batch)
    replica_grads = [
        [g.numpy() for g in grads] for grads in zip(*[strategy.experimental_local_results(g) for g in per_replica])
    ]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(mse_per_example(tf.constant(y), reference(tf.constant(x), training=True)))
    global_grads = [g.numpy() for g in tape.gradient(loss, reference.trainable_variables)]
    return GradientCheck(n, len(x) // n, replica_grads, global_grads)


def replica_difference(strategy, model) -> float:
    """The largest difference between the replicas' copies of any trainable variable (0.0: identical replicas)."""
    diff = 0.0
    for var in model.trainable_variables:
        copies = [v.numpy() for v in strategy.experimental_local_results(getattr(var, "value", var))]
        if len(copies) != strategy.num_replicas_in_sync:  # one copy per replica, or the comparison means nothing
            raise RuntimeError(
                f"{var.path} has {len(copies)} local copies for {strategy.num_replicas_in_sync} replicas: "
                "create the model inside strategy.scope()"
            )
        diff = max(diff, max(float(np.max(np.abs(c - copies[0]))) for c in copies))
    return diff


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


def train_data_parallel(
    strategy,
    build_model: Callable[[], object],
    x: np.ndarray,
    y: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    *,
    per_replica_batch: int,
    epochs: int,
    lr: Callable[[int], float],
    momentum: float = 0.0,
    seed: int = 0,
    label: str = "",
    verbose: bool = True,
) -> DataParallelRun:
    """Synchronous data-parallel SGD with a custom loop: each replica's gradient, summed over replicas, one update."""
    import keras
    import tensorflow as tf

    n = strategy.num_replicas_in_sync
    global_batch = per_replica_batch * n
    if len(x) < global_batch:
        raise ValueError(f"{len(x)} training examples are fewer than one global batch of {global_batch}")
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=lr(0), momentum=momentum)
        optimizer.build(model.trainable_variables)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=seed).batch(global_batch, drop_remainder=True)
    dist = strategy.experimental_distribute_dataset(ds)

    @tf.function
    def step(batch):
        def replica_step(xb, yb):
            with tf.GradientTape() as tape:
                per_example = mse_per_example(yb, model(xb, training=True))
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
        val_loss.append(float(tf.reduce_mean(mse_per_example(val_y, model(val_x, training=False)))))
        if verbose:
            print(
                f"{label}epoch {epoch + 1}/{epochs}: train loss {train_loss[-1]:.4f}, val loss {val_loss[-1]:.4f}",
                flush=True,
            )
    seconds = time.perf_counter() - start
    diff = replica_difference(strategy, model)
    return DataParallelRun(train_loss, val_loss, seconds, k, diff, lrs, [w.copy() for w in model.get_weights()])
