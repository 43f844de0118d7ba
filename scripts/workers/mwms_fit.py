"""Keras 3's `model.fit` under MultiWorkerMirroredStrategy, as TensorFlow's multi-worker tutorial writes it.

Start one process per worker with a TF_CONFIG each (the course's launcher does this). In TensorFlow 2.21
with Keras 3 the call fails (keras-team/keras#20585); the worker prints the error's type and message
on a line `RESULT {json}` and exits 0, so that the lesson can show the real error.
"""

import json
import re

import tensorflow as tf

from utils import data, job, model

cluster = job.set_tf_config()
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    net = model.compile_forecaster(model.build_forecaster(seed=0))

x, y = data.make_windows(data.synthetic_series(2000, seed=0) / 50.0, 48, 24)
dataset = data.to_dataset(x, y, 64 * strategy.num_replicas_in_sync)
try:
    history = net.fit(dataset, epochs=1, verbose=0)
    outcome = {"fit": "ran", "loss": float(history.history["loss"][-1])}
except Exception as exc:  # the lesson shows whatever fit raises
    # The message prints a whole batch of values inside PerReplica:{...}; keep its words, not the numbers.
    message = re.sub(r"\(PerReplica:\{.*\}\)", "(PerReplica:{...})", str(exc), flags=re.S)
    outcome = {"fit": "failed", "error": type(exc).__name__, "message": " ".join(message.split())}
print("RESULT " + json.dumps({"rank": cluster.index, **outcome}), flush=True)
