"""Checks for the lessons' exercises: each compares a learner's answer with a value derived in code."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np


def report(exercise: str, answer: Any, expected: Any, *, rel_tol: float = 1e-6, hint: str = "") -> bool:
    """Print whether `answer` matches `expected` (numbers within `rel_tol`); return True if it does."""
    if answer is None:
        print(f"[{exercise}] not answered yet: replace None with your answer and run the cell again.")
        return False
    try:
        ok = bool(
            np.allclose(np.asarray(answer, dtype=float), np.asarray(expected, dtype=float), rtol=rel_tol, atol=0.0)
        ) and np.shape(answer) == np.shape(expected)
    except (TypeError, ValueError):
        ok = answer == expected
    shown = answer.item() if isinstance(answer, np.generic) else answer  # 0.25, not np.float64(0.25)
    if ok:
        print(f"[{exercise}] correct: {shown!r}")
    else:
        print(f"[{exercise}] not quite: you gave {shown!r}." + (f" Hint: {hint}" if hint else ""))
    return ok


def allreduce_sum_of_ranks(n_ranks: int) -> float:
    """What each element of allreduce(Sum) gives when rank r contributes r + 1: n(n+1)/2."""
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be at least 1, got {n_ranks}")
    return n_ranks * (n_ranks + 1) / 2


def check_allreduce_sum(n_ranks: int, answer: float | None) -> bool:
    """Exercise: the value every rank holds after summing [rank + 1] over `n_ranks` ranks."""
    return report(
        f"allreduce sum, {n_ranks} ranks",
        answer,
        allreduce_sum_of_ranks(n_ranks),
        hint="rank r sends r + 1, so the sum is 1 + 2 + ... + n.",
    )


def check_allreduce_average(n_ranks: int, answer: float | None) -> bool:
    """Exercise: the value every rank holds after averaging [rank + 1] over `n_ranks` ranks."""
    return report(
        f"allreduce average, {n_ranks} ranks",
        answer,
        allreduce_sum_of_ranks(n_ranks) / n_ranks,
        hint="the average is the sum divided by the number of ranks.",
    )


def check_global_batch(per_worker_batch: int, workers: int, answer: int | None) -> bool:
    """Exercise: the global batch of synchronous data-parallel training."""
    return report(
        "global batch", answer, per_worker_batch * workers, hint="every worker processes its own batch in each step."
    )


def restart_after_failure(failed_during_epoch: int, checkpoint_every: int = 1) -> tuple[int, int]:
    """(first epoch the restarted job trains, epochs of work lost) when checkpoints follow every k-th epoch."""
    if failed_during_epoch < 1 or checkpoint_every < 1:
        raise ValueError("epochs count from 1 and checkpoint_every must be at least 1")
    last_checkpoint = (failed_during_epoch - 1) // checkpoint_every * checkpoint_every
    return last_checkpoint + 1, failed_during_epoch - last_checkpoint


def check_restart(failed_during_epoch: int, checkpoint_every: int, first_epoch: int | None, lost: int | None) -> bool:
    """Exercise: where a restarted job resumes and how many epochs of work it redoes."""
    want_first, want_lost = restart_after_failure(failed_during_epoch, checkpoint_every)
    a = report(
        "first epoch after restart",
        first_epoch,
        want_first,
        hint=f"the last checkpoint is the last multiple of {checkpoint_every} before the failed epoch",
    )
    b = report(
        "epochs of work lost", lost, want_lost, hint="the epochs after the last checkpoint, the failed one included"
    )
    return a and b


#: The per-worker batch, workers and optimizer settings the distributed-script checks run with.
EXERCISE_BATCH, EXERCISE_WORKERS = 32, 2
_REFERENCE_WEIGHTS: dict[tuple, list] = {}


def _weights_close(a: list, b: list, tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all(
        np.shape(x) == np.shape(y) and np.allclose(x, y, rtol=tol, atol=tol) for x, y in zip(a, b)
    )


def check_mwms_script(script: str | Path, reference: str | Path | None = None, epochs: int = 1) -> bool:
    """Launch a learner's MultiWorkerMirroredStrategy script on 2 workers; say which TODO is wrong, if any.

    The reference is the same training on ONE worker with the global batch (SGD, same data and order):
    data parallelism done right gives the same weights.
    """
    import tempfile

    from utils import launch, paths

    script = Path(script)
    reference = Path(reference) if reference else paths.SCRIPTS / "exercises" / "mwms_solution.py"
    out = Path(tempfile.mkdtemp(prefix="mwms-check-"))
    args = ["--epochs", str(epochs), "--out", str(out)]
    try:
        run = launch.launch_tf_workers(
            script, EXERCISE_WORKERS, args=args + ["--batch-size", str(EXERCISE_BATCH)], timeout=300, stream=False
        )
    except launch.WorkerError as err:
        print(f"[MWMS script] the script failed on {EXERCISE_WORKERS} workers: {err.reason}.\n{str(err)[-1500:]}")
        return False
    recs = run.records()
    key = (str(reference), reference.stat().st_mtime, epochs)
    if key not in _REFERENCE_WEIGHTS:  # one worker, global batch: computed once per session
        one = launch.launch_tf_workers(
            reference,
            1,
            args=["--epochs", str(epochs), "--batch-size", str(EXERCISE_BATCH * EXERCISE_WORKERS)],
            timeout=300,
            stream=False,
        )
        _REFERENCE_WEIGHTS[key] = one.records()[0]["weights"]
    expected = _REFERENCE_WEIGHTS[key]
    saved = sorted(p.name for p in out.glob("*.keras"))
    shutil.rmtree(out, ignore_errors=True)
    problems = []
    if len(recs) != EXERCISE_WORKERS or any(r["replicas"] != EXERCISE_WORKERS for r in recs):
        problems.append(
            f"TODO 1: each worker should see {EXERCISE_WORKERS} replicas, they see "
            f"{[r['replicas'] for r in recs]}: create tf.distribute.MultiWorkerMirroredStrategy()"
        )
    elif any(r["global_batch"] != EXERCISE_BATCH * EXERCISE_WORKERS for r in recs):
        problems.append(
            f"TODO 2: the global batch should be {EXERCISE_BATCH} x {EXERCISE_WORKERS} = "
            f"{EXERCISE_BATCH * EXERCISE_WORKERS}, it is {recs[0]['global_batch']}"
        )
    elif not _weights_close(recs[0]["weights"], recs[1]["weights"], 1e-6):
        problems.append(
            "TODO 3 or 5: the workers end with different weights: create the model and optimizer "
            "inside strategy.scope(), and run the step with strategy.run"
        )
    elif not _weights_close(recs[0]["weights"], expected):
        problems.append(
            "TODO 2 or 4: the workers agree, but not with one worker trained on the global batch: "
            "distribute the dataset (each worker gets half of every batch) and average the loss over "
            "the GLOBAL batch (tf.nn.compute_average_loss)"
        )
    if saved != ["model-from-worker-0.keras"]:
        problems.append(f"TODO 6: only worker 0 should save the model; saved: {saved or 'nothing'}")
    for p in problems:
        print(f"[MWMS script] not yet: {p}")
    if not problems:
        print(
            f"[MWMS script] correct: {EXERCISE_WORKERS} workers with identical weights, equal to one worker "
            f"trained on the global batch of {EXERCISE_BATCH * EXERCISE_WORKERS}; only worker 0 saved the model."
        )
    return not problems
