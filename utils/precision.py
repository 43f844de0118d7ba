"""Number formats and mixed precision: format limits, rounding, Keras dtype policies, and what lesson 06 measures."""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

#: Exponent and mantissa (fraction) bits of each format, sign bit apart.
FORMAT_BITS: dict[str, tuple[int, int]] = {
    "float32": (8, 23),
    "tf32": (8, 10),
    "bfloat16": (8, 7),
    "float16": (5, 10),
    "float8_e5m2": (5, 2),
    "float8_e4m3fn": (4, 3),
}
#: The formats that exist as array types (NumPy or ml_dtypes); TF32 lives only inside GPU matrix units.
STORAGE_TYPES: dict[str, Any] = {
    "float32": np.float32,
    "bfloat16": ml_dtypes.bfloat16,
    "float16": np.float16,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
}
#: The Keras 3 dtype policies the lesson compares.
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclass(frozen=True)
class FormatInfo:
    """A floating-point format: its bit layout and the limits that follow from it."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    epsilon: float

    @property
    def bits(self) -> int:
        """Total width: sign, exponent and mantissa bits."""
        return 1 + self.exponent_bits + self.mantissa_bits


def _unknown_format(name: object) -> ValueError:
    return ValueError(f"unknown number format {name!r}: use one of {sorted(FORMAT_BITS)}")


def storage_type(name: str) -> Any:
    """The NumPy/ml_dtypes scalar type of a format name; a clear error for TF32, unknown names and non-floats."""
    if not isinstance(name, str):
        name = np.dtype(name).name  # a NumPy dtype or type given instead of a name
    if name in STORAGE_TYPES:
        return STORAGE_TYPES[name]
    if name == "tf32":
        raise ValueError("tf32 has no storage type (it exists only inside GPU matrix units): use round_to(x, 'tf32')")
    try:
        kind = np.dtype(name).kind
    except TypeError:
        kind = None
    if kind in ("i", "u", "b"):
        raise TypeError(
            f"{name!r} is not a floating-point type: mixed precision is about float formats, "
            f"use one of {sorted(FORMAT_BITS)}"
        )
    raise _unknown_format(name)


def ieee_limits(exponent_bits: int, mantissa_bits: int, name: str = "") -> FormatInfo:
    """Limits of an IEEE-754-style binary format (top exponent reserved for inf/NaN), from its bit counts."""
    if (
        not (isinstance(exponent_bits, int) and isinstance(mantissa_bits, int))
        or exponent_bits < 2
        or mantissa_bits < 1
    ):
        raise ValueError(
            f"give whole numbers of bits: exponent >= 2 and mantissa >= 1, got {exponent_bits!r}, {mantissa_bits!r}"
        )
    bias = 2 ** (exponent_bits - 1) - 1
    return FormatInfo(
        name=name or f"e{exponent_bits}m{mantissa_bits}",
        exponent_bits=exponent_bits,
        mantissa_bits=mantissa_bits,
        max=(2 - 2.0**-mantissa_bits) * 2.0**bias,
        smallest_normal=2.0 ** (1 - bias),
        smallest_subnormal=2.0 ** (1 - bias - mantissa_bits),
        epsilon=2.0**-mantissa_bits,
    )


def format_info(name: str) -> FormatInfo:
    """The limits of a format, read from its array type (`finfo`); TF32's from its bit layout."""
    if name == "tf32":
        return ieee_limits(*FORMAT_BITS["tf32"], name="tf32")
    t = storage_type(name)
    fi = ml_dtypes.finfo(t) if name in ("bfloat16", "float8_e5m2", "float8_e4m3fn") else np.finfo(t)
    return FormatInfo(
        name=name,
        exponent_bits=FORMAT_BITS[name][0],
        mantissa_bits=FORMAT_BITS[name][1],
        max=float(fi.max),
        smallest_normal=float(fi.smallest_normal),
        smallest_subnormal=float(fi.smallest_subnormal),
        epsilon=float(fi.eps),
    )


