"""Measure Horovod's Gloo allreduce on this machine and write the table to a CSV file.

    python tools/bench_allreduce.py --out runs/allreduce.csv            # full: N = 2, 3, 4; 4 KB to 64 MB
    COURSE_SMOKE=1 python tools/bench_allreduce.py --out runs/smoke.csv  # smoke: fewer sizes and ranks

Columns: np, bytes, seconds (median time of one allreduce, slowest rank), best_seconds (the fastest of the
repeated calls: the cost of the allreduce itself, without the delays of a busy machine), algbw_GBps
(bytes / best_seconds, in gigabytes per second), busbw_GBps (algbw x 2(N-1)/N: the rate at which each rank
actually moves data in a ring), repeats, cpu_model, usable_cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils import bench, launch, mode, paths


def main() -> None:
    """Parse arguments, measure, write the CSV."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=paths.RUNS / "allreduce.csv")
    parser.add_argument("--ranks", type=int, nargs="*", default=mode.pick([2, 3, 4], [2, 3]))
    parser.add_argument("--repeats", type=int, default=mode.pick(10, 5))
    args = parser.parse_args()
    ok, why = launch.horovod_available()
    if not ok:
        sys.exit(why)
    rows = bench.measure_allreduce(args.ranks, mode.pick(bench.FULL_SIZES, bench.SMOKE_SIZES), args.repeats)
    bench.write_rows(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
