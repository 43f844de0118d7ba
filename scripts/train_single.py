"""Train the course's forecasting model on one worker.

    python scripts/train_single.py --epochs 5 --batch-size 64 --lr 0.001

Prints one line per epoch and, at the end, a line `RESULT {json}` with the losses and throughput.
Checkpoints after every epoch to --checkpoint-dir and resumes from the last one if it exists; when that
one holds every epoch already, it trains nothing and reports the recorded history.
"""

import argparse
import json
import time

import keras
import numpy as np

from utils import checkpoint, data, model, profiler, tracking

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--optimizer", default="adam")
parser.add_argument("--width", type=int, default=128)
parser.add_argument("--depth", type=int, default=2)
parser.add_argument("--data-size", type=int, default=0, help="hours of synthetic data; 0 = the course dataset")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--checkpoint-dir", default="")
parser.add_argument("--read-latency-ms", type=float, default=0.0)  # lesson 01's slow storage, per window
parser.add_argument("--profile-steps", default="")  # FIRST:LAST batches of the last epoch, traced (utils.profiler)
parser.add_argument("--profile-dir", default="")
args = parser.parse_args()

values = (
    data.synthetic_series(args.data_size, seed=args.seed)
    if args.data_size
    else data.load_series()["temperature_f"].to_numpy()
)
splits = data.prepare(values)
x_train, y_train = splits.x_train, splits.y_train
train = data.to_dataset(
    x_train, y_train, args.batch_size, shuffle=True, seed=args.seed, read_latency_s=args.read_latency_ms / 1000
)
val = data.to_dataset(splits.x_val, splits.y_val, 1024)

net = model.build_forecaster(width=args.width, depth=args.depth, seed=args.seed)
model.compile_forecaster(net, learning_rate=args.lr, optimizer=args.optimizer)

callbacks, initial_epoch, saver = [], 0, None
if args.checkpoint_dir:
    resume = checkpoint.latest(args.checkpoint_dir)  # the last complete checkpoint, if any
    if resume:
        net, initial_epoch = keras.models.load_model(resume.model_path), resume.epoch
        print(f"resuming after epoch {initial_epoch}", flush=True)
    saver = checkpoint.EpochCheckpoint(args.checkpoint_dir, history=resume.history if resume else None)
    callbacks.append(saver)
if args.profile_steps:  # TensorFlow's profiler on a few steps of the last epoch (lesson 04's deep dive)
    first, last = profiler.parse_steps(args.profile_steps)
    where = args.profile_dir or "profile"
    callbacks.append(profiler.profile_callback(first, last, where, args.epochs))

run = tracking.start(args, world_size=1, logs=True, kind="single")  # MLflow, where MLFLOW_TRACKING_URI is set


class EpochLine(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.last = time.perf_counter()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.steps.append(now - self.last)  # one training step (validation comes after the last)
        self.last = now

    def on_epoch_end(self, epoch, logs=None):
        logs["samples_per_s"] = len(x_train) / (self.last - self.start)
        logs["step_seconds"] = float(np.median(self.steps[1:-1] or self.steps))  # full batches only
        print(
            f"epoch {epoch + 1}/{args.epochs}: loss {logs['loss']:.4f} val_loss {logs['val_loss']:.4f} "
            f"({logs['samples_per_s']:.0f} samples/s)",
            flush=True,
        )


logs = {"loss": [], "val_loss": [], "samples_per_s": [], "step_seconds": []}  # this run's epochs
if initial_epoch >= args.epochs:  # a restart after the last checkpoint: nothing is left to train
    print(f"every epoch is done ({initial_epoch} of {args.epochs} in the checkpoint): nothing to train", flush=True)
else:
    history = net.fit(
        train,
        validation_data=val,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        callbacks=callbacks + [EpochLine(), tracking.keras_callback(run)],  # the tracker reads EpochLine's logs
        verbose=0,
        shuffle=False,
    )
    logs = {k: history.history[k] for k in logs}
run.end(ok=True)  # FINISHED in the tracking store (a failure ends it FAILED)
print(
    "RESULT "
    + json.dumps(
        {
            "rank": 0,
            "size": 1,
            **logs,
            "batch": args.batch_size,
            "resumed_after": initial_epoch,
            **({"history": saver.history} if saver else {}),  # every epoch's logs, the resumed ones too
            "weights_checksum": float(sum(np.abs(w).sum() for w in net.get_weights())),
        }
    ),
    flush=True,
)
