"""Peak memory of one training step of the course forecaster, per dtype policy and batch size.

    TF_CPU_ALLOCATOR_USE_BFC=true python scripts/workers/precision_memory.py --policies float32 mixed_bfloat16

TensorFlow counts the bytes its CPU allocator hands out only when that allocator is its BFC allocator,
chosen by the environment variable above before TensorFlow starts: hence a process of its own. For each
policy and batch the script builds the forecaster (float32 output, as the recipe wants), runs one step
to trace it and create the optimizer's state, then measures --steps more steps, resetting the
allocator's peak before each. It reports, counted from just before the model was built: the bytes still
held after the first step (weights, optimizer state, the batch) and the median, least and largest peak of
the measured steps. One RESULT line (JSON). The peak is steady within a process but differs from one
process to the next, so the lesson runs a few copies of this script side by side (memory, unlike time,
does not suffer from sharing cores).
"""

import argparse
import gc
import json
import os

if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() not in ("1", "true"):  # before TensorFlow's import
    raise SystemExit("set TF_CPU_ALLOCATOR_USE_BFC=true: without the BFC allocator TensorFlow counts no CPU memory")

import keras
import numpy as np
import tensorflow as tf

from utils import precision

parser = argparse.ArgumentParser()
parser.add_argument("--policies", nargs="+", default=list(precision.POLICIES))
parser.add_argument("--batches", type=int, nargs="+", default=[1024, 4096])
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--depth", type=int, default=4)
parser.add_argument("--steps", type=int, default=3, help="measured steps per policy and batch")
parser.add_argument(
    "--no-remapping",
    action="store_true",
    help="turn off the graph optimizer's matmul+bias fusion (precision.without_remapping), whose float16 kernel "
    "ran hundreds of times slower than the ops apart on a CPU (lesson 06 measures it)",
)
args = parser.parse_args()
if args.no_remapping:
    precision.without_remapping().__enter__()  # for the whole process
tf.get_logger().setLevel("ERROR")  # no retracing notices: a new model per policy and batch, on purpose
# Several copies may run side by side (utils.launch.launch_tf_workers): each names itself by its TF_CONFIG index.
copy = int(json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0))


def held() -> int:
    return tf.config.experimental.get_memory_info("CPU:0")["current"]


rows = []
for policy in args.policies:
    for batch in args.batches:
        gc.collect()
        start = held()
        net = precision.build_forecaster(policy, width=args.width, depth=args.depth)
        net.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse")  # mixed_float16: a LossScaleOptimizer
        rng = np.random.default_rng(0)
        x = tf.constant(rng.normal(size=(batch, 48)).astype(np.float32))
        y = tf.constant(rng.normal(size=(batch, 24)).astype(np.float32))
        net.train_on_batch(x, y)  # traces the step and creates the optimizer's state
        after_first = held()
        peaks = []
        for _ in range(args.steps):
            tf.config.experimental.reset_memory_stats("CPU:0")
            net.train_on_batch(x, y)
            peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"] - start)
        rows.append(
            {
                "policy": policy,
                "batch": batch,
                "held_bytes": after_first - start,
                "peak_bytes": int(np.median(peaks)),
                "peak_min_bytes": min(peaks),
                "peak_max_bytes": max(peaks),
                "optimizer": type(net.optimizer).__name__,
            }
        )
        print(
            f"{policy}, batch {batch}: peak {np.median(peaks) / 1e6:.1f} MB (median of {len(peaks)} steps)", flush=True
        )
        del net, x, y
        keras.backend.clear_session()
print(
    "RESULT "
    + json.dumps(
        {"rank": copy, "width": args.width, "depth": args.depth, "remapping": not args.no_remapping, "rows": rows}
    ),
    flush=True,
)
