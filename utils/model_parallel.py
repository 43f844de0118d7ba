"""Model parallelism: a sequential model split into stages, each placed on its own device."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from utils.model import mse_per_example


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
        import tensorflow as tf

        with tf.device(self.device):
            for layer in self.layers:
                h = layer(h)
        return h


def split_model(model, devices: Sequence[str]) -> list[Stage]:
    """Split a sequential Keras model into one contiguous stage per device: each stage's layers are copies
    whose weights are created on that stage's device (explicit placement), with the original's values."""
    import tensorflow as tf

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
    import tensorflow as tf

    h = tf.convert_to_tensor(x)
    where = []
    for s, stage in enumerate(stages):
        with tf.device(stage.device):
            for layer in stage.layers:
                h = layer(h)
                where.append(
                    {
                        "stage": s,
                        "layer": layer.name,
                        "requested": stage.device,
                        "weights_on": layer.weights[0].value.device if layer.weights else "",
                        "ran_on": h.device,
                        "output_shape": tuple(h.shape),
                    }
                )
    return h, where


def full_batch_gradients(stages: Sequence[Stage], x: np.ndarray, y: np.ndarray) -> list[list[np.ndarray]]:
    """The gradient of the whole batch's mean loss through the split model, per stage (the reference)."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        h = tf.constant(x)
        for stage in stages:
            h = stage(h)
        loss = tf.reduce_mean(mse_per_example(tf.constant(y), h))
    flat = tape.gradient(loss, [v for st in stages for v in st.variables])
    out, k = [], 0
    for st in stages:
        out.append([g.numpy() for g in flat[k : k + len(st.variables)]])
        k += len(st.variables)
    return out
