"""Solution of lesson 05's hands-on exercise: the single-worker loop made to run under MultiWorkerMirroredStrategy.

    python scripts/exercises/mwms_solution.py --epochs 2      (one process per worker, each with a TF_CONFIG)

Compare it with mwms_todo.py (the exercise): the lines marked `# TODO n` are the ones that change.
It prints one `RESULT {json}` line per worker with what the lesson's check verifies.
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

strategy = tf.distribute.MultiWorkerMirroredStrategy()  # TODO 1
workers = strategy.num_replicas_in_sync
GLOBAL_BATCH = args.batch_size * workers  # TODO 2

splits = data.prepare(data.synthetic_series(3000, seed=0))
dataset = data.to_dataset(splits.x_train, splits.y_train, GLOBAL_BATCH, shuffle=True, seed=0, drop_remainder=True)
dataset = strategy.experimental_distribute_dataset(dataset)  # TODO 2

with strategy.scope():  # TODO 3
    net = model.build_forecaster(width=32, depth=1, seed=0)
    optimizer = keras.optimizers.SGD(args.lr)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        per_example = model.mse_per_example(y, net(x, training=True))
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)  # TODO 4
    grads = tape.gradient(loss, net.trainable_variables)
    optimizer.apply_gradients(zip(grads, net.trainable_variables))
    return loss


for epoch in range(args.epochs):
    losses = []
    for x, y in dataset:
        per_replica = strategy.run(train_step, args=(x, y))  # TODO 5
        losses.append(float(strategy.reduce("SUM", per_replica, axis=None)))  # TODO 5
    print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}", flush=True)

rank = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]  # this worker's number
chief = strategy.cluster_resolver.task_id == 0  # TODO 6
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
