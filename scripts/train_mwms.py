"""Train the course's forecasting model on several workers with tf.distribute.MultiWorkerMirroredStrategy.

    TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:12346"]}, "task": {"type": "worker", "index": 0}}' \
        python scripts/train_mwms.py --epochs 5 --batch-size 64 --lr 0.001      # and index 1 in a second process

The single-worker script (train_single.py) with the changes marked `# MWMS:`. Keras 3's `model.fit` fails
under this strategy (keras-team/keras#20585), so the loop that `fit` ran is written out: a distributed
dataset, `strategy.run` for one step on every replica, `strategy.reduce` for the metrics. --batch-size is
per replica: the strategy makes one replica per device a worker trains on, so on CPU (one replica per
worker, as here) it is the per-worker batch of train_horovod.py, and a worker with 8 GPUs takes 8 such
batches per step; --lr is the single-replica rate, scaled by the number of replicas after a warm-up. In a SageMaker job the cluster comes from SM_HOSTS and SM_CURRENT_HOST
(utils.job). --precision mixed_bfloat16 builds the model as lesson 06 does (utils.precision.build_forecaster):
bfloat16 computation on GPUs with bfloat16 tensor cores (A100 and later), float32 variables and a float32 output,
and no loss scaling (bfloat16 has float32's range; mixed_float16 is not offered: this loop does not scale the loss).
Prints one line per epoch (the chief) and a line `RESULT {json}` per worker.
"""

import argparse
import hashlib
import json
import os
import signal
import time
from datetime import datetime

import keras
import numpy as np
import tensorflow as tf

from utils import checkpoint, data, job, model, precision, tracking

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
parser.add_argument("--warmup-epochs", type=float, default=1.0)  # MWMS: warm-up of the scaled rate
parser.add_argument("--die-at-epoch", type=int, default=0)  # for the fault-tolerance demonstration
parser.add_argument("--collective", default="AUTO", choices=["AUTO", "RING", "NCCL"])  # MWMS: all-reduce
parser.add_argument("--bytes-per-pack", type=int, default=0)  # MWMS: 0 = one pack of all gradients
parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])  # lesson 06
args = job.parse(parser)  # SageMaker: hyperparameters also come from SM_HPS
paths = job.job_paths(args.checkpoint_dir)  # SageMaker: data and folders of a job

# MWMS: the cluster is described by TF_CONFIG; in a SageMaker job it is built from SM_HOSTS/SM_CURRENT_HOST.
cluster = job.set_tf_config()
# MWMS: create the strategy before any other TensorFlow call: it starts this worker's server and meets the others.
strategy = tf.distribute.MultiWorkerMirroredStrategy(
    communication_options=tf.distribute.experimental.CommunicationOptions(
        implementation=getattr(tf.distribute.experimental.CommunicationImplementation, args.collective),
        bytes_per_pack=args.bytes_per_pack,
    )
)
# MWMS: workers are processes (one per instance); replicas are the devices they train on, all workers' together.
rank, workers, replicas = cluster.index, len(cluster.hosts), strategy.num_replicas_in_sync
chief = rank == 0  # MWMS: worker 0 prints and writes checkpoints
run = tracking.start(args, world_size=workers, logs=chief, kind="mwms")  # MLflow, where MLFLOW_TRACKING_URI is set

values = (
    data.synthetic_series(args.data_size, seed=args.seed)
    if args.data_size
    else data.load_series(paths.data_file)["temperature_f"].to_numpy()
)
splits = data.prepare(values)
x_train, y_train = splits.x_train, splits.y_train
# MWMS: every worker builds the same dataset of global batches (same shuffle seed); the strategy gives
# each worker its part of every batch (sharding by DATA), split again among its replicas. Whole batches
# only: every worker takes the same number of steps.
GLOBAL_BATCH = args.batch_size * replicas
train = strategy.experimental_distribute_dataset(
    data.to_dataset(x_train, y_train, GLOBAL_BATCH, shuffle=True, seed=args.seed, drop_remainder=True)
)
val = strategy.experimental_distribute_dataset(data.to_dataset(splits.x_val, splits.y_val, 1024 * replicas))
steps_per_epoch = len(x_train) // GLOBAL_BATCH

# MWMS: variables created inside the scope are mirrored on every worker and kept identical.
with strategy.scope():
    net = precision.build_forecaster(args.precision, width=args.width, depth=args.depth, seed=args.seed)  # lesson 06
    model.compile_forecaster(net, learning_rate=args.lr, optimizer=args.optimizer)
    optimizer = net.optimizer
    optimizer.build(net.trainable_variables)

