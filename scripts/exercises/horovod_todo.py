"""Lesson 04's hands-on exercise: turn this single-worker training script into a Horovod one.

    horovodrun --gloo -np 2 -H localhost:2 python scripts/exercises/horovod_todo.py --epochs 1

It is scripts/train_single.py, trimmed to what the exercise needs. As it is, every process trains on its
own: the lines marked `# TODO n` are the ones to change (scripts/train_horovod.py shows every change, with
its reason). Edit them, then run the lesson's check: it launches this file on 2 ranks and says which TODO
is still wrong. The last lines print one `RESULT {json}` line per process with what the check observes;
leave them as they are.
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

from utils import data, hvd_keras, model  # noqa: F401 (hvd_keras: for TODO 4 and 5)

# TODO 1: initialise Horovod, so that each process learns its rank and the number of ranks

# TODO 2: pin this process: on a GPU machine, make only the GPU numbered by its local rank visible;
# on a CPU, use OMP_NUM_THREADS threads (tf.config.threading.set_intra_op_parallelism_threads)

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=32, help="per process")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--data-size", type=int, default=24 * 120, help="hours of synthetic data")
parser.add_argument("--out", default="", help="folder to save the trained model in")
args = parser.parse_args()

splits = data.prepare(data.synthetic_series(args.data_size, seed=0))
x_train, y_train = splits.x_train, splits.y_train  # TODO 3: this process's equal share of the windows
train = data.to_dataset(x_train, y_train, args.batch_size)

# Each process starts from its own random weights, as a script without a fixed seed would.
net = model.build_forecaster(width=32, depth=1, seed=os.getpid() % 2**31)
# TODO 4: give the model a training step that averages the gradients over the ranks
model.compile_forecaster(net, learning_rate=args.lr, optimizer="sgd")
callbacks = []  # TODO 5: start every rank from rank 0's weights (a callback that broadcasts them)


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

writer = True  # TODO 6: only rank 0 writes the model
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
