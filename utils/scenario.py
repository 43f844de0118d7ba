"""The 23-hour scenario in numbers: speedup needed, T(N) = compute/N + ring allreduce, workers for a deadline."""

from __future__ import annotations

import math

import numpy as np

from utils.allreduce_model import ring_seconds

HOUR = 3600.0


#: Productivity tiers of waiting for one training run: (upper bound in seconds, tier, what it does to work).
TIERS = (
    (HOUR, "minutes", "try an idea, see the result, try the next: fast and productive"),
    (24 * HOUR, "hours", "from a few ideas a day (a run of an hour or two) down to one (a run of most of a day)"),
    (7 * 24 * HOUR, "days", "run several ideas side by side to keep moving"),
    (30 * 24 * HOUR, "weeks", "progress slows: few new ideas can be tried"),
    (math.inf, "months", "hardly worth starting"),
)


def growth_factor(monthly_growth: float, months: float) -> float:
    """How much the data has grown after `months` at `monthly_growth` (0.05 = 5 % a month, compounded)."""
    if monthly_growth <= -1:
        raise ValueError(f"monthly_growth is a fraction (0.05 = 5 %) above -1, got {monthly_growth}")
    if months < 0:
        raise ValueError(f"months must be at least 0, got {months}")
    return (1.0 + monthly_growth) ** months


def speedup_needed(
    job_hours: float, deadline_hours: float = 1.0, data_growth: float = 1.0, time_exponent: float = 1.0
) -> float:
    """The speedup that brings a job of `job_hours` (today) under the deadline after the data grows by `data_growth`."""
    for name, v in (("job_hours", job_hours), ("deadline_hours", deadline_hours), ("data_growth", data_growth)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    return job_hours * data_growth**time_exponent / deadline_hours


def job_seconds_on_workers(
    n,
    compute_seconds: float,
    steps: float,
    grad_bytes: float,
    link_bytes_per_s: float,
    step_latency: float = 0.0,
    scale_batch: bool = False,
) -> np.ndarray:
    """T(N) = compute/N + steps(N) x ring allreduce(N): the wall time of a synchronous data-parallel job.

    With `scale_batch` False the global batch stays as on one worker: the same `steps`, each split N ways.
    With `scale_batch` True each worker keeps the single-worker batch: the global batch grows N times and
    the job takes steps/N steps (the learning rate must then be scaled, lesson 04).
    """
    n = np.asarray(n, dtype=float)
    if np.any(n < 1):
        raise ValueError("the number of workers must be at least 1")
    if compute_seconds < 0 or steps < 0 or grad_bytes < 0:
        raise ValueError("compute_seconds, steps and grad_bytes must not be negative")
    if link_bytes_per_s <= 0:
        raise ValueError(
            f"link_bytes_per_s must be positive, got {link_bytes_per_s} (commcost.gbit_to_bytes_per_s converts Gb/s)"
        )
    steps_n = steps / n if scale_batch else steps
    return compute_seconds / n + steps_n * ring_seconds(n, grad_bytes, step_latency, link_bytes_per_s)


def workers_needed(
    deadline_seconds: float,
    compute_seconds: float,
    steps: float,
    grad_bytes: float,
    link_bytes_per_s: float,
    step_latency: float = 0.0,
    scale_batch: bool = False,
    max_workers: int = 4096,
) -> int | None:
    """The fewest workers whose T(N) meets the deadline, or None if none up to `max_workers` does."""
    if deadline_seconds <= 0:
        raise ValueError(f"deadline_seconds must be positive, got {deadline_seconds}")
    n = np.arange(1, max_workers + 1)
    t = job_seconds_on_workers(n, compute_seconds, steps, grad_bytes, link_bytes_per_s, step_latency, scale_batch)
    ok = np.flatnonzero(t <= deadline_seconds)
    return int(n[ok[0]]) if ok.size else None


def best_workers(
    compute_seconds: float,
    steps: float,
    grad_bytes: float,
    link_bytes_per_s: float,
    step_latency: float = 0.0,
    scale_batch: bool = False,
    max_workers: int = 4096,
) -> tuple[int, float]:
    """The worker count up to `max_workers` with the shortest T(N), and that T(N) in seconds."""
    n = np.arange(1, max_workers + 1)
    t = job_seconds_on_workers(n, compute_seconds, steps, grad_bytes, link_bytes_per_s, step_latency, scale_batch)
    best = int(np.argmin(t))
    return int(n[best]), float(t[best])


def communication_limit_seconds(steps: float, grad_bytes: float, link_bytes_per_s: float) -> float:
    """steps x 2K/bandwidth: what the allreduces of a fixed-batch job approach as N grows (the N -> infinity limit).

    It is not a floor at small N: at N workers the bandwidth term is steps x 2(N-1)/N x K/bandwidth, half
    the limit at N = 2, and the 2(N-1) latencies of every ring step come on top.
    """
    if link_bytes_per_s <= 0:
        raise ValueError(f"link_bytes_per_s must be positive, got {link_bytes_per_s}")
    return steps * 2.0 * grad_bytes / link_bytes_per_s


#: How `code_change` sorts an added line, tried in this order: (category, pattern searched in the line).
CHANGE_KINDS = (
    ("demonstration", r"die[-_]|KILLED|SIGKILL|\bsignal\b|self\.epoch|\bdatetime\b"),  # datetime: when it was killed
    ("precision", r"# lesson 06|dtype_policy"),  # lesson 06's mixed precision, a hyperparameter
    ("Horovod", r"\bhvd\b|Horovod"),
    ("SageMaker", r"SageMaker|\bjob\.|\bpaths\.|\bSM_"),
)


def code_change(single: str, distributed: str) -> dict[str, list[str]]:
    """The lines `distributed` adds to `single` (blank lines and the module docstring aside), by kind.

    Kinds: "demonstration" (the course's fault-injection lines), "precision" (lesson 06's mixed precision), "Horovod",
    "SageMaker" (job paths and hyperparameters), tried in that order on each line; an added line that names none of
    them (a bracket, an import) belongs to the change around it, counted as Horovod. Also "removed": lines taken out.
    """
    import ast
    import difflib
    import re

    def docstring_lines(text: str) -> set[int]:
        body = ast.parse(text).body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
            return set(range(body[0].lineno - 1, body[0].end_lineno))
        return set()

    old, new = single.splitlines(), distributed.splitlines()
    skip_old, skip_new = docstring_lines(single), docstring_lines(distributed)
    out: dict[str, list[str]] = {kind: [] for kind, _ in CHANGE_KINDS} | {"removed": []}
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        out["removed"] += [old[i] for i in range(i1, i2) if i not in skip_old and old[i].strip()]
        for j in range(j1, j2):
            line = new[j]
            if j in skip_new or not line.strip():
                continue
            kind = next((k for k, pattern in CHANGE_KINDS if re.search(pattern, line)), "Horovod")
            out[kind].append(line)
    return out


def source_lines(text: str) -> int:
    """Lines of a Python file that hold code, docstrings included: neither blank nor comment-only."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def productivity_tier(seconds: float) -> tuple[str, str]:
    """The tier (minutes, hours, days, weeks, months) of waiting `seconds` for a run, and what it means."""
    if not seconds >= 0:
        raise ValueError(f"seconds must be 0 or more, got {seconds}")
    for bound, tier, meaning in TIERS:
        if seconds < bound:
            return tier, meaning
    raise AssertionError("unreachable: the last tier has no bound")