def round_to(values: Any, name: str) -> np.ndarray:
    """`values` stored in format `name` (round to nearest even) and read back as float64."""
    x = np.asarray(values, dtype=np.float64)
    if name == "tf32":  # float32 with the 13 lowest mantissa bits rounded away
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    single = x.astype(np.float32)  # the values a model holds are float32 to begin with
    if name == "float32":
        return single.astype(np.float64)
    with np.errstate(over="ignore"):  # too large for the format: inf (or NaN where it has no inf), as intended
        return single.astype(storage_type(name)).astype(np.float64)


def bit_fields(value: float, name: str) -> tuple[str, str, str]:
    """(sign, exponent, mantissa) bits of `value` once stored in format `name`."""
    e, m = FORMAT_BITS.get(name, (None, None)) if isinstance(name, str) else (None, None)
    if e is None:
        raise _unknown_format(name)
    if name in ("float32", "tf32"):
        word = int(np.asarray(round_to(value, name), dtype=np.float32).view(np.uint32))
        bits = format(word, "032b")[: 1 + e + m]
    else:
        stored = np.asarray(value, dtype=np.float32).astype(storage_type(name))
        width = 1 + e + m
        bits = format(int(stored.view(np.uint16 if width == 16 else np.uint8)), f"0{width}b")
    return bits[0], bits[1 : 1 + e], bits[1 + e :]


def fate(values: Any, name: str = "float16", scale: float = 1.0) -> dict[str, float]:
    """Fractions of the nonzero `values` that, multiplied by `scale` and stored in `name`, become 0, subnormal, inf."""
    info = format_info(name)
    x = np.abs(np.asarray(values, dtype=np.float64).ravel())
    x = x[x > 0] * scale
    if x.size == 0:
        raise ValueError("no nonzero value given: pass the gradients (or values) to classify")
    stored = np.abs(round_to(x, name))
    return {
        "zero": float(np.mean(stored == 0)),
        "subnormal": float(np.mean((stored > 0) & (stored < info.smallest_normal))),
        "overflow": float(np.mean(~np.isfinite(stored) | (stored > info.max))),
    }


def required_scale(smallest: float, name: str = "float16") -> float:
    """The smallest power of two that lifts `smallest` to at least the format's smallest normal number."""
    if not (isinstance(smallest, (int, float, np.floating)) and smallest > 0 and math.isfinite(smallest)):
        raise ValueError(f"smallest must be a positive finite magnitude, got {smallest!r}")
    need = format_info(name).smallest_normal / float(smallest)
    return float(2.0 ** max(0, math.ceil(math.log2(need))))


def check_policy(policy: str) -> str:
    """Return `policy` if it is one the lesson compares; otherwise a clear error that lists them."""
    if policy not in POLICIES:
        raise ValueError(
            f"unknown dtype policy {policy!r}: use one of {list(POLICIES)} "
            "(Keras also accepts a plain float dtype name such as 'float16' for pure 16-bit layers)"
        )
    return policy


def build_forecaster(policy: str, **kwargs: Any):
    """The course forecaster with its layers in `policy`, plus a float32 output (the recipe); the global policy is kept."""
    import keras

    from utils import model as course_model

    check_policy(policy)
    saved = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(policy)  # layers and the model itself (compile reads the model's policy)
        net = course_model.build_forecaster(**kwargs)
        out = keras.layers.Activation("linear", dtype="float32", name="output_float32")(net.output)
        return keras.Model(net.input, out, name=f"forecaster_{policy}")
    finally:
        keras.config.set_dtype_policy(saved)


def layer_dtypes(model) -> list[dict[str, str]]:
    """Each layer's policy, variable dtype, compute dtype and output dtype, read from the built model."""
    rows = []
    for layer in model.layers:
        policy = layer.dtype_policy
        rows.append(
            {
                "layer": layer.name,
                "policy": policy.name,
                "variables": ", ".join(sorted({str(v.dtype) for v in layer.weights})) or "-",
                "compute": str(policy.compute_dtype),
                "output": str(layer.output.dtype),
            }
        )
    return rows


