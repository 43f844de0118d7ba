"""Checks for the lessons' exercises: each compares a learner's answer with a value derived in code."""

from __future__ import annotations

import hashlib
import json
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
    if isinstance(shown, float) and shown == shown and abs(shown) != float("inf"):
        shown = float(f"{shown:.6g}")  # 3.61236, not 3.6123599479677737: as precise as the check
    if isinstance(shown, np.ndarray) and shown.ndim == 1 and shown.dtype.kind in "fiu" and shown.size <= 20:
        shown = [
            float(f"{v:.6g}") if shown.dtype.kind == "f" else int(v) for v in shown.ravel()
        ]  # not array(..., dtype=)
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


def check_global_batch_of_replicas(
    per_replica_batch: int, replicas: int, answer: int | None, workers: int | None = None
) -> bool:
    """Exercise (lesson 05): the global batch when each of `replicas` replicas takes `per_replica_batch`."""
    if workers is not None and answer == per_replica_batch * workers and workers != replicas:
        hint = (
            "you multiplied by the workers; strategy.num_replicas_in_sync counts replicas, not workers: reread how "
            "many devices each worker trains on."
        )
    else:
        hint = "a worker is a process (one per instance); a replica is one device of it, and each takes its own batch."
    return report("global batch", answer, per_replica_batch * replicas, hint=hint)


def check_data_reads(
    reads: Any,
    records: list[dict[str, Any]],
    total: int,
    discarded: Any = None,
    run: str = "DATA, three files",
) -> bool:
    """Exercise (lesson 05): the learner's formulas `reads(n_examples, workers)`, the lines one worker reads in an epoch
    under `run`, and `discarded(n_examples, workers)`, the fraction of them it throws away, against what worker 0
    counted in that run (the workers' RESULT records, utils.sharding): lines read, and examples kept."""
    result = records[0]["runs"].get(run)
    if result is None or "error" in result:
        raise ValueError(f"the sharding run has no {run!r} result to compare with: run section 4's cell first")
    answer = None if reads is None else reads(total, len(records))
    ok = report(
        "lines read by one worker under DATA",
        answer,
        result["lines_read"],
        hint="count what a worker reads from the files, not what it keeps (section 4's table has both)",
    )
    fraction = None if discarded is None else discarded(total, len(records))
    thrown = 1 - len(result["ids"]) / result["lines_read"]
    ok_fraction = report(
        "fraction of them one worker throws away",
        fraction,
        thrown,
        rel_tol=0.02,  # the last, partial batch makes the counted share differ slightly from the formula's
        hint="a fraction between 0 and 1: of all it reads, how much does a worker keep, and so how much not?",
    )
    return ok and ok_fraction


def restart_after_failure(failed_during_epoch: int, checkpoint_every: int = 1) -> tuple[int, int]:
    """(first epoch the restarted job trains, epochs of work lost) when checkpoints follow every k-th epoch."""
    if failed_during_epoch < 1 or checkpoint_every < 1:
        raise ValueError("epochs count from 1 and checkpoint_every must be at least 1")
    last_checkpoint = (failed_during_epoch - 1) // checkpoint_every * checkpoint_every
    return last_checkpoint + 1, failed_during_epoch - last_checkpoint


def check_restart(failed_during_epoch: int, checkpoint_every: int, first_epoch: int | None, lost: int | None) -> bool:
    """Exercise: where a restarted job resumes and how many epochs of work it redoes."""
    want_first, want_lost = restart_after_failure(failed_during_epoch, checkpoint_every)
    case = f"failed in epoch {failed_during_epoch}, checkpoint every {checkpoint_every}"  # tells two cases apart
    a = report(
        f"{case}: first epoch after restart",
        first_epoch,
        want_first,
        hint=f"the last checkpoint is the last multiple of {checkpoint_every} before the failed epoch",
    )
    b = report(
        f"{case}: epochs of work lost",
        lost,
        want_lost,
        hint="the epochs after the last checkpoint, the failed one included",
    )
    return a and b


# Lessons 00 to 02: each check below derives its expected answer from the exercise's own inputs.


