"""Which examples each MultiWorkerMirroredStrategy worker sees under each `AutoShardPolicy`.

    python scripts/workers/shard_policies.py --files DIR_OF_FILES --one-file DIR_OF_ONE_FILE   (one process per worker)
    python scripts/workers/shard_policies.py ... --runs AUTO:one                             (only that run)

Every line of the files is one hour of the course series, starting with its index. For each policy the
worker builds `TextLineDataset(files) -> parse -> batch`, lets the strategy distribute it, and records
the indices it received in one epoch and how many lines it read from the files (a counter placed
before the strategy's shard). It prints one `RESULT {json}` line with both per policy.
"""

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from utils import job

parser = argparse.ArgumentParser()
parser.add_argument("--files", type=Path, required=True, help="folder of .csv files, one example per line")
parser.add_argument("--one-file", type=Path, required=True, help="folder with a single .csv file")
parser.add_argument("--batch", type=int, default=240, help="global batch")
# A policy that fails (too few files) breaks the workers' collectives for what follows: at most one such run, last.
parser.add_argument(
    "--runs",
    nargs="+",
    default=["OFF:files", "FILE:files", "DATA:files", "AUTO:files", "DATA:one", "FILE:one"],
    help="POLICY:files or POLICY:one (the folder of --files or of --one-file), run in this order",
)
args = parser.parse_args()

cluster = job.set_tf_config()
strategy = tf.distribute.MultiWorkerMirroredStrategy()
Policy = tf.data.experimental.AutoShardPolicy


def seen(folder: Path, policy: str) -> dict:
    """Indices this worker received in one epoch, and lines it read, under `policy`."""
    read = tf.Variable(0, dtype=tf.int64)  # a local counter, outside the strategy's scope

    def count(line):
        read.assign_add(1)
        return line

    files = sorted(str(p) for p in folder.glob("*.csv"))
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TextLineDataset, cycle_length=1)
    ds = ds.map(count).map(lambda line: tf.strings.to_number(tf.strings.split(line, ",")[0], tf.int64))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(Policy, policy)
    ds = ds.batch(args.batch).with_options(options)
    try:
        ids = []
        for batch in strategy.experimental_distribute_dataset(ds):
            ids += np.asarray(strategy.experimental_local_results(batch)[0]).tolist()
        return {"ids": ids, "lines_read": int(read.numpy()), "files": len(files)}
    except Exception as exc:  # the lesson shows what a policy that cannot shard says
        message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", " ".join(str(exc).split()))  # TensorFlow's op name
        if len(message) > 400:  # whole sentences only
            message = message[: message.rfind(". ", 0, 400) + 1] or message[:400]
        return {"error": f"{type(exc).__name__}: {message}", "files": len(files)}


plan = []
for item in args.runs:
    policy, _, which = item.partition(":")
    if not hasattr(Policy, policy) or which not in ("files", "one"):
        raise SystemExit(
            f"--runs takes POLICY:files or POLICY:one with POLICY one of OFF, FILE, DATA, AUTO; got {item!r}"
        )
    plan.append((policy, args.files if which == "files" else args.one_file))
runs = {}
for p, d in plan:
    t0 = time.perf_counter()
    runs[f"{p}, {d.name}"] = {**seen(d, p), "seconds": round(time.perf_counter() - t0, 2)}
    outcome = "failed" if "error" in runs[f"{p}, {d.name}"] else "read"
    print(f"{p} on {d.name}: {outcome} in {runs[f'{p}, {d.name}']['seconds']} s", flush=True)
print(
    "RESULT "
    + json.dumps({"rank": cluster.index, "workers": strategy.num_replicas_in_sync, "batch": args.batch, "runs": runs}),
    flush=True,
)
