"""Train the course's forecasting model asynchronously with ParameterServerStrategy: the coordinator.

    python scripts/train_ps.py --epochs 5 --batch-size 64 --lr 0.001   (with TF_CONFIG naming chief, workers, ps)

The variables live on the parameter servers; the coordinator (this process, the "chief") schedules
training steps on whichever worker is free (`ClusterCoordinator.schedule`); each worker reads the
variables, computes a gradient on its own batch (each keeps its own share of the shuffled batches) and
applies it to the parameter servers without waiting for the others. Keras 3's `model.fit` does not
support this strategy (--try-fit shows its error), so the loop is written out. Prints one line per epoch
and one `RESULT {json}` line, which also says how many steps each worker ran and the first batches it
trained on (with --try-fit, first a line `FIT {json}` saying what `model.fit` did).
"""

import argparse
import json
import time

import numpy as np
import tensorflow as tf

from utils import data, model, tracking

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--width", type=int, default=128)
parser.add_argument("--depth", type=int, default=2)
parser.add_argument("--data-size", type=int, default=0, help="hours of synthetic data; 0 = the course dataset")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--try-fit", action="store_true", help="first call model.fit, and print what it did")
args = parser.parse_args()

# More than one inter-op thread: with one, the coordinator's scheduling can wait on itself and hang.
tf.config.threading.set_inter_op_parallelism_threads(4)
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
WORKERS = resolver.cluster_spec().num_tasks("worker")

values = (
    data.synthetic_series(args.data_size, seed=args.seed)
    if args.data_size
    else data.load_series()["temperature_f"].to_numpy()
)
splits = data.prepare(values)
x_train, y_train = splits.x_train, splits.y_train
steps_per_epoch = len(x_train) // args.batch_size  # steps of one batch each, as on one worker

with strategy.scope():
    net = model.compile_forecaster(
        model.build_forecaster(width=args.width, depth=args.depth, seed=args.seed), learning_rate=args.lr
    )
    optimizer = net.optimizer
    optimizer.build(net.trainable_variables)

if args.try_fit:
    try:
        net.fit(
            data.to_dataset(x_train, y_train, args.batch_size), epochs=1, steps_per_epoch=2, verbose=0, shuffle=False
        )
        outcome = {"fit": "ran"}
    except Exception as exc:  # the lesson shows whatever fit raises
        outcome = {"fit": "failed", "error": type(exc).__name__, "message": " ".join(str(exc).split())[:400]}
    print("FIT " + json.dumps(outcome), flush=True)


def dataset_fn():
    # Every worker builds the same shuffled batches and keeps every W-th one, from its own index: the workers
    # train on different batches. The function is traced once, on the coordinator, and the same graph runs on
    # every worker, so the worker's index is read on the worker. (The strategy's InputContext cannot tell
    # the workers apart here: it reports one input pipeline, id 0, on each.)
    worker = tf.distribute.coordinator.experimental_get_current_worker_index()
    seed = int(np.random.SeedSequence(args.seed).generate_state(1)[0])
    batches = data.to_dataset(x_train, y_train, args.batch_size, shuffle=True, seed=seed)
    return batches.shard(WORKERS, worker).repeat()


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def train_step(it):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model.mse_per_example(y, net(x, training=True)))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))  # straight to the parameter servers
        return loss

    x, y = next(it)
    # Which worker ran the step, and a fingerprint of its batch (the sum of its targets): the lesson checks
    # from these that the workers did not train on the same batches.
    worker = tf.distribute.coordinator.experimental_get_current_worker_index()
    return strategy.run(replica_step, args=(x, y)), worker, tf.reduce_sum(y)


logs = {"val_loss": [], "train_seconds": [], "steps_per_s": [], "loss": []}
run = tracking.start(args, world_size=WORKERS, logs=True, kind="parameter server")  # the coordinator's run
trained = 0.0  # seconds spent training, validation excluded
batches: dict[int, list[float]] = {}  # worker index -> fingerprints of the batches it trained on, in order
for epoch in range(args.epochs):
    t0 = time.perf_counter()
    results = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(steps_per_epoch)]
    coordinator.join()  # every scheduled step has run on some worker
    seconds = time.perf_counter() - t0
    trained += seconds
    val_loss = model.mse(net(splits.x_val, training=False).numpy(), splits.y_val)  # variables read from the ps
    fetched = [r.fetch() for r in results]  # (loss, worker, batch fingerprint) of each step, in schedule order
    logs["loss"].append(float(np.mean([loss for loss, _, _ in fetched])))
    for _, worker, fingerprint in fetched:  # a worker runs its steps one at a time, in the order scheduled
        batches.setdefault(int(worker), []).append(float(fingerprint))
    logs["val_loss"].append(val_loss)
    logs["train_seconds"].append(trained)
    logs["steps_per_s"].append(steps_per_epoch / seconds)
    samples_per_s = steps_per_epoch * args.batch_size / seconds
    run.epoch(epoch + 1, {"loss": logs["loss"][-1], "val_loss": val_loss, "samples_per_s": samples_per_s})
    print(
        f"epoch {epoch + 1}/{args.epochs}: loss {logs['loss'][-1]:.4f} val_loss {val_loss:.4f} "
        f"({steps_per_epoch / seconds:.0f} steps/s)",
        flush=True,
    )
run.end(ok=True)
print(
    "RESULT "
    + json.dumps(
        {
            "rank": 0,
            "batch": args.batch_size,
            "steps_per_epoch": steps_per_epoch,
            **logs,
            "steps_by_worker": {w: len(b) for w, b in sorted(batches.items())},
            "first_batches": {w: b[:8] for w, b in sorted(batches.items())},  # 8 fingerprints per worker
        }
    ),
    flush=True,
)