initial_epoch, history = 0, []
if args.checkpoint_dir:
    resume = checkpoint.latest(paths.checkpoint_dir)  # the last complete checkpoint, if any
    if resume:  # MWMS: every worker reads the chief's checkpoint into its mirrored variables
        model.restore_state(net, keras.models.load_model(resume.model_path))
        initial_epoch, history = resume.epoch, resume.history
        print(f"resuming after epoch {initial_epoch}", flush=True)
saver = checkpoint.EpochCheckpoint(paths.checkpoint_dir, write=chief, history=history) if args.checkpoint_dir else None
if saver:
    saver.set_model(net)


@tf.function
def train_step(batch):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = model.mse_per_example(y, net(x, training=True))
            # MWMS: average over the GLOBAL batch, so that the gradients summed over replicas are its mean's.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))  # MWMS: all-reduces the gradients
        return loss

    return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)


@tf.function
def val_step(batch):
    def replica_step(x, y):
        per_example = model.mse_per_example(y, net(x, training=False))
        return tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32)

    total, count = strategy.run(replica_step, args=batch)
    return strategy.reduce("SUM", total, axis=None), strategy.reduce("SUM", count, axis=None)


if initial_epoch >= args.epochs:  # a restart after the last checkpoint: the loop below trains nothing
    print(f"every epoch is done ({initial_epoch} of {args.epochs} in the checkpoint): nothing to train", flush=True)
base_lr, warmup_steps = args.lr, max(1, int(args.warmup_epochs * steps_per_epoch))
logs_all = {"loss": [], "val_loss": [], "samples_per_s": [], "step_seconds": [], "epoch_seconds": []}
for epoch in range(initial_epoch, args.epochs):
    start, steps, losses = time.perf_counter(), [], []
    for i, batch in enumerate(train):
        step = epoch * steps_per_epoch + i
        # MWMS: the rate grows from the single-replica rate to replicas x it over the warm-up (lesson 02).
        optimizer.learning_rate.assign(base_lr * (1 + (replicas - 1) * min(1.0, step / warmup_steps)))
        t0 = time.perf_counter()
        losses.append(float(train_step(batch)))
        steps.append(time.perf_counter() - t0)
        if args.die_at_epoch and epoch + 1 == args.die_at_epoch and rank == workers - 1 and i == steps_per_epoch // 2:
            now = datetime.now().isoformat(sep=" ", timespec="milliseconds")  # wall clock
            print(f"KILLED rank {rank} at {now}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # a worker lost in the middle of an epoch
    trained = time.perf_counter() - start  # the epoch's training, validation excluded
    total = count = 0.0
    for batch in val:
        t, c = val_step(batch)
        total, count = total + float(t), count + float(c)
    logs = {
        "loss": float(np.mean(losses)),
        "val_loss": total / count,
        "samples_per_s": steps_per_epoch * GLOBAL_BATCH / trained,
        "step_seconds": float(np.median(steps[1:] or steps)),
        "epoch_seconds": trained,
    }
    for k, v in logs.items():
        logs_all[k].append(v)
    if saver:
        saver.on_epoch_end(epoch, logs)  # MWMS: only the chief writes
    run.epoch(epoch + 1, logs)  # the chief's run only
    if chief:
        print(
            f"epoch {epoch + 1}/{args.epochs}: loss {logs['loss']:.4f} val_loss {logs['val_loss']:.4f} "
            f"({logs['samples_per_s']:.0f} samples/s)",
            flush=True,
        )
if chief and paths.model_dir:  # MWMS/SageMaker: the chief saves the model for deployment
    os.makedirs(paths.model_dir, exist_ok=True)  # SageMaker makes /opt/ml/model; a pod's folder may not exist yet
    net.save(os.path.join(paths.model_dir, "forecaster.keras"))
run.end(ok=True)  # FINISHED in the tracking store (a failure ends it FAILED)
print(
    "RESULT "
    + json.dumps(
        {
            "rank": rank,
            "size": workers,
            "replicas": replicas,
            **logs_all,
            "batch": GLOBAL_BATCH // workers,  # examples this worker takes per step (all its replicas')
            "batch_per_replica": args.batch_size,
            "resumed_after": initial_epoch,
            **({"history": saver.history} if saver else {}),  # every epoch's logs, the resumed ones too
            "weights_checksum": float(sum(np.abs(w).sum() for w in net.get_weights())),  # lesson 07 reads it
            "weights_sha256": hashlib.sha256(b"".join(w.tobytes() for w in net.get_weights())).hexdigest(),
        }
    ),
    flush=True,
)
