"""Solution of lesson 04's hands-on exercise: the single-worker script made to run under Horovod.

    horovodrun --gloo -np 2 -H localhost:2 python scripts/exercises/horovod_solution.py --epochs 1

Compare it with horovod_todo.py (the exercise): the lines marked `# TODO n` are the ones that change.
It prints one `RESULT {json}` line per process with what the lesson's check observes.
"""

import argparse
import json
import os
import time
from pathlib import Path

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from utils import data, hvd_keras, model

hvd.init()  # TODO 1
gpus = tf.config.list_physical_devices("GPU")  # TODO 2
if gpus:
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
tf.config.threading.set_intra_op_parallelism_threads(int(os.environ.get("OMP_NUM_THREADS", "0")))

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=32, help="per process")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--data-size", type=int, default=24 * 120, help="hours of synthetic data")
parser.add_argument("--out", default="", help="folder to save the trained model in")
args = parser.parse_args()

splits = data.prepare(data.synthetic_series(args.data_size, seed=0))
x_train, y_train = data.shard(splits.x_train, splits.y_train, hvd.rank(), hvd.size())  # TODO 3
train = data.to_dataset(x_train, y_train, args.batch_size)

# Each process starts from its own random weights, as a script without a fixed seed would.
net = model.build_forecaster(width=32, depth=1, seed=os.getpid() % 2**31)
net = hvd_keras.distributed(net)  # TODO 4
model.compile_forecaster(net, learning_rate=args.lr, optimizer="sgd")
callbacks = [hvd_keras.BroadcastInitialState(root_rank=0)]  # TODO 5


# --- What the check observes: leave this part as it is. -------------------------------------------
class Observe(keras.callbacks.Callback):
    """Record the weights when the first step begins (after any broadcast) and the steps taken."""

    def on_train_begin(self, logs=None):
        self.steps, self.first = 0, None

    def on_train_batch_begin(self, batch, logs=None):
        if self.first is None:
            self.first = [w.tolist() for w in self.model.get_weights()]

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1


observe = Observe()
start = time.perf_counter()
net.fit(train, epochs=args.epochs, callbacks=callbacks + [observe], verbose=0, shuffle=False)
initialised = hvd.is_initialized()
rank = hvd.rank() if initialised else int(os.environ.get("HOROVOD_RANK", "0"))  # horovodrun sets HOROVOD_RANK
# ---------------------------------------------------------------------------------------------------

writer = hvd.rank() == 0  # TODO 6
if args.out and writer:
    Path(args.out).mkdir(parents=True, exist_ok=True)
    net.save(Path(args.out) / f"model-from-rank-{rank}.keras")

print(
    "RESULT "
    + json.dumps(
        {
            "rank": rank,
            "initialised": initialised,
            "size": hvd.size() if initialised else 1,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "visible_gpus": len(tf.config.get_visible_devices("GPU")),
            "examples": len(x_train),
            "example_sum": float(np.sum(x_train, dtype=np.float64)),
            "batch": args.batch_size,
            "steps": observe.steps,
            "first_weights": observe.first,
            "weights": [w.tolist() for w in net.get_weights()],
            "seconds": time.perf_counter() - start,
        }
    ),
    flush=True,
)
