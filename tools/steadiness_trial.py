"""Do the verdict-bearing figures hold still? Execute, several times, the cells of lesson 04 that decide its
scaling efficiency and the cells of lesson 08 that decide the capstone's number of workers, optionally with
a heavy program busy on the machine meanwhile, and record what each trial measured and what its verdict used.

    python tools/steadiness_trial.py --trials 5 --busy 1          # five smoke trials, one busy process beside
    python tools/steadiness_trial.py --trials 2 --busy 0 --out /tmp/t.csv

The cells are the lessons' own (read from the notebooks, not copied): lesson 04's set-up cell and the two cells
of its efficiency section; lesson 08 up to the cell that prints the workers for the hour. The busy program is a
Python loop per requested core, started in a session of its own and stopped when the trials end.
Results: data/steadiness_trials.csv (one row per trial and lesson, with the machine and the command).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat
from nbclient import NotebookClient

from utils import course, envinfo, execution, paths

OUT = paths.DATA / "steadiness_trials.csv"
FIELDS = [
    "lesson",
    "trial",
    "busy_processes",
    "figure",
    "measured",
    "used",
    "fallback",
    "others_share",
    "seconds",
    "cpu_model",
    "usable_cores",
    "date",
    "command",
]
#: (notebook, the cells to run: a cell is kept if its source starts with one of these, or all cells up to the
#: last such cell with "..." ; the code that prints the figures as JSON)
TRIALS = {
    "04_horovod.ipynb": (
        ["import datetime as dt\nimport difflib", "WIDE = {", "speed, step_s = best.speed"],
        'import json\nprint("TRIAL", json.dumps({"figure": "scaling efficiency, 2 ranks", "measured": eff.measured, '
        '"used": efficiency, "fallback": eff.uses_reference, "others_share": watch.result.share}))',
    ),
    "08_capstone.ipynb": (
        ["...", "SPEED = {"],
        'print("TRIAL", json.dumps({"figure": "p3 instances for the hour", "measured": capstone.fewest(work, '
        "dataclasses.replace(p3, efficiency=statistics.median(cal.per_round()))), "
        '"used": capstone.fewest(work, p3), "fallback": residual.uses_reference, '
        '"others_share": watch.result.share}))',
    ),
}


def trial_notebook(name: str) -> nbformat.NotebookNode:
    """The lesson's cells that decide its figure, and a last cell that prints them."""
    nb = nbformat.read(course.NOTEBOOKS / name, as_version=4)
    starts, report = TRIALS[name]
    code = [c for c in nb.cells if c.cell_type == "code"]
    if starts[0] == "...":  # every cell up to the last named one
        last = max(i for i, c in enumerate(code) if c.source.startswith(starts[-1]))
        kept = code[: last + 1]
    else:
        kept = [c for c in code if any(c.source.startswith(s) for s in starts)]
        if len(kept) != len(starts):
            raise SystemExit(
                f"{name}: expected the cells starting with {starts}, found {len(kept)}: the lesson changed"
            )
    nb.cells = [*kept, nbformat.v4.new_code_cell("import statistics\n" + report)]
    return nb


def run_trial(name: str) -> tuple[dict, float]:
    nb = trial_notebook(name)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=1800,
        kernel_name="python3",
        resources={"metadata": {"path": str(course.NOTEBOOKS)}},
        config=execution.kernel_config(),
    ).execute()
    seconds = time.perf_counter() - start
    for output in nb.cells[-1].outputs:
        for line in output.get("text", "").splitlines():
            if line.startswith("TRIAL "):
                return json.loads(line[len("TRIAL ") :]), seconds
    raise SystemExit(f"{name}: the trial printed no figures; outputs: {nb.cells[-1].outputs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--busy", type=int, default=1, help="busy-loop processes beside the trials (0: none)")
    parser.add_argument("--mode", choices=["smoke", "full"], default="smoke")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("lessons", nargs="*", default=list(TRIALS), help=f"default: {' '.join(TRIALS)}")
    args = parser.parse_args()
    if args.trials < 1 or args.busy < 0:
        parser.error("--trials must be at least 1 and --busy at least 0")
    unknown = set(args.lessons) - set(TRIALS)
    if unknown:
        parser.error(f"no trial defined for {sorted(unknown)}; choose from {list(TRIALS)}")
    os.environ["COURSE_SMOKE"] = "1" if args.mode == "smoke" else "0"
    os.environ.pop("COURSE_RECORD_REFERENCES", None)
    os.environ["COURSE_ALL_ROUNDS"] = "1"  # a smoke run measures one round otherwise (utils.steady.rounds)
    command = "python tools/steadiness_trial.py " + " ".join(sys.argv[1:])
    cpu = envinfo.cpu_info()
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(args.busy)
    ]
    rows = []
    try:
        for trial in range(1, args.trials + 1):
            for name in args.lessons:
                got, seconds = run_trial(name)
                print(f"trial {trial}, {name}: {got} ({seconds:.0f} s)", flush=True)
                rows.append(
                    {
                        "lesson": name,
                        "trial": trial,
                        "busy_processes": args.busy,
                        **got,
                        "seconds": f"{seconds:.0f}",
                        "cpu_model": cpu.model,
                        "usable_cores": cpu.usable_cores,
                        "date": dt.date.today().isoformat(),
                        "command": command,
                    }
                )
    finally:
        for p in busy:
            p.kill()
            p.wait()
    new = not args.out.exists()
    with args.out.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows appended to {args.out}")


if __name__ == "__main__":
    main()
