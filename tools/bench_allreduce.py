"""Measure Horovod's Gloo allreduce on this machine, write the table to a CSV file, and fit the ring model.

    python tools/bench_allreduce.py --out runs/allreduce.csv            # full: N = 2, 3, 4; 4 KB to 64 MB
    COURSE_SMOKE=1 python tools/bench_allreduce.py --out runs/smoke.csv  # smoke: fewer sizes and ranks
    python tools/bench_allreduce.py --fit-only runs/allreduce.csv        # fit a table measured before

Columns: np, bytes, seconds (median time of one allreduce, slowest rank), best_seconds (the fastest of the
repeated calls: the cost of the allreduce itself, without the delays of a busy machine), algbw_GBps
(bytes / best_seconds, in gigabytes per second), busbw_GBps (algbw x 2(N-1)/N: the rate at which each rank
actually moves data in a ring), repeats, cpu_model, usable_cores.

After measuring, it fits lesson 03's model (utils.allreduce_model.fit_line: one line per N, two regimes
joined at a bend where one line misses by more than 25 %) to the best times and prints, for each N, the
relative error at every size and the largest one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils import allreduce_model, bench, launch, mode, paths

GOAL = 0.25


def report_fit(csv_path: Path) -> float:
    """Print the per-N fit of the best times in `csv_path` and its errors; return the largest |error|."""
    import pandas as pd

    table = pd.read_csv(csv_path)
    worst = 0.0
    for n, group in table.groupby("np"):
        fit = allreduce_model.fit_line(group.bytes, group.best_seconds, goal=GOAL)
        rel = fit.relative_errors(group.bytes, group.best_seconds)
        bend = f", bend at {fit.bend / 2**20:g} MiB" if fit.bend else ", one regime"
        errors = ", ".join(f"{b / 2**20:g} MiB {100 * e:+.1f}%" for b, e in zip(group.bytes, rel))
        print(f"N={n}{bend}: largest error {100 * abs(rel).max():.1f} %  ({errors})")
        worst = max(worst, float(abs(rel).max()))
    print(f"largest error over all N and sizes: {100 * worst:.1f} % (goal: within {100 * GOAL:.0f} %)")
    return worst


def main() -> None:
    """Parse arguments, measure, write the CSV, report the fit."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=paths.RUNS / "allreduce.csv")
    parser.add_argument("--ranks", type=int, nargs="*", default=mode.pick([2, 3, 4], [2, 3]))
    parser.add_argument("--repeats", type=int, default=mode.pick(10, 5))
    parser.add_argument("--fit-only", type=Path, default=None, help="fit this CSV instead of measuring")
    args = parser.parse_args()
    if args.fit_only:
        if not args.fit_only.exists():
            sys.exit(f"no table at {args.fit_only}: measure one first (python tools/bench_allreduce.py --out ...)")
        report_fit(args.fit_only)
        return
    ok, why = launch.horovod_available()
    if not ok:
        sys.exit(why)
    rows = bench.measure_allreduce(args.ranks, mode.pick(bench.FULL_SIZES, bench.SMOKE_SIZES), args.repeats)
    bench.write_rows(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")
    report_fit(args.out)


if __name__ == "__main__":
    main()
