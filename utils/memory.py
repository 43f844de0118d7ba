"""Training memory per device: parameters, gradients, optimizer state and activations, under data and
model parallelism; and the advice on what to do when a model does not fit one device."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

#: Values of optimizer state kept per parameter.
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}


@dataclass(frozen=True)
class LayerNeeds:
    """One layer: its parameters, and the values per example it keeps for the backward pass (its output)."""

    name: str
    parameters: int
    activations_per_example: int


@dataclass(frozen=True)
class Bytes:
    """Bytes one device holds for training, by kind."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        """All four kinds together."""
        return self.parameters + self.gradients + self.optimizer + self.activations


def layer_needs(model) -> list[LayerNeeds]:
    """Per-layer parameters and per-example activation values of a built Keras model (input first)."""
    out = []
    for layer in model.layers:
        shape = layer.output.shape if hasattr(layer, "output") else None
        if shape is None:
            raise ValueError(f"layer {layer.name} has no known output shape: build the model on an Input first")
        values = math.prod(int(d) for d in shape[1:])
        out.append(LayerNeeds(layer.name, int(layer.count_params()), values))
    return out


def _slots(optimizer: str) -> int:
    if optimizer not in OPTIMIZER_SLOTS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_SLOTS)}, got {optimizer!r}")
    return OPTIMIZER_SLOTS[optimizer]


def stage_bytes(
    layers: Sequence[LayerNeeds],
    batch: int,
    optimizer: str = "adam",
    bytes_per_value: int = 4,
    activation_bytes: int | None = None,
) -> Bytes:
    """Bytes for training `layers` on one device with `batch` examples (weights, gradients, optimizer state in
    `bytes_per_value`; activations in `activation_bytes`, the same unless given)."""
    if batch < 0:
        raise ValueError(f"batch must be zero or positive, got {batch}")
    params = sum(layer.parameters for layer in layers)
    acts = sum(layer.activations_per_example for layer in layers)
    b = bytes_per_value
    return Bytes(
        params * b,
        params * b,
        params * _slots(optimizer) * b,
        acts * batch * (b if activation_bytes is None else activation_bytes),
    )


def data_parallel_bytes(
    layers: Sequence[LayerNeeds], global_batch: int, devices: int, optimizer: str = "adam"
) -> list[Bytes]:
    """Per-device bytes under data parallelism: a full replica each, 1/N of the global batch's activations."""
    if devices < 1 or global_batch % devices:
        raise ValueError(f"the global batch ({global_batch}) must divide evenly over {devices} devices")
    return [stage_bytes(layers, global_batch // devices, optimizer)] * devices


def model_parallel_bytes(
    layers: Sequence[LayerNeeds], global_batch: int, devices: int, optimizer: str = "adam"
) -> list[Bytes]:
    """Per-device bytes under model parallelism: contiguous layer groups, each with the whole batch's activations.

    The input (a layer without parameters at the front) stays with the first stage; the others are split as
    `utils.model_parallel.stage_bounds` splits them.
    """
    from utils.model_parallel import stage_bounds

    head, body = (list(layers[:1]), list(layers[1:])) if layers and layers[0].parameters == 0 else ([], list(layers))
    groups = [body[a:b] for a, b in stage_bounds(len(body), devices)]
    groups[0] = head + groups[0]
    return [stage_bytes(g, global_batch, optimizer) for g in groups]


@dataclass(frozen=True)
class MemoryNeeds:
    """What training a model needs, in the terms the advice works with."""

    parameters: int
    activations_per_example: float
    batch_size: int
    optimizer: str = "adam"
    bytes_per_value: int = 4
    activation_bytes: int = 4

    def bytes(self) -> Bytes:
        """Bytes on one device that holds the whole model and the whole batch."""
        b = self.bytes_per_value
        return Bytes(
            self.parameters * b,
            self.parameters * b,
            self.parameters * _slots(self.optimizer) * b,
            self.activations_per_example * self.batch_size * self.activation_bytes,
        )


def needs_of(layers: Sequence[LayerNeeds], batch_size: int, optimizer: str = "adam") -> MemoryNeeds:
    """`MemoryNeeds` of a model given its per-layer needs (see `layer_needs`)."""
    return MemoryNeeds(
        sum(x.parameters for x in layers), sum(x.activations_per_example for x in layers), batch_size, optimizer
    )


@dataclass
class Recommendation:
    """The advice: a strategy, the changes it relies on, and why; plus every option tried, in order."""

    strategy: str  # "data parallelism" or "model parallelism"
    changes: list[str]
    reasons: list[str]
    devices_at_least: int = 1
    tried: list[tuple[str, float, bool]] = field(default_factory=list)  # (option, bytes needed, fits)

    def __str__(self) -> str:
        lines = [f"Recommended: {self.strategy}" + (f" ({', '.join(self.changes)})" if self.changes else "")]
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


def human_bytes(x: float) -> str:
    """Bytes in the largest decimal unit that keeps the number at 1 or more (B, KB, MB, GB, TB)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(x) >= size:
            return f"{x / size:,.2f} {unit}"
    return f"{x:,.0f} B"


_gb = human_bytes


def recommend_strategy(
    needs: MemoryNeeds,
    device_bytes: float,
    *,
    min_batch: int = 1,
    input_shrink: float | None = None,
    can_change_optimizer: bool = True,
    headroom: float = 0.0,
) -> Recommendation:
    """Data parallelism if the model fits one device; otherwise try, in order, the remedies of a fitting
    data-parallel setup (a lighter optimizer if allowed, a smaller batch down to `min_batch`, a smaller input
    that keeps `input_shrink` of the activations, mixed precision), and only then model parallelism."""
    if device_bytes <= 0:
        raise ValueError(f"device_bytes must be positive (the memory of one device, in bytes), got {device_bytes}")
    if needs.parameters < 0 or needs.activations_per_example < 0 or needs.batch_size < 1:
        raise ValueError("parameters and activations must be >= 0 and the batch size >= 1")
    if not 1 <= min_batch <= needs.batch_size:
        raise ValueError(f"min_batch must be between 1 and the batch size ({needs.batch_size}), got {min_batch}")
    if input_shrink is not None and not 0 < input_shrink < 1:
        raise ValueError(
            f"input_shrink is the fraction of activations left after shrinking the input: "
            f"between 0 and 1, got {input_shrink}"
        )
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom is the fraction of device memory kept free, between 0 and 1; got {headroom}")
    usable = device_bytes * (1 - headroom)
    tried: list[tuple[str, float, bool]] = []

    def attempt(label: str, n: MemoryNeeds) -> bool:
        total = n.bytes().total
        tried.append((label, total, total <= usable))
        return total <= usable

    base = needs.bytes()
    need_line = (
        f"training needs {_gb(base.total)} (weights {_gb(base.parameters)}, gradients {_gb(base.gradients)}, "
        f"optimizer state {_gb(base.optimizer)}, activations {_gb(base.activations)} for a batch of "
        f"{needs.batch_size}); one device offers {_gb(usable)}"
    )
    if attempt("as it is", needs):
        return Recommendation(
            "data parallelism",
            [],
            [
                need_line + ": it fits.",
                "Every device holds a full replica and works on its own part of each batch; only gradients travel.",
                "Model parallelism would add idle time and traffic between stages without any need for it.",
            ],
            1,
            tried,
        )
    reasons = [need_line + ": it does not fit."]
    # The remedies accumulate: each one is tried on top of those before it, as one would apply them.
    current, changes, notes = needs, [], []

    def fits_now(label: str, change: str, note: str) -> Recommendation | None:
        changes.append(change)
        notes.append(note)
        if attempt(" + ".join(changes) if len(changes) > 1 else label, current):
            return Recommendation(
                "data parallelism",
                list(changes),
                reasons + notes + [f"With {' and '.join(changes)} it needs {_gb(current.bytes().total)}, which fits."],
                1,
                tried,
            )
        return None

    # 1. Hyperparameters: an optimizer with less state (the number of layers is the other lever, in the caller's hands).
    if needs.optimizer != "sgd" and can_change_optimizer:
        current = replace(current, optimizer="sgd")
        found = fits_now(
            "plain SGD instead of " + needs.optimizer + " (no optimizer state)",
            f"an optimizer without state (SGD instead of {needs.optimizer})",
            "Check that training still converges as well without optimizer state (tune the learning rate).",
        )
        if found:
            return found
    # 2. A smaller batch, not below min_batch.
    states = sum(getattr(current.bytes(), k) for k in ("parameters", "gradients", "optimizer"))
    per_example = current.bytes().activations / current.batch_size
    if per_example > 0 and states < usable:
        b = max(min_batch, min(int((usable - states) // per_example), current.batch_size - 1))
        if b < current.batch_size:
            current = replace(current, batch_size=b)
            found = fits_now(
                f"batch {b}",
                f"a batch of {b} per device instead of {needs.batch_size}",
                "Use more devices to keep the global batch, and do not go so small that training suffers.",
            )
            if found:
                return found
    if states >= usable:
        reasons.append(
            f"The weights, gradients and optimizer state alone need {_gb(states)}: no smaller batch, "
            "input or precision of the activations can make it fit."
        )
    else:
        # 3. A smaller input (shorter sequences, lower resolution, smaller embeddings).
        if input_shrink is not None:
            current = replace(current, activations_per_example=current.activations_per_example * input_shrink)
            found = fits_now(
                f"input reduced to {input_shrink:.0%} of the activations",
                f"a smaller input ({input_shrink:.0%} of the activations)",
                "A smaller input changes what the model sees: check the accuracy it keeps.",
            )
            if found:
                return found
        # 4. Mixed precision: activations in 16 bits (Keras keeps the variables and their updates in float32).
        if current.activation_bytes > 2 and per_example > 0:
            current = replace(current, activation_bytes=2)
            found = fits_now(
                "mixed precision (16-bit activations)",
                "mixed precision",
                "Mixed precision also runs faster on hardware with 16-bit units (lesson 06).",
            )
            if found:
                return found
    # 5. Model parallelism: split the layers (and their state) over devices, pipelined with micro-batches.
    devices = max(2, math.ceil(base.total / usable))
    tried.append((f"model parallelism over {devices} devices", base.total / devices, True))
    return Recommendation(
        "model parallelism",
        [f"layers split over at least {devices} devices, pipelined"],
        reasons
        + [
            f"Split evenly, {devices} devices hold {_gb(base.total / devices)} each; "
            "pipeline the stages with micro-batches so they are not idle most of the time."
            " Combine with data parallelism across groups of devices to scale further."
        ],
        devices,
        tried,
    )