def train_weighted(
    policy: str,
    splits,
    *,
    epochs: int,
    loss_weight: float = 1.0,
    dynamic_scaling: bool = False,
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Fit the forecaster with its loss times `loss_weight` (Adam's epsilon too: float32 trains the same); MSE per epoch."""
    import keras

    if not loss_weight > 0:
        raise ValueError(f"loss_weight must be positive, got {loss_weight!r}")
    net = build_forecaster(policy, seed=seed)
    opt = keras.optimizers.Adam(1e-3, epsilon=1e-7 * loss_weight)  # Adam's update is scale-free but for epsilon
    if dynamic_scaling:
        opt = keras.optimizers.LossScaleOptimizer(opt)
    weighted = lambda y, p: loss_weight * keras.ops.mean(keras.ops.square(y - p), axis=-1)
    net.compile(optimizer=opt, loss=weighted, metrics=["mse"], auto_scale_loss=False)
    keras.utils.set_random_seed(seed)
    history = net.fit(
        splits.x_train,
        splits.y_train,
        batch_size=batch_size,
        epochs=epochs,
        verbose=0,
        validation_data=(splits.x_val, splits.y_val),
    )
    return {"mse": history.history["mse"], "val_mse": history.history["val_mse"]}


def dense_flops(model, batch: int) -> float:
    """Floating-point operations of one training step of the Dense layers: 3 x 2 x inputs x units x batch."""
    import keras

    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    return float(sum(6 * int(d.kernel.shape[0]) * int(d.kernel.shape[1]) for d in dense) * batch)


def matmul_gflops(n: int, dtype: str, seconds: float = 0.3) -> float:
    """Best GFLOP/s of an n x n by n x n matmul in `dtype` ('float32', 'bfloat16', 'float16') over about `seconds`."""
    import tensorflow as tf

    storage_type(dtype)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number of at least 1, got {n!r}")
    rng = np.random.default_rng(0)
    a, b = (tf.cast(tf.constant(rng.normal(size=(n, n)), tf.float32), dtype) for _ in range(2))
    mm = tf.function(tf.linalg.matmul)
    mm(a, b).numpy()  # trace and warm up
    best, spent = math.inf, 0.0
    while spent < seconds or best == math.inf:
        start = time.perf_counter()
        mm(a, b).numpy()
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return 2 * n**3 / best / 1e9


def step_timer():
    """A Keras callback that records the wall time of every training batch in `.seconds`."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.seconds: list[float] = []

        def on_train_batch_begin(self, batch, logs=None):
            self._start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)

    return StepTimer()


def gradient_magnitudes(model, x: np.ndarray, y: np.ndarray, loss_weight: float = 1.0) -> dict[str, np.ndarray]:
    """|gradient| of the MSE loss (times `loss_weight`) for every kernel, and for every Dense layer's output."""
    import keras
    import tensorflow as tf

    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    probe = keras.Model(model.input, [layer.output for layer in dense] + [model.output])
    with tf.GradientTape() as tape:
        *outs, pred = probe(tf.constant(x), training=True)
        loss = loss_weight * tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))
    kernels = [layer.kernel.value for layer in dense]
    grads = tape.gradient(loss, kernels + outs)
    found = {f"{layer.name} kernel": np.abs(g.numpy()) for layer, g in zip(dense, grads[: len(dense)])}
    found.update({f"{layer.name} output (signal)": np.abs(g.numpy()) for layer, g in zip(dense, grads[len(dense) :])})
    return found


