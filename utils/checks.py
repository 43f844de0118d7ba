"""Checks for the lessons' exercises: each compares a learner's answer with a value derived in code."""

from __future__ import annotations

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
