"""Lesson 05's hands-on exercise: make this single-worker training loop run under MultiWorkerMirroredStrategy.

    python scripts/exercises/mwms_todo.py --epochs 2      (one process per worker, each with a TF_CONFIG)

As it is, every process trains on its own: the lines marked `# TODO n` are the ones to change. Edit them,
then run the lesson's check: it launches this file on 2 workers and says which TODO is still wrong.
It prints one `RESULT {json}` line per worker with what the check verifies.
"""

import argparse
import json
import os
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from utils import data, model

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=32, help="per worker")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--out", default="", help="folder to save the trained model in")
args = parser.parse_args()

strategy = tf.distribute.get_strategy()  # TODO 1: the multi-worker strategy (it reads TF_CONFIG)
workers = strategy.num_replicas_in_sync
GLOBAL_BATCH = args.batch_size  # TODO 2: the batch of all workers together

splits = data.prepare(data.synthetic_series(3000, seed=0))
dataset = data.to_dataset(splits.x_train, splits.y_train, GLOBAL_BATCH, shuffle=True, seed=0, drop_remainder=True)
# TODO 2: let the strategy give each worker its part of every global batch

# TODO 3: variables created here must be mirrored on every worker
net = model.build_forecaster(width=32, depth=1, seed=0)
optimizer = keras.optimizers.SGD(args.lr)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        per_example = model.mse_per_example(y, net(x, training=True))
        loss = tf.reduce_mean(per_example)  # TODO 4: the mean over the GLOBAL batch
    grads = tape.gradient(loss, net.trainable_variables)
    optimizer.apply_gradients(zip(grads, net.trainable_variables))
    return loss


for epoch in range(args.epochs):
    losses = []
    for x, y in dataset:
        loss = train_step(x, y)  # TODO 5: run the step on every replica ...
        losses.append(float(loss))  # TODO 5: ... and add up the replicas' losses
    print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}", flush=True)

rank = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]  # this worker's number
chief = True  # TODO 6: only the chief (worker 0) writes the model
if args.out and chief:
    Path(args.out).mkdir(parents=True, exist_ok=True)
    net.save(Path(args.out) / f"model-from-worker-{rank}.keras")
weights = [w.tolist() for w in net.get_weights()]
print(
    "RESULT "
    + json.dumps(
        {
            "rank": rank,
            "replicas": workers,
            "global_batch": GLOBAL_BATCH,
            "weights": weights,
            "loss": float(np.mean(losses)),
        }
    ),
    flush=True,
)
