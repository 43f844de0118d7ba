"""Train the course's forecasting model with Keras 3 on JAX, data parallel over several devices (keras.distribution).

    KERAS_BACKEND=jax XLA_FLAGS=--xla_force_host_platform_device_count=2 \
        python scripts/train_keras_jax.py --epochs 5 --batch-size 64 --lr 0.001

The route Keras's author points to for multi-worker Keras 3 (keras-team/keras#20585), in place of tf.distribute:
one process drives every device, `keras.distribution.DataParallel` puts a copy of every weight on each device and
splits each global batch among them, and plain `model.fit` trains. The changes from train_single.py carry a comment
that starts with `JAX:`. On a CPU, XLA's flag `--xla_force_host_platform_device_count=N` gives the process N CPU
devices (as logical devices do for MirroredStrategy in lesson 05); on a GPU machine,
`keras.distribution.list_devices()` with no argument returns the GPUs instead. The arguments are train_mwms.py's:
--batch-size is per device (replica), --lr the single-replica rate, scaled by the number of devices after a
warm-up. Without --epochs and --data-size it trains the sizes of the run mode (utils.mode: small with
COURSE_SMOKE=1). Prints one line per epoch and a line `RESULT {json}`.
"""

import argparse
import json
import os
import sys
import time

from utils import data, mode, model  # none of them imports Keras or TensorFlow when imported

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=mode.pick(5, 2))
parser.add_argument("--batch-size", type=int, default=64)  # JAX: per device, as train_mwms.py's per replica
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--optimizer", default="adam")
parser.add_argument("--width", type=int, default=128)
parser.add_argument("--depth", type=int, default=2)
parser.add_argument(
    "--data-size",
    type=int,
    default=mode.pick(0, data.HOURS_PER_YEAR // 2),
    help="hours of synthetic data; 0 = the course dataset",
)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--warmup-epochs", type=float, default=1.0)  # JAX: warm-up of the scaled rate, as train_mwms.py
parser.add_argument("--devices", type=int, default=2, help="CPU devices XLA makes in this process")
args = parser.parse_args()

# JAX: the backend is chosen before Keras is first imported, and the CPU devices before JAX starts.
if os.environ.setdefault("KERAS_BACKEND", "jax") != "jax":
    sys.exit(f"KERAS_BACKEND={os.environ['KERAS_BACKEND']!r}: this script runs Keras on JAX; unset it or set it to jax")
FLAG = "--xla_force_host_platform_device_count"
if FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FLAG}={args.devices}".strip()

import keras  # after the environment above: Keras reads KERAS_BACKEND when first imported
import numpy as np

# JAX: one data-parallel mesh over this process's CPU devices; every variable created from now on is replicated.
devices = keras.distribution.list_devices("cpu")
if len(devices) != args.devices:
    sys.exit(f"found {len(devices)} CPU devices, not {args.devices}: XLA_FLAGS sets {FLAG} to another number")
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
replicas = len(devices)

values = (
    data.synthetic_series(args.data_size, seed=args.seed)
    if args.data_size
    else data.load_series()["temperature_f"].to_numpy()
)
splits = data.prepare(values)
x_train, y_train = splits.x_train, splits.y_train
# JAX: the same global batches as train_mwms.py (same seed, whole batches only); Keras splits each among the devices.
GLOBAL_BATCH = args.batch_size * replicas
train = data.to_dataset(x_train, y_train, GLOBAL_BATCH, shuffle=True, seed=args.seed, drop_remainder=True)
# JAX: every batch is split evenly among the devices: the validation windows are cut to a multiple of them (at most
# replicas - 1 windows left out; train_mwms.py's strategy splits its last batch unevenly instead).
n_val = len(splits.x_val) - len(splits.x_val) % replicas
val = data.to_dataset(splits.x_val[:n_val], splits.y_val[:n_val], 1024 * replicas)
steps_per_epoch = len(x_train) // GLOBAL_BATCH


class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """JAX: the rate grows from the single-replica rate to replicas x it over the warm-up (lesson 02)."""

    def __init__(self, base, warmup_steps):
        self.base, self.warmup_steps = base, warmup_steps

    def __call__(self, step):
        ramp = keras.ops.minimum(1.0, keras.ops.cast(step, "float32") / self.warmup_steps)
        return self.base * (1.0 + (replicas - 1) * ramp)


net = model.build_forecaster(width=args.width, depth=args.depth, seed=args.seed)
# JAX: the warm-up as a schedule the optimizer reads at each step (model.fit has no loop of ours to set the rate in).
schedule = WarmUp(args.lr, max(1, int(args.warmup_epochs * steps_per_epoch)))
model.compile_forecaster(net, learning_rate=schedule, optimizer=args.optimizer)
# JAX: where the weights live: each variable's array is on every device of the mesh (replicated).
weight_devices = min(len(v.value.sharding.device_set) for v in net.weights)


class EpochLine(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.steps = None, []

    def on_train_batch_begin(self, batch, logs=None):
        self.t0 = time.perf_counter()
        if self.start is None:
            self.start, self.cpu = self.t0, time.process_time()

    def on_train_batch_end(self, batch, logs=None):  # the logs are Python floats: the step has finished
        self.end, self.cpu_end = time.perf_counter(), time.process_time()
        self.steps.append(self.end - self.t0)

    def on_epoch_end(self, epoch, logs=None):
        logs["samples_per_s"] = steps_per_epoch * GLOBAL_BATCH / (self.end - self.start)
        logs["step_seconds"] = float(np.median(self.steps[1:] or self.steps))
        logs["epoch_seconds"] = self.end - self.start  # training only, validation excluded
        logs["cpu_seconds"] = self.cpu_end - self.cpu  # the CPU time of all this process's threads, over the same span
        print(
            f"epoch {epoch + 1}/{args.epochs}: loss {logs['loss']:.4f} val_loss {logs['val_loss']:.4f} "
            f"({logs['samples_per_s']:.0f} samples/s)",
            flush=True,
        )


history = net.fit(train, validation_data=val, epochs=args.epochs, callbacks=[EpochLine()], verbose=0, shuffle=False)
KEYS = ("loss", "val_loss", "samples_per_s", "step_seconds", "epoch_seconds", "cpu_seconds")
logs = {k: [float(v) for v in history.history[k]] for k in KEYS}  # cpu / epoch seconds: the cores kept busy
print(
    "RESULT "
    + json.dumps(
        {
            "rank": 0,
            "size": 1,  # JAX: one process drives every device
            "backend": keras.backend.backend(),
            "devices": replicas,
            "device_names": [str(d) for d in devices],
            "weight_devices": weight_devices,
            "replicas": replicas,
            **logs,
            "batch": GLOBAL_BATCH,  # examples this process takes per step (all its devices')
            "batch_per_replica": args.batch_size,
            "keras": keras.__version__,
            "weights_checksum": float(sum(np.abs(w).sum() for w in net.get_weights())),
        }
    ),
    flush=True,
)
