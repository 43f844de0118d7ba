"""Synchronous data-parallel training with one slow worker: does everyone wait for it?

    horovodrun --gloo -np 2 -H localhost:2 python scripts/workers/straggler.py --delays-ms 0 50 100

Every rank trains the course forecaster on its own shard with averaged gradients (Horovod allreduce).
For each delay D, the rank `--slow-rank` sleeps D ms in every step before the allreduce, as a slower
GPU or a busy host would. Each rank times, per step: its own work (compute, plus the sleep on the slow
rank), the wait inside the allreduce, and the whole step. Each rank prints one RESULT line (JSON).
"""

import argparse
import json
import time

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from utils import data, model

parser = argparse.ArgumentParser()
parser.add_argument("--delays-ms", type=float, nargs="+", default=[0.0, 50.0])
parser.add_argument("--steps", type=int, default=20, help="timed steps per delay")
parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each delay")
parser.add_argument("--slow-rank", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=64, help="per rank")
args = parser.parse_args()

hvd.init()
if not 0 <= args.slow_rank < hvd.size():
    raise SystemExit(f"--slow-rank {args.slow_rank} is not a rank of this run (0..{hvd.size() - 1})")

splits = data.prepare(data.synthetic_series(24 * 60, seed=0))
x, y = data.shard(splits.x_train, splits.y_train, hvd.rank(), hvd.size())  # equal shards: equal steps
net = model.build_forecaster(seed=0)
opt = keras.optimizers.SGD(learning_rate=0.01)
opt.build(net.trainable_variables)
variables = net.trainable_variables
hvd.broadcast_variables([v.value for v in variables], root_rank=0)


@tf.function
def local_gradients(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(net(xb, training=True) - yb))
    return loss, tape.gradient(loss, variables)


def batches():
    rng = np.random.default_rng(hvd.rank())
    while True:
        idx = rng.integers(0, len(x), args.batch_size)
        yield tf.constant(x[idx]), tf.constant(y[idx])


stream = batches()
records = []
for delay in args.delays_ms:
    work, wait, step = [], [], []
    for i in range(args.warmup + args.steps):
        xb, yb = next(stream)
        t0 = time.perf_counter()
        _, grads = local_gradients(xb, yb)
        grads[0].numpy()  # make sure the compute has finished before the clock reads it
        if hvd.rank() == args.slow_rank and delay > 0:
            time.sleep(delay / 1000)
        t1 = time.perf_counter()
        grads = hvd.grouped_allreduce(grads, op=hvd.Average)  # synchronous: waits for every rank
        opt.apply(grads, variables)
        variables[0].numpy()
        t2 = time.perf_counter()
        if i >= args.warmup:
            work.append(t1 - t0)
            wait.append(t2 - t1)
            step.append(t2 - t0)
    records.append(
        {
            "delay_ms": delay,
            "work_ms": 1000 * float(np.median(work)),
            "allreduce_ms": 1000 * float(np.median(wait)),
            "step_ms": 1000 * float(np.median(step)),
        }
    )
    print(
        f"rank {hvd.rank()}: delay {delay:g} ms on rank {args.slow_rank}: median step {records[-1]['step_ms']:.1f} ms",
        flush=True,
    )
checksum = float(sum(float(tf.reduce_sum(v)) for v in variables))
print(
    "RESULT "
    + json.dumps(
        {
            "rank": hvd.rank(),
            "size": hvd.size(),
            "slow_rank": args.slow_rank,
            "steps": args.steps,
            "per_delay": records,
            "weights_checksum": checksum,
        }
    ),
    flush=True,
)
