"""Measurements the lessons repeat: Horovod's allreduce over sizes and ranks, and training throughput."""

from __future__ import annotations

import contextlib
import csv
import json
import time
from collections.abc import Callable, Iterator, Sequence
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
    if isinstance(bandwidth, str) and bandwidth == LOOPBACK:
        where = ""
    else:
        from utils import netlab

        where = f" over {netlab.describe_rate(netlab.parse_bandwidth(bandwidth))} links"
    rows = []
    for n in ranks:
        start = time.perf_counter()
        print(
            f"allreduce on {n} ranks{where}: starting Horovod, then {len(sizes)} sizes from "
            f"{describe_bytes(min(sizes))} to {describe_bytes(max(sizes))}",
            flush=True,
        )
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
        print(
            f"allreduce on {n} ranks{where}: {len(sizes)} sizes measured in {time.perf_counter() - start:.0f} s",
            flush=True,
        )
    return rows


def describe_bytes(nbytes: int) -> str:
    """'4 KiB', '1.5 MiB', '64 MiB' or '100 B': a size as the progress lines and tables print it."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} B"


@contextlib.contextmanager
def progress_beat(what: str) -> Iterator[Callable[[str], bool]]:
    """progress(what) as a `stream` for utils.launch, with utils.heartbeat's line while no result comes (Horovod's
    start, a slow size): a cell never goes quiet for long."""
    from utils import heartbeat

    with heartbeat.stream(False, what) as quiet:
        shown = progress(what, quiet.touch)
        shown.speaks_for_itself = True  # type: ignore[attr-defined]  # the heartbeat speaks: no note from launch
        yield shown


def progress(what: str, printed: Callable[[], None] | None = None) -> Callable[[str], bool]:
    """A `stream` filter for utils.launch: one short line for each RESULT a worker of the allreduce benchmark prints
    (the size or the variant it has just measured, and its best time), and none of the workers' own lines
    (`printed`, if given, is called after each line it prints)."""

    def show(line: str) -> bool:
        at = line.find("RESULT ")
        if at < 0:
            return False
        try:
            record = json.loads(line[at + len("RESULT ") :])
        except ValueError:
            return False
        if "bytes" in record:
            done = f"{describe_bytes(record['bytes'])} measured"
        else:
            done = f"{record.get('variant', 'a measurement')} measured"
        if "best_seconds" in record:
            done += f" (best call {1e3 * record['best_seconds']:.2f} ms)"
        print(f"  {what}: {done}", flush=True)
        if printed is not None:
            printed()
        return False

    return show


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
        with progress_beat(f"{n} ranks") as shown:
            run = launch.launch_horovodrun(
                ALLREDUCE_WORKER, np=n, args=args, threads=1, timeout=timeout, env=env, stream=shown
            )
        link, link_bps = "loopback", float("nan")
    else:
        from utils import netlab

        with netlab.Lab(n, bandwidth) as lab, progress_beat(f"{n} ranks") as shown:
            run = lab.launch_horovod(ALLREDUCE_WORKER, args, timeout=timeout, env=env, stream=shown)
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


#: The three ways the fusion benchmark reduces its tensors (scripts/workers/allreduce_worker.py --mode fusion).
EAGER, IN_GRAPH, GROUPED = "eager, one op at a time", "tf.function, all ops at once", "grouped_allreduce"
#: The two settings lesson 03 compares, each with the environment that sets it.
FUSION_ON, FUSION_OFF = "fusion on (default)", "fusion off"
FUSION_SETTINGS = ((FUSION_ON, {}), (FUSION_OFF, {"HOROVOD_FUSION_THRESHOLD": "0"}))
#: Two best times differ only by more than this share of the smaller one and more than either run's spread.
TOLERANCE = 0.25


def fusion_rows(setting: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per variant of a fusion run's RESULT records: the setting, and the best and the median call in ms."""
    return [
        {
            "setting": setting,
            "variant": r["variant"],
            "tensors": r["tensors"],
            "best ms": 1e3 * r["best_seconds"],
            "median ms": 1e3 * r["seconds"],
        }
        for r in records
    ]


def fusion_table(rows: Sequence[dict[str, Any]]):
    """The best call of each variant (a row) under each setting (a column), in ms (a pandas DataFrame)."""
    import pandas as pd

    table = pd.DataFrame(list(rows)).pivot(index="variant", columns="setting", values="best ms")
    table.columns.name = f"best call, ms for {rows[0]['tensors']} tensors:"
    return table


