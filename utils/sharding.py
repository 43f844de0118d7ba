"""What each worker saw under a tf.data AutoShardPolicy: coverage, duplicates, reads, at a glance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def coverage(records: Sequence[dict[str, Any]], total: int) -> list[dict[str, Any]]:
    """One row per policy run: examples each worker got, how many of `total` were seen twice or never, reads."""
    if not records:
        raise ValueError("no worker records: did the sharding run print its RESULT lines?")
    rows = []
    for run in records[0]["runs"]:
        results = [r["runs"][run] for r in records]
        errors = [f"worker {r['rank']}: {res['error']}" for r, res in zip(records, results) if "error" in res]
        if errors:
            rows.append({"policy, files": run, "error": errors[0]})
            continue
        counts = np.zeros(total, dtype=int)
        for res in results:
            np.add.at(counts, np.asarray(res["ids"], dtype=int), 1)
        rows.append(
            {
                "policy, files": run,
                "examples per worker": [len(res["ids"]) for res in results],
                "seen by 2+ workers": int(np.sum(counts > 1)),
                "never seen": int(np.sum(counts == 0)),
                "lines read per worker": [res["lines_read"] for res in results],
            }
        )
    return rows


def owner_map(records: Sequence[dict[str, Any]], run: str, total: int) -> np.ndarray:
    """For each example index: the worker that saw it (-1 never, -2 several workers), under one policy run."""
    owner = np.full(total, -1, dtype=int)
    for r in records:
        res = r["runs"][run]
        if "error" in res:
            continue
        ids = np.asarray(res["ids"], dtype=int)
        owner[ids] = np.where(owner[ids] == -1, r["rank"], -2)
    return owner


def per_batch_counts(records: Sequence[dict[str, Any]], run: str, batch: int) -> np.ndarray:
    """Examples of each global batch (`batch` consecutive indices) that each worker received: (workers, batches)."""
    results = [r["runs"][run] for r in sorted(records, key=lambda r: r["rank"])]
    if any("error" in res for res in results):
        raise ValueError(f"the run {run!r} failed on a worker: it has no examples to count")
    ids = [np.asarray(res["ids"], dtype=int) for res in results]
    batches = max((int(i.max()) // batch + 1 for i in ids if i.size), default=0)
    return np.array([np.bincount(i // batch, minlength=batches) for i in ids])


def same_examples(records: Sequence[dict[str, Any]], run: str, other: str) -> bool:
    """True when every worker received exactly the same examples, in the same order, under both runs."""
    return all(
        "error" not in r["runs"][run] and r["runs"][run].get("ids") == r["runs"][other].get("ids") for r in records
    )
