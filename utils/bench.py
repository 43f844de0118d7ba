"""Measurements the lessons repeat: Horovod's allreduce over sizes and ranks, and training throughput."""

from __future__ import annotations

import csv
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from utils import envinfo, launch, paths

ALLREDUCE_WORKER = paths.WORKERS / "allreduce_worker.py"
#: Message sizes (bytes) of the allreduce benchmark: full mode, and smoke mode.
FULL_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
SMOKE_SIZES = [4 << 10, 256 << 10, 4 << 20]
#: `measure_allreduce(..., bandwidth=LOOPBACK)`: every rank on this machine's loopback, not on the network lab.
LOOPBACK = "loopback"


def measure_allreduce(
    ranks: Sequence[int],
    sizes: Sequence[int],
    repeats: int,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    bandwidth: str | float | None = LOOPBACK,
    remeasure: int = 2,
) -> list[dict[str, Any]]:
    """Time Horovod's allreduce on each number of ranks (extra environment `env`); one row per (ranks, size).

    `bandwidth` LOOPBACK (the default): every rank on this machine's loopback (`horovodrun -H localhost:N`);
    a rate such as '200mbit' (or None, unshaped): one rank on each of N hosts of the network lab.
    Where another program slowed the small messages so much that the best times of a rank count do not grow with
    size (no line can be fitted to them), that rank count is measured again, at most `remeasure` times, and each
    size keeps its best time over every attempt (its median is the last attempt's)."""
    if not sizes or any(int(s) < 4 for s in sizes):
        raise ValueError(f"sizes must be byte counts of at least 4 (one float32), got {list(sizes)}")
    cpu = envinfo.cpu_info()
    args = ["--mode", "sizes", "--repeats", str(repeats), "--sizes", *map(str, sorted(sizes))]
    rows = []
    for n in ranks:
        start = time.perf_counter()
        these = _allreduce_rows(n, args, timeout, env, bandwidth, cpu)
        for _ in range(remeasure if len(sizes) > 1 else 0):
            if _grows_with_size(these):
                break
            print(
                f"allreduce on {n} ranks: the best times do not grow with size (something slowed the small "
                "messages, such as another program on these cores): measuring again",
                flush=True,
            )
            these = merge_best(these, _allreduce_rows(n, args, timeout, env, bandwidth, cpu))
        rows += these
        link = these[0]["link"] if these else "loopback"
        where = "" if link == "loopback" else f" over {link} links"
        print(
            f"allreduce on {n} ranks{where}: {len(sizes)} sizes measured in {time.perf_counter() - start:.0f} s",
            flush=True,
        )
    return rows


def _grows_with_size(rows: list[dict[str, Any]]) -> bool:
    """Whether a line with a positive slope fits these rows' best times (utils.allreduce_model.fit_line)."""
    from utils import allreduce_model

    try:
        allreduce_model.fit_line([r["bytes"] for r in rows], [r["best_seconds"] for r in rows])
    except ValueError:
        return False
    return True


