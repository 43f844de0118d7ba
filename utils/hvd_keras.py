"""Horovod for Keras 3 `model.fit`: gradient averaging, initial broadcast, metric averaging, LR warmup.

Horovod 0.28's own Keras integration (`horovod.tensorflow.keras`, `DistributedGradientTape`) fails
on Keras 3. What works are the plain collectives on tensors and on the `tf.Variable`s that Keras 3
variables wrap; this module builds the usual pieces from them.
"""

from __future__ import annotations

import keras
import tensorflow as tf

try:
    import horovod.tensorflow as hvd
except Exception:  # Horovod could not be built here: the schedule below still works, the rest says why
    hvd = None


def _require_horovod() -> None:
    if hvd is None:
        raise RuntimeError(
            "Horovod is not available on this machine: run `make horovod` and see the README, "
            "'Troubleshooting the Horovod build'."
        )


@keras.saving.register_keras_serializable(package="course")
class HorovodModel(keras.Model):
    """A Keras model whose training step averages every gradient across Horovod ranks before applying it."""

    def _resolve_auto_jit_compile(self):
        # No XLA for this training step: Keras turns it on by itself ("auto") when it sees a GPU, and
        # Horovod's XLA ops are not part of the course's build (README, 'Troubleshooting the Horovod build').
        return False

    def train_step(self, data):
        """Forward, backward, allreduce (average) each gradient, apply, update metrics."""
        x, y = data[0], data[1]
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            # Under mixed_float16, compile() wraps the optimizer in a LossScaleOptimizer: scale the loss here,
            # as Keras's own step does, and the optimizer unscales the gradients it applies (lesson 06).
            scaled = self.optimizer.scale_loss(loss) if self.optimizer is not None else loss
        grads = tape.gradient(scaled, self.trainable_variables)
        # One allreduce per gradient, issued as soon as that gradient exists: the last layers'
        # gradients travel while the first layers' are still being computed (Horovod fuses the
        # ones that are ready together).
        grads = [hvd.allreduce(g, op=hvd.Average, name=f"grad_{i}") for i, g in enumerate(grads)]
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def distributed(model: keras.Model) -> HorovodModel:
    """The same layers and weights as `model`, with the Horovod training step (compile it afterwards)."""
    _require_horovod()
    return HorovodModel(inputs=model.inputs, outputs=model.outputs, name=model.name)


def broadcast_state(model: keras.Model, root_rank: int = 0) -> None:
    """Give every rank rank `root_rank`'s weights and optimizer state (eagerly, outside tf.function)."""
    _require_horovod()
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    variables = [v.value for v in model.variables]
    if model.optimizer is not None:
        variables += [v.value for v in model.optimizer.variables]
    hvd.broadcast_variables(variables, root_rank=root_rank)


class BroadcastInitialState(keras.callbacks.Callback):
    """At the start of training, copy rank 0's weights and optimizer state to every rank."""

    def __init__(self, root_rank: int = 0):
        super().__init__()
        self.root_rank = root_rank

    def on_train_begin(self, logs=None):
        broadcast_state(self.model, self.root_rank)


class AverageMetrics(keras.callbacks.Callback):
    """At the end of each epoch, replace every logged metric by its average over the ranks."""

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for key in sorted(logs):  # the same order on every rank
            logs[key] = float(hvd.allreduce(tf.constant(float(logs[key])), op=hvd.Average, name=f"metric_{key}"))


class WarmupScaledLR(keras.callbacks.Callback):
    """Learning rate = base × ranks, reached linearly over the first `warmup_steps` steps (Goyal et al., 2017)."""

    def __init__(self, base_lr: float, ranks: int, warmup_steps: int, initial_step: int = 0):
        super().__init__()
        if base_lr <= 0 or ranks < 1 or warmup_steps < 0:
            raise ValueError("base_lr must be > 0, ranks >= 1 and warmup_steps >= 0")
        self.base_lr, self.ranks, self.warmup_steps, self.step = base_lr, ranks, warmup_steps, initial_step

    def lr_at(self, step: int) -> float:
        """The learning rate at global step `step`."""
        target = self.base_lr * self.ranks
        if self.warmup_steps == 0 or step >= self.warmup_steps:
            return target
        return self.base_lr + (target - self.base_lr) * step / self.warmup_steps

    def on_train_batch_begin(self, batch, logs=None):
        self.model.optimizer.learning_rate.assign(self.lr_at(self.step))
        self.step += 1
