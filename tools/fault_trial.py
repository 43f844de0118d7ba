"""Kill or stop one rank of a 2-rank training run at a random moment, and check that the launcher names it.

    python tools/fault_trial.py                      # 10 trials each: {horovod, mwms} x {kill, stop}
    python tools/fault_trial.py --trials 2 --frameworks mwms --faults stop --seed 7

Each trial starts scripts/train_horovod.py (horovodrun, Gloo) or scripts/train_mwms.py (two
tf.distribute workers) on 2 ranks through utils.launch, with small synthetic data and more epochs than
it can train before the fault. A second thread waits until both ranks' Python processes run (found by
the run's marker, COURSE_LAUNCH_RUN_ID, and the rank in their environment: HOROVOD_RANK, or TF_CONFIG's
task index), waits a random time, and sends SIGKILL or SIGSTOP to one rank chosen at random. The trial
records which rank the launcher's WorkerError names, its reason, the seconds from the fault to the error,
and whether any process of the run was left. A stopped rank ends the run through the launcher's
stopped-process check (utils.launch.STOPPED_AFTER), before any framework timeout; with
--stopped-after 0 the launcher waits and the framework's own timeout fires in the healthy rank first.

It prints one line per trial and a table at the end, and writes every trial to runs/fault_trial.jsonl.
It takes about half a minute per trial: run it on a machine that has nothing else to do.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils import launch, paths, processes

SCRIPTS = {"horovod": paths.SCRIPTS / "train_horovod.py", "mwms": paths.SCRIPTS / "train_mwms.py"}
SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP}
#: Small data, and epochs enough that every run is still training when the fault comes.
ARGS = ["--epochs", "200", "--data-size", "3000", "--batch-size", "32"]
#: The fault comes this many seconds (uniform) after both ranks' processes are seen: start-up included.
DELAY = (0.5, 15.0)
TIMEOUT = 180


def rank_of(proc: psutil.Process, framework: str) -> int | None:
    """The rank of a training process, from its environment (None for a wrapper or another program)."""
    try:
        if "python" not in proc.name():
            return None  # horovodrun starts each rank through `sh -c`
        env = proc.environ()
        if framework == "horovod":
            return int(env["HOROVOD_RANK"])
        return int(json.loads(env["TF_CONFIG"])["task"]["index"])
    except (psutil.Error, OSError, KeyError, ValueError):
        return None


def ranks(tag: str, framework: str) -> dict[int, psutil.Process]:
    """The training processes of the trial whose command line holds `tag`, by rank."""
    found = {}
    for proc in processes.marked(launch.RUN_MARKER):
        try:
            if tag not in " ".join(proc.cmdline()):
                continue
        except psutil.Error:
            continue
        rank = rank_of(proc, framework)
        if rank is not None:
            found[rank] = proc
    return found


def strike(tag: str, framework: str, fault: str, victim: int, delay: float, note: dict) -> None:
    """Wait for both ranks, then `delay` s, then send the fault's signal to rank `victim`."""
    deadline = time.monotonic() + TIMEOUT
    while len(ranks(tag, framework)) < 2:
        if time.monotonic() > deadline:
            note["error"] = "the ranks never appeared"
            return
        time.sleep(0.1)
    time.sleep(delay)
    target = ranks(tag, framework).get(victim)
    if target is None:
        note["error"] = "the rank had ended before the fault"
        return
    note["run_id"] = target.environ()[launch.RUN_MARKER]
    note["pid"] = target.pid
    note["at"] = time.monotonic()
    target.send_signal(SIGNALS[fault])


