"""Times Horovod allreduce on this rank; rank 0 prints one RESULT line per measurement.

Started by tools/bench_allreduce.py through horovodrun. Modes:
  --mode sizes   one float32 tensor of each size in --sizes (bytes), --repeats timed calls each
  --mode fusion  --tensors small tensors of --tensor-bytes each: one allreduce op after another
                 (eager), all of them inside one tf.function (Horovod may fuse them), and one
                 grouped_allreduce call
"""

import argparse
import json
import time

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--mode", choices=["sizes", "fusion"], default="sizes")
parser.add_argument("--sizes", type=int, nargs="*", default=[4096])
parser.add_argument("--repeats", type=int, default=10)
parser.add_argument("--tensors", type=int, default=64)
parser.add_argument("--tensor-bytes", type=int, default=16384)
args = parser.parse_args()

hvd.init()


def barrier():
    hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name="barrier")


def timed(fn, repeats):
    """Median seconds of `repeats` calls, after one warm-up call, every rank starting together."""
    fn()
    times = []
    for _ in range(repeats):
        barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    # The slowest rank decides when an allreduce is complete everywhere: call by call, the largest time.
    slowest = hvd.allreduce(tf.constant(times, dtype=tf.float64), op=hvd.Max, name=f"tmax{len(times)}").numpy()
    return float(np.median(slowest)), float(np.min(slowest))


def emit(record):
    if hvd.rank() == 0:
        print("RESULT " + json.dumps({"rank": 0, "np": hvd.size(), **record}), flush=True)


if args.mode == "sizes":
    # Warm up once for all sizes: the first calls set up connections, caches and the fusion buffer.
    for _ in range(20):
        barrier()
    hvd.allreduce(tf.zeros([max(args.sizes) // 4]), op=hvd.Sum, name="warmup_largest").numpy()
    for nbytes in args.sizes:
        x = tf.random.uniform([max(nbytes // 4, 1)], dtype=tf.float32)
        check = hvd.allreduce(tf.ones([4]), op=hvd.Sum).numpy()
        assert np.all(check == hvd.size()), check
        # Small messages are cheap and noisy (a cycle of Horovod's background thread, the scheduler): time
        # more of them; the middle sizes still take milliseconds, so a busy machine can spoil a few calls;
        # the largest take long and vary least.
        repeats = (
            10 * args.repeats
            if nbytes <= (1 << 20)
            else 3 * args.repeats
            if nbytes <= (1 << 24)
            else max(3, args.repeats // 2)
        )
        seconds, best = timed(
            lambda x=x, nbytes=nbytes: hvd.allreduce(x, op=hvd.Sum, name=f"t{nbytes}").numpy(), repeats
        )
        emit({"mode": "sizes", "bytes": nbytes, "seconds": seconds, "best_seconds": best, "repeats": repeats})
else:
    n = max(args.tensor_bytes // 4, 1)
    tensors = [tf.random.uniform([n]) for _ in range(args.tensors)]

    def eager_one_by_one():
        for i, t in enumerate(tensors):
            hvd.allreduce(t, op=hvd.Sum, name=f"e{i}").numpy()

    @tf.function
    def many_ops_in_one_graph(ts):
        return [hvd.allreduce(t, op=hvd.Sum, name=f"g{i}") for i, t in enumerate(ts)]

    def grouped():
        [t.numpy() for t in hvd.grouped_allreduce(tensors, op=hvd.Sum)]

    for name, fn in (
        ("eager, one op at a time", eager_one_by_one),
        ("tf.function, all ops at once", lambda: [t.numpy() for t in many_ops_in_one_graph(tensors)]),
        ("grouped_allreduce", grouped),
    ):
        seconds, best = timed(fn, args.repeats)
        emit(
            {
                "mode": "fusion",
                "variant": name,
                "tensors": args.tensors,
                "tensor_bytes": args.tensor_bytes,
                "seconds": seconds,
                "best_seconds": best,
            }
        )
