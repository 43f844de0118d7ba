"""One synchronous training step of a tiny model with MultiWorkerMirroredStrategy.

Start one process per worker, each with a TF_CONFIG naming the cluster and its own index (the
course's launcher does this). Every worker feeds different data, the gradients are all-reduced, and
every worker prints one JSON line starting with RESULT: its loss, and a checksum of its weights,
which must be the same on all workers after the step.
Keras 3's model.fit does not run under this strategy in TF 2.21, so the step is a custom loop.
"""

import json
import os

import tensorflow as tf

LEARNING_RATE = 0.1
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
rank, workers = task["index"], strategy.num_replicas_in_sync

with strategy.scope():
    weights = tf.Variable(tf.zeros([4, 1]), name="w")


# Each worker's own data: a different slice of y = x . [1, 2, 3, 4].
rng = tf.random.Generator.from_seed(rank)
x = rng.normal([8, 4])
y = x @ tf.constant([[1.0], [2.0], [3.0], [4.0]])


@tf.function
def step(x, y):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ weights - y) ** 2)
        grad = tape.gradient(loss, weights)
        # Sum across workers, divide by their number: the average gradient.
        grad = tf.distribute.get_replica_context().all_reduce("SUM", grad) / workers
        weights.assign_sub(LEARNING_RATE * grad)
        return loss

    per_replica = strategy.run(replica_step, args=(x, y))
    return strategy.reduce("MEAN", per_replica, axis=None)


loss = step(x, y)
print(
    "RESULT "
    + json.dumps(
        {
            "rank": rank,
            "workers": workers,
            "mean_loss_before_step": float(loss),
            "weights_after_step": [round(float(v), 6) for v in weights.numpy().ravel()],
        }
    ),
    flush=True,
)