def _exercise_rank(fn: Callable[[Any], Any]) -> dict[str, Any]:
    """On one Horovod rank: call the learner's `fn` on this rank's gradient and return what it gives back."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    result = fn(tf.constant(exercise_gradient(hvd.rank())))
    if result is None:
        return {"rank": hvd.rank(), "result": None, "dtype": None}
    return {"rank": hvd.rank(), "result": np.asarray(result.numpy()), "dtype": str(result.dtype.name)}


def exercise_gradient(rank: int) -> np.ndarray:
    """The float32 'gradient' rank `rank` holds in the compression exercise (values chosen so fp16 rounding shows)."""
    base = np.array([1 + 2.0**-12, 3.0, 1e-8, 2.0**-5], dtype=np.float32)
    return base * (rank + 1)


def fp16_average(per_rank: np.ndarray, prescale: bool = False) -> np.ndarray:
    """Horovod's fp16-compressed average, in NumPy: each rank's row rounded to float16, summed in float16 in
    rank order, divided by the number of ranks and rounded to float16 again (Horovod scales the reduced
    float16 buffer), returned as float32. With `prescale`, each row is divided by the number of ranks (and
    rounded to float16) before the sum instead of after it, as `hvd.allreduce(..., op=hvd.Sum,
    prescale_factor=1 / hvd.size())` does (Horovod's ScaleBuffer before the allreduce, gloo_operations.cc)."""
    sent = np.asarray(per_rank, dtype=np.float32).astype(np.float16)
    if sent.ndim < 1 or len(sent) < 1:
        raise ValueError("per_rank holds one row per rank: give at least one row")
    if prescale:
        sent = (sent.astype(np.float64) / len(sent)).astype(np.float16)
    total = sent[0]
    with np.errstate(over="ignore"):  # a float16 sum past 65504 is inf, as in Horovod's buffer
        for s in sent[1:]:
            total = (total + s).astype(np.float16)
    if prescale:
        return total.astype(np.float32)
    return (total.astype(np.float64) / len(sent)).astype(np.float16).astype(np.float32)


def compression_breakeven(best_ms: dict[str, float], saved_bytes: float) -> dict[str, float]:
    """What fp16 compression adds to one allreduce (s), from the best loopback calls in ms: at least the compressed
    call's time minus the float32 call's; at most that plus loopback's own saving on half the bytes, taken as half
    of what the float32 call spends beyond a call of one value per tensor (additions included, so an upper bound).
    Also the link rates (bytes/s) below which the wire time of `saved_bytes` pays for it (inf: it added nothing)."""
    if not saved_bytes > 0:
        raise ValueError(f"saved_bytes must be positive (the ring's bytes that compression saves), got {saved_bytes!r}")
    low = (best_ms["fp16"] - best_ms["none"]) / 1e3
    high = low + max(best_ms["none"] - best_ms["one value per tensor"], 0.0) / 2e3
    rate = lambda added: saved_bytes / added if added > 0 else math.inf
    return {"added_low": low, "added_high": high, "rate_low": rate(high), "rate_high": rate(low)}


def fp16_average_expected(ranks: int) -> np.ndarray:
    """What averaging the exercise gradients gives when each is sent as float16: round, sum in fp16, halve in fp16."""
    return fp16_average(np.stack([exercise_gradient(r) for r in range(ranks)]))


def check_fp16_allreduce(fn: Callable[[Any], Any] | None, ranks: int = 2, timeout: float = 120) -> bool:
    """Exercise: run the learner's `fn(grad)` on `ranks` Horovod ranks; it must average in 16 bits and return float32."""
    from utils import checks, launch

    if fn is None:
        print("[fp16 allreduce] not answered yet: write the function, assign it, and run the cell again.")
        return False
    ok, why = launch.horovod_available()
    if not ok:
        print("[fp16 allreduce] cannot run here:", why)
        return False
    import sys

    import cloudpickle

    # The ranks may not be able to import the module that defines `fn` (a notebook's is sent by value already).
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    by_value = module is not None and module.__name__ != "__main__" and not module.__name__.startswith("utils")
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    print(f"[fp16 allreduce] running your function on {ranks} Horovod ranks (about 10 s) ...", flush=True)
    try:
        got = launch.horovod_run(_exercise_rank, np=ranks, args=(fn,), timeout=timeout, stream=False)
    except launch.WorkerError as err:
        cause = launch.exception_line(err)
        print(
            f"[fp16 allreduce] your function failed on the ranks: {cause}. Fix that line and run the cell again."
            if cause
            else f"[fp16 allreduce] the ranks {err.reason} (their logs: {err.log_dir}); run the cell again."
        )
        return False
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
    if any(r["result"] is None for r in got):
        print("[fp16 allreduce] your function returned None: return the allreduced tensor.")
        return False
    if any(r["dtype"] != "float32" for r in got):
        print(f"[fp16 allreduce] not quite: it returned {got[0]['dtype']}; Horovod's compression hands back float32.")
        return False
    plain = np.mean([exercise_gradient(r) for r in range(ranks)], axis=0)
    if all(np.allclose(r["result"], plain, rtol=1e-6, atol=0) for r in got):
        print("[fp16 allreduce] not quite: that is the float32 average. Hint: pass compression=hvd.Compression.fp16.")
        return False
    return all(
        checks.report(
            f"fp16 allreduce, rank {r['rank']}",
            r["result"],
            fp16_average_expected(ranks),
            hint="average with op=hvd.Average and compression=hvd.Compression.fp16",
        )
        for r in got
    )


def summarize(values: Sequence[float]) -> str:
    """Mean and spread of a few runs, as 'mean ± sd (n runs)'."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ValueError("no values to summarize")
    sd = float(v.std(ddof=1)) if v.size > 1 else float("nan")
    return f"{v.mean():.5f} ± {sd:.5f} ({v.size} run{'s' if v.size > 1 else ''})"


#: TensorFlow's one-time notice at the first float16 operation (tensorflow/core/util/util.cc, logged at ERROR
#: level) when its oneDNN custom operations are on but may not take float16 on this CPU. Its test,
#: `IsDataTypeSupportedByOneDNNOnThisCPU`, asks for (AVX512BW and (AVX512-FP16 or AMX-FP16)) or AVX-NE-CONVERT,
#: not AVX-512 alone as the notice says. Where the notice appears, float16 operations run on Eigen's kernels.
ONEDNN_HALF_NOTICE = "oneDNN supports DT_HALF only on platforms with AVX-512"


def quiet_onednn_half_notice() -> str:
    """Run TensorFlow's first float16 operation with stderr captured and return TensorFlow's oneDNN float16 notice
    (above; '' where TensorFlow printed none), so that a lesson can show it as evidence, in its place, rather than
    as a red line at start-up; any other line is passed on to stderr."""
    import tensorflow as tf

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            float((tf.ones((1,), tf.float16) * 2)[0])
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        lines = captured.read().decode(errors="replace").splitlines()
    others = [line for line in lines if ONEDNN_HALF_NOTICE not in line]
    if others:
        print("\n".join(others), file=sys.stderr)
    return "\n".join(line for line in lines if ONEDNN_HALF_NOTICE in line)


def onednn_enabled() -> bool:
    """True when TensorFlow's oneDNN custom operations are on in this process (TF_ENABLE_ONEDNN_OPTS, whose
    default TensorFlow chooses from the CPU: tensorflow/core/util/port.cc, IsMklEnabled)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


