"""Horovod Elastic with the course model: training goes on when a worker is lost.

    horovodrun --gloo -np 2 --min-np 1 --host-discovery-script scripts/workers/discover_localhost.sh \
        python scripts/workers/elastic_forecaster.py [--state keras|variables] [--kill-rank 1 --kill-epoch 2]

--state keras uses hvd.elastic.TensorFlowKerasState, written for Keras 2 (it fails on Keras 3);
--state variables keeps the same state as the tf.Variables under the Keras 3 model and optimizer.
Every epoch ends with state.commit(): after a worker is lost, the others roll back to the last commit
and go on with fewer ranks.
"""

import argparse
import json
import os
import signal
import time

import horovod.tensorflow as hvd
import keras
import tensorflow as tf

from utils import data, model

parser = argparse.ArgumentParser()
parser.add_argument("--state", choices=["keras", "variables"], default="variables")
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--kill-rank", type=int, default=1)
parser.add_argument("--kill-epoch", type=int, default=2)
args = parser.parse_args()

hvd.init()
splits = data.prepare(data.load_series()["temperature_f"].to_numpy())
net = model.build_forecaster(width=64, depth=1)
opt = keras.optimizers.Adam(1e-3)
opt.build(net.trainable_variables)
if args.state == "keras":
    state = hvd.elastic.TensorFlowKerasState(net, opt, epoch=0)
else:
    state = hvd.elastic.TensorFlowState(
        variables=[v.value for v in net.variables] + [v.value for v in opt.variables], epoch=0
    )
killed_marker = os.path.join(os.environ.get("ELASTIC_WORKDIR", "."), "killed-once")


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((net(x, training=True) - y) ** 2)
    grads = [hvd.allreduce(g, op=hvd.Average) for g in tape.gradient(loss, net.trainable_variables)]
    opt.apply(grads, net.trainable_variables)
    return loss


@hvd.elastic.run
def train(state):
    while state.epoch < args.epochs:
        # Equal shards for the ranks of this round (the size changes when a worker is lost).
        x, y = data.shard(splits.x_train, splits.y_train, hvd.rank(), hvd.size())
        losses = [step(x[i : i + 128], y[i : i + 128]) for i in range(0, len(x) - 127, 128)]
        loss = float(hvd.allreduce(tf.reduce_mean(losses), op=hvd.Average))
        print(
            "EPOCH "
            + json.dumps(
                {"epoch": state.epoch + 1, "rank": hvd.rank(), "size": hvd.size(), "loss": loss, "time": time.time()}
            ),
            flush=True,
        )
        if state.epoch + 1 == args.kill_epoch and hvd.rank() == args.kill_rank and not os.path.exists(killed_marker):
            open(killed_marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # a worker is lost
        state.epoch += 1
        state.commit()


train(state)
print("RESULT " + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "epochs": state.epoch}), flush=True)