def merge_best(earlier: list[dict[str, Any]], later: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of one rank count measured twice: each size's best time over both, the later median, the repeats
    added up (bandwidths recomputed from the best time)."""
    best = {r["bytes"]: r for r in earlier}
    out = []
    for r in later:
        before = best.get(r["bytes"])
        merged = dict(r)
        if before is not None:
            merged["best_seconds"] = min(r["best_seconds"], before["best_seconds"])
            merged["repeats"] = r["repeats"] + before["repeats"]
        merged["algbw_GBps"] = merged["bytes"] / merged["best_seconds"] / 1e9
        merged["busbw_GBps"] = merged["algbw_GBps"] * 2 * (merged["np"] - 1) / merged["np"]
        out.append(merged)
    return out


def _allreduce_rows(n, args, timeout, env, bandwidth, cpu) -> list[dict[str, Any]]:
    """One measurement of every size on `n` ranks (see measure_allreduce)."""
    if isinstance(bandwidth, str) and bandwidth == LOOPBACK:
        run = launch.launch_horovodrun(
            ALLREDUCE_WORKER, np=n, args=args, threads=1, timeout=timeout, env=env, stream=False
        )
        link, link_bps = "loopback", float("nan")
    else:
        from utils import netlab

        with netlab.Lab(n, bandwidth) as lab:
            run = lab.launch_horovod(ALLREDUCE_WORKER, args, timeout=timeout, env=env, stream=False)
        link, link_bps = netlab.describe_rate(lab.bandwidth), lab.bandwidth or float("nan")
    rows = []
    for r in run.records():
        algbw = r["bytes"] / r["best_seconds"] / 1e9
        rows.append(
            {
                "np": n,
                "bytes": r["bytes"],
                "seconds": r["seconds"],
                "best_seconds": r["best_seconds"],
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * 2 * (n - 1) / n,
                "repeats": r["repeats"],
                "link": link,
                "link_bps": link_bps,
                "cpu_model": cpu.model,
                "usable_cores": cpu.usable_cores,
            }
        )
    return rows


def write_rows(rows: list[dict[str, Any]], out: Path) -> None:
    """Write measurement rows as CSV (creating the folder)."""
    if not rows:
        raise ValueError(f"no rows to write to {out}: the measurement returned nothing")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def steady_step(step_seconds: Sequence[float]) -> float:
    """Median step time over the epochs after the first (which traces the graph); every epoch if only one."""
    if len(step_seconds) == 0:
        raise ValueError("no step time recorded: the run trained no epoch")
    return float(np.median(list(step_seconds)[1:] or list(step_seconds)))


def synchronous_throughput(records: Sequence[dict[str, Any]]) -> float:
    """Samples per second of ranks that step together: every rank's batch, at the pace of the slowest rank."""
    return sum(r["batch"] for r in records) / max(steady_step(r["step_seconds"]) for r in records)


def independent_throughput(records: Sequence[dict[str, Any]]) -> float:
    """Samples per second of workers that never wait for each other: the sum of their own rates."""
    return sum(r["batch"] / steady_step(r["step_seconds"]) for r in records)


def training_throughput(
    workers: int,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    *,
    independent: bool = False,
    timeout: float = 900,
) -> tuple[float, float]:
    """Samples per second and the slowest process's steady step of one training run on this machine:
    `scripts/train_horovod.py` on `workers` ranks (extra environment `env`), or with `independent=True`
    `scripts/train_single.py` as that many workers side by side that never communicate (the machine's ceiling)."""
    if independent:
        records = launch.launch_tf_workers(
            paths.SCRIPTS / "train_single.py", workers, args=list(args), timeout=timeout, stream=False
        ).records()
        speed = independent_throughput(records)
    else:
        records = launch.launch_horovodrun(
            paths.SCRIPTS / "train_horovod.py", np=workers, args=list(args), env=env, timeout=timeout, stream=False
        ).records()
        speed = synchronous_throughput(records)
    return speed, max(steady_step(r["step_seconds"]) for r in records)


@dataclass
class BestOf:
    """The best throughput seen for each configuration over alternating rounds (other programs share the cores)."""

    speed: dict[str, float] = field(default_factory=dict)
    step: dict[str, float] = field(default_factory=dict)

    def add(self, label: str, samples_per_s: float, step_seconds: float) -> None:
        """Keep this measurement of `label` if it is the fastest so far."""
        if samples_per_s > self.speed.get(label, 0.0):
            self.speed[label], self.step[label] = samples_per_s, step_seconds

    def efficiency(self, label: str, baseline: str, workers: int) -> float:
        """Throughput of `label` over `workers` times that of `baseline` (1.0 is perfect scaling)."""
        for name in (label, baseline):
            if name not in self.speed:
                raise KeyError(f"no measurement named {name!r}; measured: {sorted(self.speed)}")
        return self.speed[label] / (workers * self.speed[baseline])