@dataclass
class FusionProbe:
    """One float16 layer, relu(x @ w + b), timed as TensorFlow runs it eagerly (op by op), inside a
    `tf.function` (where the graph optimizer's remapper may fuse the three ops into one kernel), and inside a
    `tf.function` with the remapper off (the same graph, unfused)."""

    n: int
    eager_s: float
    graph_s: float
    unfused_s: float

    @property
    def penalty(self) -> float:
        """How many times slower the traced layer ran than the same ops one by one."""
        return self.graph_s / self.eager_s

    @property
    def remapper_penalty(self) -> float:
        """How many times slower the traced layer ran with the remapper on than with it off."""
        return self.graph_s / self.unfused_s

    @property
    def slow(self) -> bool:
        """True where the remapper's rewrite makes the traced layer more than 10x slower than without it."""
        return self.remapper_penalty > 10


def float16_fusion_probe(n: int = 256, repeats: int = 3) -> FusionProbe:
    """Time relu(x @ w + b) in float16 eagerly, traced, and traced with the remapper off (best of `repeats`
    each, after one warm-up)."""
    import tensorflow as tf

    if not isinstance(n, int) or n < 16:
        raise ValueError(f"n must be a whole number of at least 16, got {n!r}")
    rng = np.random.default_rng(0)
    x, w = (tf.constant(rng.normal(size=(n, n)), tf.float16) for _ in range(2))
    b = tf.zeros((n,), tf.float16)

    def layer():
        return tf.nn.relu(tf.nn.bias_add(tf.linalg.matmul(x, w), b))

    def best(fn) -> float:
        fn().numpy()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn().numpy()
            times.append(time.perf_counter() - start)
        return min(times)

    eager_s, graph_s = best(layer), best(tf.function(layer))
    with without_remapping():
        unfused_s = best(tf.function(layer))
    return FusionProbe(n=n, eager_s=eager_s, graph_s=graph_s, unfused_s=unfused_s)