def cores_allowed() -> int:
    """Cores the kernel lets this process use at full speed: its affinity mask, read from /proc/self/status (the
    affinity call elsewhere), capped by a container's CPU quota (cgroup v2 cpu.max)."""
    import os
    import re

    status = Path("/proc/self/status")
    match = re.search(r"^Cpus_allowed_list:\s*(\S+)", status.read_text(), re.M) if status.exists() else None
    if match:
        count = 0
        for part in match.group(1).split(","):
            low, _, high = part.partition("-")
            count += int(high or low) - int(low) + 1
    else:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:  # a container's CPU quota (cgroup v2), e.g. docker run --cpus=2, caps what the affinity mask allows
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota.isdigit() and period.isdigit() and int(period):
            count = max(1, min(count, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return count


def check_usable_cores(answer: int | None) -> bool:
    """Exercise (lesson 00): the number of cores this notebook may use."""
    return report("usable cores", answer, cores_allowed(), hint="read 'usable by this process' in the CPU report above")


def check_speedup_needed(job_hours: float, growth: float, answer: float | None, deadline_hours: float = 1.0) -> bool:
    """Exercise (lesson 01): the speedup a job of `job_hours` needs after its data grows by `growth` (0.3 = 30 %)."""
    return report(
        f"speedup needed after {growth:.0%} growth",
        answer,
        job_hours * (1.0 + growth) / deadline_hours,
        rel_tol=0.01,
        hint="the job's new time in hours (time grows as the data does), divided by the deadline in hours",
    )


def check_job_hours_on_workers(
    compute_hours: float, steps: int, grad_mb: float, workers: int, link_gbps: float, answer: float | None
) -> bool:
    """Exercise (lesson 01): hours of a same-steps job on `workers` ring-connected workers, latency ignored."""
    link_bytes_per_s = link_gbps * 1e9 / 8
    allreduce_s = 2 * (workers - 1) / workers * grad_mb * 1e6 / link_bytes_per_s
    return report(
        f"T({workers}) at {link_gbps:g} Gb/s",
        answer,
        compute_hours / workers + steps * allreduce_s / 3600,
        rel_tol=0.01,
        hint="the compute is shared by the workers; every step adds one ring allreduce of the gradient, 2(N-1)/N of "
        "its bytes through one link (Gb/s / 8 = GB/s); add the two, in hours",
    )


def check_data_to_halve_error(alpha: float, answer: float | None) -> bool:
    """Exercise (lesson 01): the factor of data that halves an error falling as size^-alpha."""
    return report(
        "data needed to halve the error",
        answer,
        2.0 ** (1.0 / alpha),
        rel_tol=0.01,
        hint=f"solve x^-{alpha:g} = 0.5 for x",
    )


def check_doubling_months(factor_per_year: float, answer: float | None) -> bool:
    """Exercise (lesson 01): the doubling time, in months, of a quantity multiplied by `factor_per_year` a year."""
    return report(
        f"doubling time of x{factor_per_year:g} a year",
        answer,
        12.0 * np.log(2.0) / np.log(factor_per_year),
        rel_tol=0.01,
        hint=f"solve 2 = {factor_per_year:g} ** (t / 12) for t, in months",
    )


def check_scaled_rate(base_lr: float, replicas: int, answer: float | None) -> bool:
    """Exercise (lesson 02): the learning rate the linear scaling rule gives `replicas` replicas after the warm-up."""
    return report("scaled learning rate", answer, base_lr * replicas, hint="base rate x replicas")


def check_gpipe_bubble(stages: int, micro_batches: int, answer: float | None) -> bool:
    """Exercise (lesson 02): the idle share of a GPipe step, counted on the simulated timeline."""
    from utils import gpipe

    return report(
        f"bubble, p={stages}, m={micro_batches}",
        answer,
        gpipe.bubble_fraction(gpipe.simulate_pipeline(stages, micro_batches)),
        rel_tol=1e-3,
        hint="a fraction between 0 and 1 (0.25 for 25 %), not a percentage: (p - 1) / (m + p - 1)"
        if answer is None or answer <= 1
        else "give the share as a fraction between 0 and 1 (0.25 for 25 %), not a percentage",
    )


def check_micro_batches_for(stages: int, bubble_below: float, answer: int | None) -> bool:
    """Exercise (lesson 02): the fewest micro-batches whose simulated GPipe bubble is under `bubble_below`."""
    from utils import gpipe

    if not 0 < bubble_below < 1:
        raise ValueError(f"bubble_below is an idle share between 0 and 1, got {bubble_below}")
    m = 1  # the timeline counts whole time steps: round away float noise (3/30 must not come out below 0.1)
    while round(gpipe.bubble_fraction(gpipe.simulate_pipeline(stages, m)), 12) >= bubble_below:
        m += 1
    return report(
        f"smallest m for < {bubble_below:.0%}",
        answer,
        m,
        hint=f"solve {stages - 1} / (m + {stages - 1}) < {bubble_below:g} for the smallest whole m",
    )


def check_training_state_bytes(parameters: int, optimizer: str, answer: float | None, bytes_per_value: int = 4) -> bool:
    """Exercise (lesson 02): bytes of weights, gradients and optimizer state (activations aside)."""
    slots = {"sgd": 0, "momentum": 1, "adam": 2}
    if optimizer not in slots:
        raise ValueError(f"optimizer must be one of {sorted(slots)}, got {optimizer!r}")
    return report(
        "bytes of the training state",
        answer,
        parameters * bytes_per_value * (2 + slots[optimizer]),
        hint=f"each parameter keeps a weight, a gradient and the values {optimizer} keeps for it, {bytes_per_value} bytes "
        "each",
    )


def check_state_fits(parameters: int, optimizer: str, device_gib: float, headroom: float, answer: bool | None) -> bool:
    """Exercise (lesson 02): whether the float32 training state fits a device once `headroom` of it is kept free."""
    slots = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    usable = device_gib * 2**30 * (1.0 - headroom)
    return report(
        f"fits {device_gib:g} GiB with {headroom:.0%} kept free",
        answer,
        parameters * 4 * (2 + slots) <= usable,
        hint=f"compare the state with {device_gib:g} x 2**30 x (1 - {headroom:g}) bytes; answer True or False",
    )


def check_parameter_server_values(workers: int, values: int, answer: float | None) -> bool:
    """Exercise (lesson 02): values one parameter server holding every parameter sends per synchronous step."""
    return report(
        "parameter server",
        answer,
        workers * values,
        hint="the server sends the new weights, all K values, to each of the N workers: N K",
    )


def check_ring_worker_values(workers: int, values: int, answer: float | None) -> bool:
    """Exercise (lesson 02): values worker 0 sends in a ring allreduce (chunks cut as numpy.array_split cuts them)."""
    sizes = [values // workers + (1 if c < values % workers else 0) for c in range(workers)]
    sent = 0 if workers == 1 else 2 * values - sizes[1 % workers] - sizes[2 % workers]
    return report("ring worker", answer, sent, hint="2 (N - 1) K / N when N divides K")


#: The per-worker batch, workers and optimizer settings the distributed-script checks run with.
EXERCISE_BATCH, EXERCISE_WORKERS = 32, 2
_REFERENCE_WEIGHTS: dict[tuple, list] = {}


def _weights_sha256(weights: list) -> str:
    """SHA-256 of a worker's float32 weights as its RESULT line lists them (the JSON numbers are exact)."""
    return hashlib.sha256(b"".join(np.asarray(w, dtype=np.float32).tobytes() for w in weights)).hexdigest()


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

    from utils import heartbeat, launch, paths

    script = Path(script)
    reference = Path(reference) if reference else paths.SCRIPTS / "exercises" / "mwms_solution.py"
    print(f"[MWMS script] launching {script.name} on {EXERCISE_WORKERS} workers ...", flush=True)
    out = Path(tempfile.mkdtemp(prefix="mwms-check-"))
    args = ["--epochs", str(epochs), "--out", str(out)]
    try:
        with heartbeat.stream(False, f"{script.name} on {EXERCISE_WORKERS} workers") as quiet:
            quiet.touch()  # the line above
            run = launch.launch_tf_workers(
                script, EXERCISE_WORKERS, args=args + ["--batch-size", str(EXERCISE_BATCH)], timeout=300, stream=quiet
            )
    except launch.WorkerError as err:
        cause = launch.exception_line(err)
        print(f"[MWMS script] the script failed on {EXERCISE_WORKERS} workers: {cause or err.reason}.")
        print(
            f"Fix the line it names and run the check again. The end of the log:\n{str(err)[-1500:]}"
            if not cause
            else f"Fix that line and run the check again (the workers' logs: {err.log_dir})."
        )
        return False
    recs = run.records()
    key = (str(reference), reference.stat().st_mtime, epochs)
    if key not in _REFERENCE_WEIGHTS:  # one worker, global batch: computed once per session
        print("[MWMS script] now the reference: one worker with the global batch (once a session) ...", flush=True)
        with heartbeat.stream(False, "the reference, one worker") as quiet:
            quiet.touch()  # the line above
            one = launch.launch_tf_workers(
                reference,
                1,
                args=["--epochs", str(epochs), "--batch-size", str(EXERCISE_BATCH * EXERCISE_WORKERS)],
                timeout=300,
                stream=quiet,
            )
        _REFERENCE_WEIGHTS[key] = one.records()[0]["weights"]
    expected = _REFERENCE_WEIGHTS[key]
    saved = sorted(p.name for p in out.glob("*.keras"))
    shutil.rmtree(out, ignore_errors=True)
    problems = []
    if len(recs) != EXERCISE_WORKERS or any(r["replicas"] != EXERCISE_WORKERS for r in recs):
        problems.append(
            f"TODO 1: each worker should see {EXERCISE_WORKERS} replicas, they see "
            f"{[r['replicas'] for r in recs]}: the strategy the script creates does not span the worker processes"
        )
    elif any(r["global_batch"] != EXERCISE_BATCH * EXERCISE_WORKERS for r in recs):
        problems.append(
            f"TODO 2: the global batch should be {EXERCISE_BATCH} x {EXERCISE_WORKERS} = "
            f"{EXERCISE_BATCH * EXERCISE_WORKERS}, it is {recs[0]['global_batch']}"
        )
    elif _weights_sha256(recs[0]["weights"]) != _weights_sha256(recs[1]["weights"]):
        problems.append(
            "TODO 3 or 5: the workers end with different weights (their SHA-256 differ): look at where the model "
            "and optimizer are created (TODO 3) and at how the training step is run (TODO 5)"
        )
    elif not _weights_close(recs[0]["weights"], expected):
        problems.append(
            "TODO 2 or 4: the workers agree, but not with one worker trained on the global batch: look at how "
            "each worker gets its part of every batch (TODO 2) and at which batch size the loss is averaged over "
            "(TODO 4)"
        )
    if saved != ["model-from-worker-0.keras"]:
        problems.append(f"TODO 6: only worker 0 should save the model; saved: {saved or 'nothing'}")
    for p in problems:
        print(f"[MWMS script] not yet: {p}")
    if not problems:
        print(
            f"[MWMS script] correct: {EXERCISE_WORKERS} workers with bit-identical weights (SHA-256 "
            f"{_weights_sha256(recs[0]['weights'])[:16]}…), equal to one worker "
            f"trained on the global batch of {EXERCISE_BATCH * EXERCISE_WORKERS}; only worker 0 saved the model."
        )
    return not problems


def check_horovod_script(script: str | Path, epochs: int = 1, data_size: int = 24 * 120) -> bool:
    """Launch a learner's Horovod script on 2 ranks (Gloo, localhost); say which TODO is wrong, if any.

    Each TODO is judged from its own observation: the ranks' size, their thread setting, the examples
    each trained on, their weights when the first step began and at the end, and the files they wrote.
    """
    import math
    import tempfile

    from utils import data, launch

    script, n, batch = Path(script), EXERCISE_WORKERS, EXERCISE_BATCH
    print(f"[Horovod script] launching {script.name} on {n} ranks with horovodrun ...", flush=True)
    out = Path(tempfile.mkdtemp(prefix="horovod-check-"))
    args = ["--epochs", epochs, "--batch-size", batch, "--data-size", data_size, "--out", out]
    try:
        run = launch.launch_horovodrun(script, np=n, args=[str(a) for a in args], timeout=300, stream=False)
    except launch.WorkerError as err:
        shutil.rmtree(out, ignore_errors=True)
        cause = launch.exception_line(err)
        print(
            f"[Horovod script] the script failed on {n} ranks: {cause}. Fix that line and run the check again (the "
            f"ranks' logs: {err.log_dir})."
            if cause
            else f"[Horovod script] the script failed on {n} ranks: {err.reason}. Read the error at the end of the "
            f"log below, fix the line it names, and run the check again.\n{str(err)[-1500:]}"
        )
        return False
    recs = run.records()
    saved = sorted(p.name for p in out.glob("*.keras"))
    shutil.rmtree(out, ignore_errors=True)
    if len(recs) != n:
        print(f"[Horovod script] not yet: expected one RESULT line from each of {n} ranks, got {len(recs)}")
        return False
    problems = []
    if not all(r["initialised"] for r in recs) or [r["size"] for r in recs] != [n] * n:
        problems.append(
            f"TODO 1: each process should find {n} ranks, they report sizes {[r['size'] for r in recs]}: "
            "initialise Horovod before anything asks for a rank"
        )
    threads = int(launch.thread_env(1)["OMP_NUM_THREADS"])
    if any(r["intra_op_threads"] != threads for r in recs) or any(r["visible_gpus"] > 1 for r in recs):
        problems.append(
            f"TODO 2: each rank should use OMP_NUM_THREADS = {threads} thread(s) (and one GPU where there are "
            f"GPUs); they use {[r['intra_op_threads'] for r in recs]} (0 = all cores): set TensorFlow's intra-op "
            "thread count from that variable"
        )
    windows = data.prepare(data.synthetic_series(data_size, seed=0)).x_train
    share = len(windows) // n
    usable_sum = float(np.sum(windows[: share * n], dtype=np.float64))
    sums = [r["example_sum"] for r in recs]
    if (
        [r["examples"] for r in recs] != [share] * n
        or not np.isclose(sum(sums), usable_sum, rtol=1e-9)
        or len(set(sums)) < n
    ):
        problems.append(
            f"TODO 3: the {n} ranks should train on different, equal shares of the {len(windows)} windows "
            f"({share} each); they trained on {[r['examples'] for r in recs]}: keep this rank's share, by its rank "
            "and the number of ranks (utils.data has the function)"
        )
    same_start = _weights_close(recs[0]["first_weights"], recs[1]["first_weights"], 1e-7)
    if not same_start:
        problems.append(
            "TODO 5: the ranks began the first step with different weights: broadcast rank 0's before the first "
            "step (utils.hvd_keras has the callback)"
        )
    elif not _weights_close(recs[0]["weights"], recs[1]["weights"], 1e-6):
        problems.append(
            "TODO 4: the ranks started equal but ended with different weights: each applied its own "
            "gradients. Give the model a training step that averages them over the ranks before compiling it "
            "(utils.hvd_keras has the wrapper)"
        )
    steps = [r["steps"] for r in recs]
    if len(set(steps)) > 1 or steps[0] != epochs * math.ceil(recs[0]["examples"] / batch):
        problems.append(
            f"the ranks took {steps} steps: each should take {epochs} x ceil(its examples / {batch}) steps "
            f"of {batch} examples, {n * batch} per step together"
        )
    if saved != ["model-from-rank-0.keras"]:
        problems.append(f"TODO 6: only rank 0 should save the model; saved: {saved or 'nothing'}")
    for p in problems:
        print(f"[Horovod script] not yet: {p}")
    if not problems:
        print(
            f"[Horovod script] correct: {n} ranks of {threads} thread(s) each trained on equal, different shares "
            f"of {share} windows, started from rank 0's weights and ended bit-identical after {steps[0]} steps "
            f"of a global batch of {n} x {batch} = {n * batch}; only rank 0 saved the model."
        )
    return not problems


def check_ring_bytes(workers: int, values: int, answer: float | None, bytes_per_value: int = 4) -> bool:
    """Exercise: bytes one worker sends in a ring allreduce (counted by running the simulated ring)."""
    from utils import ring

    sim = ring.ring_allreduce([np.zeros(values, dtype=np.float32) for _ in range(workers)])
    return report(
        f"ring bytes, N={workers}",
        answer,
        sim.total_sent_values(0) * bytes_per_value,
        hint="2(N-1)K/N values, 4 bytes each",
    )


def check_uneven_ring_worker(workers: int, values: int, worker: int, answer: int | None) -> bool:
    """Exercise: values one worker sends when the chunks are uneven (counted by running the simulated ring)."""
    from utils import ring

    sim = ring.ring_allreduce([np.zeros(values) for _ in range(workers)])
    return report(
        f"uneven ring, worker {worker}",
        answer,
        sim.total_sent_values(worker),
        hint=f"worker {worker} skips chunk {(worker + 1) % workers} in the first phase and chunk "
        f"{(worker + 2) % workers} in the second: 2K - s({(worker + 1) % workers}) - s({(worker + 2) % workers})",
    )


def check_ring_time_ms(workers: int, nbytes: float, link_gbps: float, answer: float | None) -> bool:
    """Exercise: milliseconds of a latency-free ring allreduce: 2(N-1) chunks of nbytes/N through one link."""
    chunk_seconds = nbytes / workers / (link_gbps * 1e9 / 8)
    return report(
        f"{nbytes / 1e6:g} MB, {workers} workers, {link_gbps:g} Gb/s",
        answer,
        1e3 * 2 * (workers - 1) * chunk_seconds,
        rel_tol=0.01,
        hint="2(N-1)/N x bytes / (bytes per second); 25 Gb/s = 3.125e9 bytes/s",
    )


def check_two_level_ring(ring_ms: Any) -> bool:
    """Exercise: the learner's `ring_ms(gpus, servers, inside_gbytes, network_gbits, nbytes)`, a latency-free ring
    through every GPU of `servers` servers, run on several clusters against utils.allreduce_model."""
    from utils import allreduce_model as am

    if ring_ms is None:
        return report("two-level ring", None, None)
    # the last: one GPU a server, whose unused link inside is the slower one (it must not count)
    cases = [
        (8, 1, 300, 400, 100e6),
        (8, 4, 300, 400, 100e6),
        (4, 2, 32, 100, 100e6),
        (1, 16, 32, 10, 100e6),
        (1, 4, 10, 400, 100e6),
    ]
    ok = True
    for gpus, servers, inside, network, nbytes in cases:
        topo = am.Topology(gpus, servers, am.Link(inside * 1e9), am.Link(network * 1e9 / 8))
        expected = 1e3 * float(am.allreduce_seconds(topo, nbytes))
        try:
            answer = ring_ms(gpus, servers, inside, network, nbytes)
        except Exception as err:  # the learner's code failed: say how, and count it as wrong
            print(f"[two-level ring] ring_ms({gpus}, {servers}, {inside}, {network}, {nbytes:g}) raised {err!r}")
            ok = False
            continue
        ok &= report(
            f"{servers} server(s) of {gpus} GPU(s), {inside} GB/s inside, {network} Gbit/s between",
            answer,
            expected,
            rel_tol=0.01,
            hint="2(N-1)/N x bytes through the slowest hop: a GPU's link inside (if a server has more than one GPU) "
            "or the server's network (if there is more than one server); Gbit/s / 8 = GB/s",
        )
    return ok


def check_fit_prediction_ms(fit: Any, nbytes: float, answer: float | None) -> bool:
    """Exercise: what a fitted allreduce model (utils.allreduce_model.LineFit) predicts for `nbytes`, in ms."""
    return report(
        f"{nbytes / 1e6:g} MB on this machine",
        answer,
        1e3 * float(fit.predict(nbytes)),
        rel_tol=0.01,
        hint="intercept + slope x bytes, with the slope above the bend for the bytes beyond it; in milliseconds",
    )


def check_cycle_wait_ms(rows: list[dict[str, Any]], nbytes: int, answer: float | None) -> bool:
    """Exercise: median minus best allreduce time at `nbytes` in benchmark rows (utils.bench), in ms."""
    row = next((r for r in rows if r["bytes"] == nbytes), None)
    if row is None:
        raise ValueError(f"no measurement of {nbytes} bytes in these rows: run the benchmark cell first")
    return report(
        f"wait at {nbytes / 1024:g} KiB",
        answer,
        1e3 * (row["seconds"] - row["best_seconds"]),
        rel_tol=0.01,
        hint=f"the row of {nbytes} bytes: (seconds - best_seconds) x 1000",
    )


def check_scaling_efficiency(one_rank: float, ranks: int, all_ranks: float, answer: float | None) -> bool:
    """Exercise: scaling efficiency from the throughput of one rank and of `ranks` ranks together."""
    return report(
        "scaling efficiency",
        answer,
        all_ranks / ranks / one_rank,
        rel_tol=0.01,
        hint="throughput(N) / (N x throughput(1))",
    )


def check_warmup_rate(base_lr: float, ranks: int, warmup_steps: int, step: int, answer: float | None) -> bool:
    """Exercise: the learning rate of utils.hvd_keras.WarmupScaledLR at `step` (read from the callback itself)."""
    from utils.hvd_keras import WarmupScaledLR

    return report(
        f"rate at step {step}",
        answer,
        WarmupScaledLR(base_lr, ranks=ranks, warmup_steps=warmup_steps).lr_at(step),
        hint="linear from the base rate to base x ranks over the warm-up, then base x ranks",
    )


def check_horovod_job(request: dict | None, aws: Any, instances: int, gpus_per_instance: int) -> bool:
    """Exercise (lesson 07): a Horovod job request that runs one rank per GPU on every instance.

    Reads the captured CreateTrainingJob request (instances, image, MPI launcher) and builds the launch
    command from the files the SDK uploaded, as the job's first instance will; counts the ranks on it.
    """
    from utils import rehearsal
    from utils import sagemaker_job as sj

    name = "Horovod job"
    if request is None:
        print(f"[{name}] not answered yet: build my_job (a sj.JobConfig) and run the cell again.")
        return False
    sj.validate(request)
    resources = request["ResourceConfig"]
    problems = []
    if resources["InstanceCount"] != instances:
        problems.append(f"the request asks for {resources['InstanceCount']} instance(s), not {instances}")
    try:
        gpus = int(sj.prices().loc[resources["InstanceType"], "gpus"])
    except KeyError:
        gpus = 0
    if gpus != gpus_per_instance:
        problems.append(
            f"{resources['InstanceType']} has {gpus} GPU(s), the job wants {gpus_per_instance} per instance"
        )
    try:
        distributed = json.loads(aws.read_uploaded(request, "sm_drivers", "distributed.json"))
    except aws.s3.exceptions.NoSuchKey:  # no MPI launcher: the SDK uploaded no distributed.json
        distributed = {}
    if not distributed:
        problems.append("the job has no MPI launcher: Horovod needs kind='horovod' (sagemaker.train.distributed.MPI)")
    else:
        command = sj.launch_command(request, aws)
        ranks, wanted = rehearsal.ranks_in(command), instances * gpus_per_instance
        if distributed.get("process_count_per_node") != gpus_per_instance:
            problems.append(f"process_count_per_node is {distributed.get('process_count_per_node')}: one per GPU")
        if ranks != wanted:
            problems.append(
                f"the launch command starts {ranks} rank(s), not {wanted}: SDK v3 passes -np = processes per "
                "node; keep fix_np=True so that a later -np gives the total"
            )
    if problems:
        print(f"[{name}] not quite: " + "; ".join(problems))
        return False
    print(
        f"[{name}] correct: {instances} instances × {gpus_per_instance} ranks, {instances * gpus_per_instance} in all"
    )
    return True


def check_input_mode(answer: str | None, data_gb: float, volume_gb: float, script_reads_files: bool) -> bool:
    """Exercise (lesson 07): the input mode that lets an unchanged script read a dataset of `data_gb`."""
    if answer is None:
        print('[input mode] not answered yet: replace None with "File", "FastFile" or "Pipe".')
        return False
    if answer not in ("File", "FastFile", "Pipe"):
        print(f"[input mode] {answer!r} is not an input mode: File, FastFile or Pipe")
        return False
    if answer == "File" and data_gb > volume_gb:
        why = f"File mode downloads all {data_gb:g} GB onto the {volume_gb:g} GB volume before the script starts"
    elif answer == "Pipe" and script_reads_files:
        why = "Pipe mode delivers a stream through a named pipe: a script that opens files would need rewriting"
    elif answer == "FastFile" and not script_reads_files:
        why = "a script written for a stream reads a pipe: Pipe mode"
    else:
        print(f"[input mode] correct: {answer}")
        return True
    print(f"[input mode] not quite: {why}.")
    return False


def check_spot_limits(request: dict | None, usual_hours: float, margin: float) -> bool:
    """Exercise (lesson 07): a spot job stopped past `usual_hours` × (1 + margin), waiting as long as it trains."""
    if request is None:
        print("[spot limits] not answered yet: build my_spot (a sj.JobConfig with spot=True) and run the cell again.")
        return False
    stop = request.get("StoppingCondition", {})
    runtime, wait = stop.get("MaxRuntimeInSeconds"), stop.get("MaxWaitTimeInSeconds")
    want_runtime = usual_hours * (1 + margin) * 3600
    problems = []
    if not request.get("EnableManagedSpotTraining"):
        problems.append("the job is not a managed spot job (spot=True)")
    if runtime is None or abs(runtime - want_runtime) > 60:
        problems.append(f"MaxRuntimeInSeconds is {runtime}; {usual_hours:g} h + {margin:.0%} is {want_runtime:.0f} s")
    if wait is None or runtime is None or abs(wait - 2 * runtime) > 60:
        problems.append(
            f"MaxWaitTimeInSeconds is {wait}: it counts the wait for capacity plus the training, "
            "so waiting as long as it may train makes it twice the runtime"
        )
    if problems:
        print("[spot limits] not quite: " + "; ".join(problems))
        return False
    print(f"[spot limits] correct: runtime {runtime / 3600:g} h, wait {wait / 3600:g} h")
    return True


def _cluster_problem(n: int, work: Any, cluster: Any) -> str | None:
    """Why `n` workers are not the smallest cluster whose run meets the deadline, or None when they are."""
    if n < 1:
        return f"a cluster has at least 1 worker, you gave {n!r}"
    if float(cluster.run_hours(n, work.training_hours)) > work.budget_hours:
        return f"{n} workers take longer than the {work.budget_hours * 60:.0f} min left for training"
    if n > 1 and float(cluster.run_hours(n - 1, work.training_hours)) <= work.budget_hours:
        return f"{n - 1} workers meet the deadline too; find the smallest"
    return None


def check_capstone_workers(answer: int | None, work: Any, cluster: Any) -> bool:
    """Exercise (lesson 08): the smallest number of workers whose run meets the deadline.

    Judged by the property, not by a second search: N's run (training + overheads) fits the deadline and
    N - 1's does not.
    """
    name = "smallest cluster"
    if answer is None:
        print(f"[{name}] not answered yet: replace None with a number of workers.")
        return False
    problem = _cluster_problem(int(answer), work, cluster)
    if problem:
        print(f"[{name}] not quite: {problem}")
        return False
    print(f"[{name}] correct: {int(answer)} workers")
    return True


def check_capstone_choice(answer: Any, options: list[Any], runs_per_day: float, usd_per_hour: dict[str, float]) -> bool:
    """Exercise (lesson 08, 2026 table): the option, instances and cost per day the table's rule gives for other
    inputs. Judged by the definitions on the table of those inputs: the option meets the hour; its cost is
    instances x hours per run x its price per hour (`usd_per_hour`, by the option's letter) x runs a day; no option
    that meets the hour costs less; of options that cost the same, none changes fewer lines."""
    name = "decision for other inputs"
    if answer is None:
        print(f"[{name}] not answered yet: replace None with verdict(...)'s result for these inputs.")
        return False
    try:
        choice, n, usd = (
            (answer["choice"], answer["instances"], answer["$ per day"]) if isinstance(answer, dict) else answer
        )
        n, usd = int(n), float(usd)
    except (KeyError, TypeError, ValueError):
        print(f"[{name}] not quite: give verdict(...)'s result, or (choice, instances, $ per day); you gave {answer!r}")
        return False
    row = next((o for o in options if str(choice).split(".")[0] == o.name.split(".")[0]), None)
    if row is None:
        print(
            f"[{name}] not quite: {choice!r} is none of the table's options ({', '.join(o.name[:1] for o in options)})"
        )
        return False
    if not row.meets_deadline:
        print(f"[{name}] not quite: {row.name} does not meet the deadline with these inputs")
        return False
    key = row.name.split(".")[0]
    cost = row.instances * row.hours_per_run * usd_per_hour[key] * runs_per_day
    if n != row.instances or abs(usd - cost) > max(1.0, 0.005 * cost):
        print(
            f"[{name}] not quite: {row.name} takes {row.instances} instance(s) x {row.hours_per_run:.2f} h a run x "
            f"${usd_per_hour[key]:.2f} x {runs_per_day:g} runs a day; you gave {n} instance(s) and ${usd:,.0f}"
        )
        return False
    able = [o for o in options if o.meets_deadline and o.usd_per_day is not None]
    cheaper = [o.name for o in able if round(o.usd_per_day, 2) < round(cost, 2)]
    if cheaper:
        print(f"[{name}] not quite: {row.name} meets the deadline, but {len(cheaper)} option(s) that meet it cost less")
        return False
    fewer = [
        o.name
        for o in able
        if round(o.usd_per_day, 2) == round(cost, 2) and (o.code_lines or 0) < (row.code_lines or 0)
    ]
    if fewer:
        print(f"[{name}] not quite: another option meets it at the same cost with fewer lines")
        return False
    print(f"[{name}] correct: {row.name}, {n} instance(s), ${usd:,.0f} a day")
    return True


#: The option table's columns that could separate two options, and the Option attribute each shows.
OPTION_COLUMNS = {
    "meets the hour": "meets_deadline",
    "hours per run": "hours_per_run",
    "instances": "instances",
    "$ per day": "usd_per_day",
    "lines of code": "code_lines",
}


#: The rule's columns, in the order it reads them: meets the hour, then the cheapest, then the fewest lines.
RULE_COLUMNS = ("meets the hour", "$ per day", "lines of code")


def check_capstone_tiebreak(answer: str | None, tables: list[list[Any]]) -> bool:
    """Exercise (lesson 08): the column of the rule that decides between B and E, judged on every table of a grid of
    inputs where one of them meets the deadline and one needs more than one instance (on one, no allreduce runs and
    their steps are the same).

    The expected answer is read off the tables: for each, the first of RULE_COLUMNS in which B's and E's rows differ.
    """
    name = "what decides between B and E"
    if answer is None:
        print(f"[{name}] not answered yet: replace None with one of {list(RULE_COLUMNS)}.")
        return False
    deciding, cheaper, used = set(), {"B": 0, "E": 0}, 0
    for options in tables:
        b = next(o for o in options if o.name.startswith("B"))
        e = next(o for o in options if o.name.startswith("E"))
        if not (b.meets_deadline or e.meets_deadline) or max(b.instances or 1, e.instances or 1) <= 1:
            continue
        used += 1
        first = next((c for c in RULE_COLUMNS if getattr(b, OPTION_COLUMNS[c]) != getattr(e, OPTION_COLUMNS[c])), None)
        deciding.add(first or "nothing")
        if first == "$ per day":
            cheaper["B" if b.usd_per_day < e.usd_per_day else "E"] += 1
    print(
        f"[{name}] over {used} of {len(tables)} tables (one of them meets the deadline, on more than one instance): "
        f"decided by {', '.join(sorted(deciding)) or 'nothing'}; B the cheaper {cheaper['B']} times, "
        f"E {cheaper['E']} times"
    )
    expected = next(iter(deciding)) if len(deciding) == 1 else tuple(sorted(deciding))
    return report(
        name,
        answer,
        expected,
        hint="compare B's and E's rows column by column, in the rule's order: where do they differ first?",
    )


def check_warm_fraction_alone(answer: float | None, work: Any) -> bool:
    """Exercise (lesson 08): the largest warm-start share that fits the job on one GPU within the deadline.

    Judged by the property: with that share the one-GPU run fits what is left of the deadline, and with
    1 % more it does not (or the share is already 1: the job fits from scratch).
    """
    from dataclasses import replace

    name = "warm start alone"
    if answer is None:
        print(f"[{name}] not answered yet: replace None with a fraction (0.5 = half a from-scratch run).")
        return False
    share = float(answer)
    if not 0 < share <= 1:
        print(f"[{name}] not quite: a share of a from-scratch run lies in (0, 1], you gave {answer!r}")
        return False

    def hours(s: float) -> float:
        return replace(work, warm_fraction=s).training_hours

    if hours(share) > work.budget_hours * (1 + 1e-9):
        print(
            f"[{name}] not quite: needing {share:.1%} of a from-scratch run, one GPU trains {hours(share):.2f} h, more "
            f"than the {work.budget_hours * 60:.0f} min left once the overheads are paid"
        )
        return False
    if share < 1 and hours(min(1.0, share * 1.01)) <= work.budget_hours:
        print(f"[{name}] not quite: a warm start needing 1 % more than {share:.1%} would still fit; find the largest")
        return False
    print(f"[{name}] correct: {share:.1%} of a from-scratch run")
    return True


def check_tfjob(job: Any, *, chief: int = 1, workers: int = 2, run: bool = True, epochs: int = 1) -> bool:
    """Lesson 09's exercise: a TFJob (SDK model, dict or YAML text) for train_mwms.py with `chief` chief and `workers`
    workers. Checks it as the operator would (admission rules), builds every pod's TF_CONFIG from it and checks
    the cluster they describe; then (run=True) runs its pods on the network lab (or loopback) for `epochs` epochs
    and checks that every replica ended with identical weights."""
    from utils import kubeflow, launch

    if job is None:
        print("[TFJob] not answered yet: set my_tfjob to your TFJob's YAML text and run the cell again.")
        return False
    try:
        manifest = kubeflow.manifest(kubeflow.load_tfjob(job) if isinstance(job, (str, dict)) else job)
        kubeflow.check_tfjob(manifest)
        pods = kubeflow.tf_pods(manifest)
    except (kubeflow.ManifestError, KeyError, TypeError, AttributeError) as err:
        print(f"[TFJob] the operator would not run it: {err}")
        return False
    counts = {t: sum(p.replica_type == t for p in pods) for t in ("Chief", "Worker")}
    if counts != {"Chief": chief, "Worker": workers}:
        print(f"[TFJob] it has {counts}; the exercise asks for {chief} chief and {workers} workers.")
        return False
    never = sorted({p.replica_type for p in pods if p.restart_policy != "OnFailure"})
    if never:
        print(f"[TFJob] {', '.join(never)}: restartPolicy is not OnFailure (the operator's default is Never).")
        return False
    container = " ".join(pods[0].command)
    if "train_mwms.py" not in container:
        print(f"[TFJob] its container runs {container!r}: run scripts/train_mwms.py (at /opt/course in the image).")
        return False
    configs = [json.loads(p.env["TF_CONFIG"]) for p in pods]
    tasks = [(c["task"]["type"], c["task"]["index"]) for c in configs]
    print("TF_CONFIG of each pod:", ", ".join(f"{p.name}: task {t}" for p, t in zip(pods, tasks, strict=True)))
    print("cluster:", json.dumps(configs[0]["cluster"]))
    if not run:
        return True
    try:
        done = kubeflow.rehearse(
            [
                kubeflow.Pod(**{**p.__dict__, "command": p.command + ["--epochs", str(epochs), "--data-size", "3000"]})
                for p in pods
            ],
            timeout=300,
            stream=False,
        )
    except launch.WorkerError as err:
        print(f"[TFJob] its pods failed: {err.reason}")
        return False
    records = done.records()
    same = len({r["weights_sha256"] for r in records}) == 1 and len(records) == chief + workers
    where = "the network lab" if done.where == "lab" else f"loopback ({done.why_loopback})"
    print(
        f"[TFJob] {'correct' if same else 'WRONG'}: {len(records)} pods trained on {where} in {done.seconds:.0f} s, "
        f"{'identical' if same else 'different'} weights (sizes {sorted({r['size'] for r in records})})"
    )
    return same


#: The names a learner may give each rule's owner (lower case, without "the" and "'s").
RULE_OWNERS = {
    "operator": {"operator", "training operator", "kubeflow", "kubeflow training operator", "webhook", "tfjob webhook"},
    "tensorflow": {"tensorflow", "tf", "multiworkermirroredstrategy", "mwms", "script", "train_mwms.py"},
}


def rule_owner(answer: str) -> str | None:
    """Whose rule a learner's answer names: "operator", "tensorflow", or None when it names neither."""
    words = str(answer).strip().strip("\"'").strip().lower().replace("\u2019", "'")
    words = words.removeprefix("the ").removesuffix("'s").strip()
    return next((owner for owner, names in RULE_OWNERS.items() if words in names), None)


def check_ps_rule_owner(answer: str | None, job: Any) -> bool:
    """Lesson 09's exercise: whose rule refuses a PS replica added to `job` (a TFJob for train_mwms.py), the operator's or
    TensorFlow's, in the learner's words (RULE_OWNERS). Judged by running the rules: the TFJob with a PS replica goes
    through kubeflow.check_tfjob, and the expected owner is read from what refuses it (the rules kubeflow marks as
    TensorFlow's, or the webhook's)."""
    from utils import kubeflow

    name = "who refuses a PS replica for train_mwms.py"
    if answer is None:
        print(f"[{name}] not answered yet: replace None with whose rule it is, as a string, and run the cell again.")
        return False
    given = rule_owner(answer)
    if given is None:
        print(f"[{name}] not quite: {answer!r} names neither the operator nor TensorFlow; name one of them.")
        return False
    bad = json.loads(json.dumps(kubeflow.manifest(job)))
    specs = bad["spec"]["tfReplicaSpecs"]
    specs["PS"] = json.loads(json.dumps(specs.get("Worker") or next(iter(specs.values()))))
    try:
        kubeflow.check_tfjob(bad)
    except kubeflow.ManifestError as err:
        refusals = [p for p in err.problems if "[PS]" in p]
    else:
        refusals = []
    if not refusals:
        print(f"[{name}] the TFJob with a PS replica was admitted: no rule refuses it, so neither answer holds")
        return False
    print(f"[{name}] what refuses it: " + " | ".join(refusals))
    owner = "tensorflow" if all("TensorFlow" in p for p in refusals) else "operator"
    return report(name, given, owner, hint="read the message: whose rule does it say it is?")