def trial(framework: str, fault: str, rng: random.Random, stopped_after: float | None) -> dict:
    """One run with one fault; what the launcher said."""
    victim, delay = rng.randrange(2), rng.uniform(*DELAY)
    work = Path(tempfile.mkdtemp(prefix="fault-trial-"))
    tag = str(work / "ck")  # in the ranks' command lines: tells this trial's processes from any other run's
    args = [*ARGS, "--checkpoint-dir", tag]
    note: dict = {}
    striker = threading.Thread(target=strike, args=(tag, framework, fault, victim, delay, note), daemon=True)
    striker.start()
    started = time.monotonic()
    out = {"framework": framework, "fault": fault, "victim": victim, "delay_s": round(delay, 2)}
    try:
        if framework == "horovod":
            launch.launch_horovodrun(
                SCRIPTS[framework], 2, args=args, timeout=TIMEOUT, stream=False, stopped_after=stopped_after
            )
        else:
            launch.launch_tf_workers(
                SCRIPTS[framework], 2, args=args, timeout=TIMEOUT, stream=False, stopped_after=stopped_after
            )
        out |= {"named": None, "reason": "the run finished: the fault came too late"}
    except launch.WorkerError as err:
        out |= {"named": err.rank, "reason": err.reason, "log_dir": str(err.log_dir)}
    ended = time.monotonic()
    striker.join(5)
    if "at" in note:
        out["fault_to_error_s"] = round(ended - note["at"], 1)
    if "error" in note:
        out["reason"] = f"{out['reason']} (trial: {note['error']})"
    out["run_s"] = round(ended - started, 1)
    out["left_running"] = len(processes.marked(launch.RUN_MARKER, note["run_id"])) if "run_id" in note else None
    out["right"] = out["named"] == victim and (fault == "kill") == ("SIGKILL" in out["reason"])
    return out


def table(results: list[dict]) -> str:
    """A Markdown table: per framework and fault, trials, rank named right, seconds from fault to error."""
    lines = [
        "| framework | fault | trials | right rank named | fault to error, s (min-max) | processes left |",
        "|---|---|---|---|---|---|",
    ]
    for framework in dict.fromkeys(r["framework"] for r in results):
        for fault in dict.fromkeys(r["fault"] for r in results):
            rows = [r for r in results if (r["framework"], r["fault"]) == (framework, fault)]
            if not rows:
                continue
            times = [r["fault_to_error_s"] for r in rows if "fault_to_error_s" in r]
            span = f"{min(times):.1f}-{max(times):.1f}" if times else "-"
            left = sum(r["left_running"] or 0 for r in rows)
            lines.append(
                f"| {framework} | {fault} | {len(rows)} | {sum(r['right'] for r in rows)} of {len(rows)} | "
                f"{span} | {left} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10, help="trials per framework and fault")
    p.add_argument("--frameworks", nargs="+", choices=list(SCRIPTS), default=list(SCRIPTS))
    p.add_argument("--faults", nargs="+", choices=list(SIGNALS), default=list(SIGNALS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--stopped-after",
        type=float,
        default=launch.STOPPED_AFTER,
        help="seconds a stopped rank may stay stopped before the launcher fails the run; 0: never, so that the "
        "framework's own timeout (Gloo's, TensorFlow's health check) ends it",
    )
    p.add_argument("--out", type=Path, default=paths.RUNS / "fault_trial.jsonl")
    args = p.parse_args(argv)
    if args.trials < 1:
        p.error("--trials must be at least 1")
    ok, why = launch.horovod_available()
    if "horovod" in args.frameworks and not ok:
        p.error(why)
    rng = random.Random(args.seed)
    plan = [(f, k) for f in args.frameworks for k in args.faults for _ in range(args.trials)]
    rng.shuffle(plan)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    results = []
    with args.out.open("w") as log:
        for i, (framework, fault) in enumerate(plan, 1):
            r = trial(framework, fault, rng, args.stopped_after or None)
            results.append(r)
            log.write(json.dumps(r) + "\n")
            log.flush()
            print(
                f"[{i}/{len(plan)}] {framework} {fault} rank {r['victim']} after {r['delay_s']} s: named "
                f"{r['named']} ({'right' if r['right'] else 'WRONG'}), {r.get('fault_to_error_s', '-')} s to the "
                f"error, {r['left_running']} left: {r['reason'][:160]}",
                flush=True,
            )
    print("\n" + table(results))
    print(f"\nevery trial: {args.out}")
    return 0 if all(r["right"] and not r["left_running"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