@dataclass
class OneDnnTrace:
    """What oneDNN reported (ONEDNN_VERBOSE=1) while a fresh process ran the traced float16 layer once."""

    onednn_on: bool  #: TensorFlow's oneDNN custom operations were on in that process
    half_notice: str  #: TensorFlow's oneDNN float16 notice ('' if it printed none)
    exec_lines: list[str]  #: oneDNN's `exec` lines for that one run (empty: oneDNN ran no primitive)

    def primitives(self) -> list[str]:
        """One entry per distinct primitive that ran: its kind, its implementation and its source data type."""
        out = []
        for line in self.exec_lines:
            f = line.split(",")
            if len(f) < 9:
                continue
            kind, impl = f[5], f[6] or "(implementation not named)"
            src = next((m.split(":")[0].split("_")[1] for m in f[8].split() if m.startswith("src_")), "?")
            entry = f"{kind} {impl} ({src})"
            if entry not in out:
                out.append(entry)
        return out


_TRACE_CODE = """
import sys
import numpy as np
import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port
n, remapping = int(sys.argv[1]), sys.argv[2] == "1"
tf.config.optimizer.set_experimental_options({"remapping": remapping})
rng = np.random.default_rng(0)
x, w = (tf.constant(rng.normal(size=(n, n)), tf.float16) for _ in range(2))
b = tf.zeros((n,), tf.float16)
layer = tf.function(lambda: tf.nn.relu(tf.nn.bias_add(tf.linalg.matmul(x, w), b)))
layer().numpy()
print("@@ONEDNN", int(_pywrap_util_port.IsMklEnabled()), flush=True)
layer().numpy()
print("@@END", flush=True)
"""


def onednn_trace(n: int = 256, remapping: bool = True, timeout: float = 300) -> OneDnnTrace:
    """Run the float16 layer of :func:`float16_fusion_probe`, traced, in a fresh Python with ONEDNN_VERBOSE=1 and
    return what oneDNN says it executed in the second run (the first one traces and warms up)."""
    import subprocess

    from utils import paths

    env = {
        **os.environ,
        "ONEDNN_VERBOSE": "1",
        "TF_CPP_MIN_LOG_LEVEL": "0",
        "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _TRACE_CODE, str(n), "1" if remapping else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=paths.REPO_ROOT,
    )
    start = time.monotonic()
    while True:  # a line every 7 s, so that a slow start of TensorFlow never looks like a hang
        try:
            stdout, stderr = proc.communicate(timeout=7)
            break
        except subprocess.TimeoutExpired:
            waited = time.monotonic() - start
            if waited > timeout:
                proc.kill()
                proc.communicate()
                raise RuntimeError(f"the oneDNN trace process took more than {timeout:.0f} s and was stopped") from None
            print(f"  oneDNN trace: a fresh TensorFlow still starting or running ({waited:.0f} s)", flush=True)
    if proc.returncode != 0:
        tail = (stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"the oneDNN trace process failed ({proc.returncode}): {tail}")
    out = stdout.splitlines()
    mark = next(i for i, line in enumerate(out) if line.startswith("@@ONEDNN"))
    end = out.index("@@END")
    return OneDnnTrace(
        onednn_on=out[mark].split()[1] == "1",
        half_notice=next((line for line in stderr.splitlines() if ONEDNN_HALF_NOTICE in line), ""),
        exec_lines=[line for line in out[mark + 1 : end] if line.startswith("onednn_verbose") and ",exec," in line],
    )


