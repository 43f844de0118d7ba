"""Train the course's forecasting model on several workers with Horovod.

    horovodrun --gloo -np 2 -H localhost:2 python scripts/train_horovod.py --epochs 5 --batch-size 64 --lr 0.001

The single-worker script (train_single.py) with the changes marked `# Horovod:`. --batch-size is per
rank; --lr is the single-worker rate, scaled by the number of ranks after a warm-up. In a SageMaker
job it reads its data and folders from the SM_* variables (utils.job). Prints one line per epoch
(rank 0) and a line `RESULT {json}` per rank.
"""

import argparse
import json
import os
import signal
import time
from datetime import datetime

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from utils import checkpoint, data, hvd_keras, job, model, profiler, tracking

# Horovod: start, and learn this process's rank among `size` ranks.
hvd.init()
job.check_world_size(hvd.size())  # SageMaker: as many ranks as the job asks for, or stop at once
# Horovod: one GPU per rank on a GPU machine (the one numbered by its rank on this host); on a CPU,
# a fixed number of threads per rank (the launcher sets OMP_NUM_THREADS).
gpus = tf.config.list_physical_devices("GPU")
if gpus:
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
tf.config.threading.set_intra_op_parallelism_threads(int(os.environ.get("OMP_NUM_THREADS", "0")))

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
parser.add_argument("--warmup-epochs", type=float, default=1.0)  # Horovod: warm-up of the scaled rate
parser.add_argument("--die-at-epoch", type=int, default=0)  # for the fault-tolerance demonstration
parser.add_argument("--die-rank", type=int, default=1)
parser.add_argument("--read-latency-ms", type=float, default=0.0)  # lesson 01's slow storage, per window
parser.add_argument("--profile-steps", default="")  # FIRST:LAST batches of the last epoch, traced (utils.profiler)
parser.add_argument("--profile-dir", default="")
args = job.parse(parser)  # SageMaker: hyperparameters also come from SM_HPS
paths = job.job_paths(args.checkpoint_dir)  # SageMaker: data and folders of a job

values = (
    data.synthetic_series(args.data_size, seed=args.seed)
    if args.data_size
    else data.load_series(paths.data_file)["temperature_f"].to_numpy()
)
splits = data.prepare(values)
# Horovod: each rank trains on its own shard of the windows (every size-th one, from its rank). All
# shards have the same length, so every rank takes the same number of steps (and allreduces).
x_train, y_train = data.shard(splits.x_train, splits.y_train, hvd.rank(), hvd.size())
train = data.to_dataset(
    x_train, y_train, args.batch_size, shuffle=True, seed=args.seed, read_latency_s=args.read_latency_ms / 1000
)
# Horovod: validation is sharded too; AverageMetrics below averages the ranks' results.
val = data.to_dataset(*data.shard(splits.x_val, splits.y_val, hvd.rank(), hvd.size()), 1024)

# Horovod: the same model with a training step that averages gradients across ranks.
net = hvd_keras.distributed(model.build_forecaster(width=args.width, depth=args.depth, seed=args.seed))
model.compile_forecaster(net, learning_rate=args.lr, optimizer=args.optimizer)

callbacks, initial_epoch, saver = [], 0, None
if paths.checkpoint_dir:
    resume = checkpoint.latest(paths.checkpoint_dir)  # the last complete checkpoint, if any
    if resume:
        net, initial_epoch = keras.models.load_model(resume.model_path), resume.epoch
        print(f"resuming after epoch {initial_epoch}", flush=True)
    # Horovod: one writer, rank 0
    saver = checkpoint.EpochCheckpoint(
        paths.checkpoint_dir, write=hvd.rank() == 0, history=resume.history if resume else None
    )
    callbacks.append(saver)

steps_per_epoch = int(np.ceil(len(x_train) / args.batch_size))
callbacks = [
    hvd_keras.BroadcastInitialState(root_rank=0),  # Horovod: every rank starts from rank 0's state
    # Horovod: learning rate x size (the global batch is size x larger), reached after a warm-up.
    hvd_keras.WarmupScaledLR(
        args.lr, hvd.size(), int(args.warmup_epochs * steps_per_epoch), initial_step=initial_epoch * steps_per_epoch
    ),
    hvd_keras.AverageMetrics(),  # Horovod: report metrics averaged over the ranks
] + callbacks
if args.profile_steps:  # TensorFlow's profiler on a few steps of the last epoch (lesson 04's deep dive)
    first, last = profiler.parse_steps(args.profile_steps)
    where = os.path.join(args.profile_dir or "profile", f"rank{hvd.rank()}")  # Horovod: one trace per rank
    callbacks.append(profiler.profile_callback(first, last, where, args.epochs))

run = tracking.start(args, world_size=hvd.size(), logs=hvd.rank() == 0, kind="horovod")  # Horovod: rank 0 tracks


class EpochLine(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.start, self.last = epoch + 1, time.perf_counter(), time.perf_counter()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.steps.append(now - self.last)  # one training step (validation comes after the last)
        self.last = now
        if args.die_at_epoch == self.epoch and hvd.rank() == args.die_rank and batch == 1:
            now = datetime.now().isoformat(sep=" ", timespec="milliseconds")  # wall clock, read by lesson 04
            print(f"KILLED rank {hvd.rank()} at {now}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # a lost worker (machine failure), in the middle of an epoch

    def on_epoch_end(self, epoch, logs=None):
        logs["samples_per_s"] = len(x_train) * hvd.size() / (self.last - self.start)  # Horovod: all ranks' samples
        logs["step_seconds"] = float(np.median(self.steps[1:-1] or self.steps))  # full batches only
        if hvd.rank() != 0:  # Horovod: log on rank 0 only
            return
        print(
            f"epoch {epoch + 1}/{args.epochs}: loss {logs['loss']:.4f} val_loss {logs['val_loss']:.4f} "
            f"({logs['samples_per_s']:.0f} samples/s)",
            flush=True,
        )


logs = {"loss": [], "val_loss": [], "samples_per_s": [], "step_seconds": []}  # this run's epochs
if initial_epoch >= args.epochs:  # a restart after the last checkpoint (every rank reads the same one)
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
if hvd.rank() == 0 and paths.model_dir:  # Horovod/SageMaker: rank 0 saves the model for deployment
    os.makedirs(paths.model_dir, exist_ok=True)  # SageMaker makes /opt/ml/model; a pod's folder may not exist yet
    net.save(os.path.join(paths.model_dir, "forecaster.keras"))
run.end(ok=True)  # FINISHED in the tracking store (a failure ends it FAILED)
print(
    "RESULT "
    + json.dumps(
        {
            "rank": hvd.rank(),
            "size": hvd.size(),
            **logs,
            "batch": args.batch_size,
            "resumed_after": initial_epoch,
            **({"history": saver.history} if saver else {}),  # every epoch's logs, the resumed ones too
            "weights_checksum": float(sum(np.abs(w).sum() for w in net.get_weights())),
        }
    ),
    flush=True,
)
