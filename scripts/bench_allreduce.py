"""Measure Horovod's Gloo allreduce on this machine and write the table to a CSV file.

    python scripts/bench_allreduce.py --out runs/allreduce.csv            # full: N = 2, 3, 4; 4 KB to 64 MB
    COURSE_SMOKE=1 python scripts/bench_allreduce.py --out runs/smoke.csv  # smoke: fewer sizes and ranks

Columns: np, bytes, seconds (median time of one allreduce, slowest rank), best_seconds (the fastest of the
repeated calls: the cost of the allreduce itself, without the delays of a busy machine), algbw_GBps
(bytes / best_seconds, in gigabytes per second), busbw_GBps (algbw x 2(N-1)/N: the rate at which each rank
actually moves data in a ring), repeats, cpu_model, usable_cores.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils import envinfo, launch, mode  # noqa: E402

WORKER = Path(__file__).resolve().parent / "workers" / "allreduce_worker.py"
FULL_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
SMOKE_SIZES = [4 << 10, 256 << 10, 4 << 20]


def measure(ranks: list[int], sizes: list[int], repeats: int, timeout: float = 600,
            env: dict[str, str] | None = None) -> list[dict]:
    """Run the allreduce worker on each number of ranks (with extra environment `env`); one row per (ranks, size)."""
    cpu = envinfo.cpu_info()
    rows = []
    for n in ranks:
        start = time.perf_counter()
        run = launch.launch_horovodrun(WORKER, np=n, args=["--mode", "sizes", "--repeats", str(repeats),
                                                           "--sizes", *map(str, sorted(sizes))],
                                       threads=1, timeout=timeout, env=env, stream=False)
        for r in run.records():
            algbw = r["bytes"] / r["best_seconds"] / 1e9
            rows.append({"np": n, "bytes": r["bytes"], "seconds": r["seconds"], "best_seconds": r["best_seconds"],
                         "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (n - 1) / n, "repeats": r["repeats"],
                         "cpu_model": cpu.model, "usable_cores": cpu.usable_cores})
        print(f"allreduce on {n} ranks: {len(sizes)} sizes measured in {time.perf_counter() - start:.0f} s", flush=True)
    return rows


def write(rows: list[dict], out: Path) -> None:
    """Write the rows as CSV (creating the folder)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    """Parse arguments, measure, write the CSV."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=mode.REPO_ROOT / "runs" / "allreduce.csv")
    parser.add_argument("--ranks", type=int, nargs="*", default=mode.pick([2, 3, 4], [2, 3]))
    parser.add_argument("--repeats", type=int, default=mode.pick(10, 5))
    args = parser.parse_args()
    ok, why = launch.horovod_available()
    if not ok:
        sys.exit(why)
    rows = measure(args.ranks, mode.pick(FULL_SIZES, SMOKE_SIZES), args.repeats)
    write(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