class without_remapping:
    """Turn off the graph optimizer's remapper (the pass that fuses a matmul with its bias and activation) for
    everything run inside the block, and restore the previous setting after it. TensorFlow applies the setting
    when it runs a function, not only when it traces one, so the whole run belongs inside:

        with precision.without_remapping():
            model.fit(...)          # matmul, bias and relu run as separate ops
    """

    def __enter__(self):
        import tensorflow as tf

        self._before = tf.config.optimizer.get_experimental_options().get("remapping")
        tf.config.optimizer.set_experimental_options({"remapping": False})
        return self

    def __exit__(self, *exc):
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"remapping": True if self._before is None else self._before})
        return False


# Lesson 06's exercises: each check derives its expected answer from the formats above, out of the learner's view.


def check_survivors(answer: Sequence[bool] | None, values: Sequence[float], name: str = "float16") -> bool:
    """Exercise: which of `values` stay nonzero and finite once stored in the format `name` (a list of bools)."""
    from utils import checks

    return checks.report(
        f"survives in {name}",
        answer,
        [bool(v != 0 and np.isfinite(v)) for v in round_to(values, name)],
        hint=f"storing rounds to the nearest {name} number: which values come out as 0, which as inf? Section 1's "
        "table gives the smallest subnormal and the largest finite number",
    )


def check_loss_scale(answer: float | None, smallest: float, name: str = "float16") -> bool:
    """Exercise: the smallest power-of-two loss scale that makes a gradient of `smallest` a normal `name` number."""
    from utils import checks

    return checks.report(
        f"loss scale for {smallest:g}",
        answer,
        required_scale(smallest, name),
        hint=f"the scaled gradient must reach {name}'s smallest normal number (section 1's table); the scale is a "
        "power of two",
    )


def check_bfloat16_normal(k: float | None, no_scaling_needed: bool | None, smallest_gradient: float) -> bool:
    """Exercise: the exponent k of bfloat16's smallest normal number 2^k, and whether `smallest_gradient` is at least
    that (a normal bfloat16 number with no loss scaling)."""
    from utils import checks

    smallest_normal = format_info("bfloat16").smallest_normal
    exponent = checks.report(
        "bfloat16 smallest normal exponent",
        k,
        math.log2(smallest_normal),
        hint="the smallest normal exponent is 1 - bias, and the bias follows from the exponent bits (section 1)",
    )
    normal = checks.report(
        "no scaling needed in bfloat16",
        no_scaling_needed,
        smallest_gradient >= smallest_normal,
        hint="compare section 3's smallest gradient (smallest_gradient) with 2^k",
    )
    return exponent and normal


def two_layer_dtypes(policy: str = "mixed_bfloat16") -> tuple[str, str]:
    """(compute dtype of a Dense layer created with dtype="float32", dtype of the next Dense layer's output) under the
    global policy `policy`, read from a model built for the purpose (the global policy is restored)."""
    import keras

    saved = keras.config.dtype_policy()
    keras.config.set_dtype_policy(check_policy(policy))
    try:
        inputs = keras.Input(shape=(48,))
        kept = keras.layers.Dense(16, dtype="float32", name="kept_float32")
        out = keras.layers.Dense(8, name="after")(kept(inputs))
        return str(kept.compute_dtype), str(out.dtype)
    finally:
        keras.config.set_dtype_policy(saved)