@dataclass(frozen=True)
class FusionGap:
    """One variant's best call with fusion on and off (ms), and whether they differ beyond the runs' spread."""

    on: float
    off: float
    clear: bool


def fusion_gap(rows: Sequence[dict[str, Any]], variant: str) -> FusionGap:
    """Compare a variant's best calls with fusion on and off: `clear` when they differ by more than TOLERANCE of
    the smaller and by more than the spread (median minus best) of either run's calls."""
    by = {r["setting"]: r for r in rows if r["variant"] == variant}
    missing = {FUSION_ON, FUSION_OFF} - set(by)
    if missing:
        raise ValueError(f"no row of {variant!r} with {' and '.join(sorted(missing))}: measure both settings first")
    on, off = by[FUSION_ON], by[FUSION_OFF]
    gap = abs(on["best ms"] - off["best ms"])
    spread = max(on["median ms"] - on["best ms"], off["median ms"] - off["best ms"])
    return FusionGap(
        on["best ms"], off["best ms"], gap > TOLERANCE * min(on["best ms"], off["best ms"]) and gap > spread
    )


def _too_busy(contention: Any) -> bool:
    from utils import steady

    return contention is not None and contention.share > steady.MAX_OTHERS


def fusion_reading(rows: Sequence[dict[str, Any]], contention: Any = None) -> str:
    """What the fusion table says, in sentences whose words follow its numbers; where other programs took more than
    steady.MAX_OTHERS of the machine meanwhile (`contention`, a steady.Contention), it says so instead."""
    if _too_busy(contention):
        line = contention.line()
        return (
            f"{line[0].upper()}{line[1:]}: the runs with fusion on and off did not have the same machine, so the "
            "table cannot say what fusion changes here. Run the cell again when the machine is quieter."
        )
    n = rows[0]["tensors"]
    eager, graph, grouped = (fusion_gap(rows, v) for v in (EAGER, IN_GRAPH, GROUPED))
    fewer = f"{eager.on / grouped.on:.0f}× less than" if grouped.on < eager.on else "no less than"
    out = [
        f"With fusion on, one grouped_allreduce takes {grouped.on:.1f} ms for {n} tensors, {fewer} {n} eager calls "
        f"({eager.on:.1f} ms)."
    ]
    if eager.clear:
        out.append(
            f"The {n} eager calls take {eager.on:.1f} ms with fusion on and {eager.off:.1f} ms off, "
            f"{max(eager.on, eager.off) / min(eager.on, eager.off):.1f}× apart, more than the spread of the calls, "
            "although fusion has nothing to combine when each tensor travels alone: this run cannot say what made "
            "the difference. Run the cell again to see whether it holds."
        )
    else:
        out.append(
            f"The {n} eager calls take {eager.on:.1f} ms with fusion on and {eager.off:.1f} ms off, the same within "
            "the spread of the calls: each tensor travels alone and pays the per-call cost, fused or not."
        )
    changes = []
    for name, gap in (("the tf.function", graph), ("grouped_allreduce", grouped)):
        if not gap.clear:
            changes.append(f"leaves {name} within the spread of the calls ({gap.on:.1f} and {gap.off:.1f} ms)")
        elif gap.off > gap.on:
            changes.append(f"makes {name} {gap.off / gap.on:.1f}× slower ({gap.on:.1f} → {gap.off:.1f} ms)")
        else:
            changes.append(
                f"makes {name} {gap.on / gap.off:.1f}× faster ({gap.on:.1f} → {gap.off:.1f} ms): here fusion cost "
                "more than it saved"
            )
    out.append(f"Turning fusion off {changes[0]}, and {changes[1]}.")
    if contention is not None:
        out.append(f"({contention.line()}.)")
    return " ".join(out)


def fusion_saving(rows: Sequence[dict[str, Any]], contention: Any = None) -> tuple[float, float] | None:
    """What fusion saves inside the tf.function, in ms, and the unfused call's ms; None where the two settings do
    not differ beyond the runs' spread, fusion saved nothing, or other programs took too much of the machine."""
    gap = fusion_gap(rows, IN_GRAPH)
    if _too_busy(contention) or not gap.clear or gap.off <= gap.on:
        return None
    return gap.off - gap.on, gap.off


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