def check_layer_dtypes(compute: str | None, output: str | None, policy: str = "mixed_bfloat16") -> bool:
    """Exercise: the compute dtype of a Dense layer created with dtype="float32", and the dtype of the next layer's
    output, under the global policy `policy` (the check builds the model and reads them)."""
    from utils import checks

    built_compute, built_output = two_layer_dtypes(policy)
    first = checks.report(
        "compute dtype of the float32 layer", compute, built_compute, hint="dtype= overrides the global policy"
    )
    second = checks.report(
        "output dtype of the next layer", output, built_output, hint="each layer casts its inputs to its compute dtype"
    )
    return first and second


def describe_fusion(fusion: FusionProbe, trace: OneDnnTrace, cpu) -> str:
    """Lesson 06's account of the float16 probe, worded on what was shown: the timings, whether TensorFlow's oneDNN
    operations were on, its float16 notice, and the primitives oneDNN logged (`cpu` is an envinfo.CpuInfo)."""
    flags = ", ".join(f for f in ("avx512bw", "avx512_fp16", "amx_fp16", "avx_ne_convert") if cpu.has(f)) or "none"
    if not trace.onednn_on:
        why = (
            "as `TF_ENABLE_ONEDNN_OPTS` asks"
            if os.environ.get("TF_ENABLE_ONEDNN_OPTS")
            else "TensorFlow's default for this CPU; `TF_ENABLE_ONEDNN_OPTS=1` turns them on"
        )
        path = (
            f"TensorFlow's oneDNN custom operations were **off** ({why}), so no oneDNN float16 kernel was there "
            "to fuse into."
        )
    elif trace.half_notice:
        path = (
            "TensorFlow's oneDNN operations were on, but its float16 test failed, and it said so: "
            f"*{trace.half_notice.split('] ')[-1]}* Its test asks for AVX512BW with AVX512-FP16 or AMX-FP16, or for "
            f"AVX-NE-CONVERT (of these, this CPU reports: {flags}); float16 operations fall back to Eigen's kernels."
        )
    else:
        path = (
            "TensorFlow's oneDNN operations were on and its float16 test passed (no notice; of the flags it tests, "
            f"this CPU reports: {flags}), so float16 operations may go to oneDNN."
        )
    prims = trace.primitives()
    if not prims:
        seen = "oneDNN's verbose log named no primitive for one run of the traced layer: Eigen's own code ran it."
    else:
        seen = f"oneDNN's verbose log for one run of the traced layer names: {'; '.join(f'`{p}`' for p in prims)}."
        if all("(f32)" in p for p in prims):
            seen += " Every one worked on float32 (f32) data: the float16 matmul was computed in float32."
        if any(p.split()[1].startswith("ref") for p in prims):
            seen += " `ref` is oneDNN's reference implementation, its unoptimised fallback."
    timing = (
        f"With the remapper on, the traced layer took {fusion.remapper_penalty:.0f}× as long as with it off "
        f"({fusion.penalty:.0f}× the ops one by one): the slow path is what the remapper rewrote the three ops into. "
        "`fit` runs in a graph, so a `mixed_float16` step would measure that rewrite, not float16. The timing below "
        "turns the remapper off for all three policies, times float32 and `mixed_bfloat16` with it on as well (what "
        "`fit` gets by default), and section 6 turns it off too."
        if fusion.slow
        else f"With the remapper on, the traced layer took {fusion.remapper_penalty:.1f}× the time it took with the "
        "remapper off, under the 10× at which this lesson turns the remapper off, so the timing below runs `fit` as "
        "it comes (remapper on)."
    )
    return f"{path} {seen} {timing}"
