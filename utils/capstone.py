"""The capstone's decision: which option retrains the 23-hour forecaster every hour, at what cost.

Every figure the decision uses is an argument: the job's hours today, the data's growth, the deadline,
the fixed minutes of every run, the share of a from-scratch training that a warm start needs (measured
by `warm_start`), the link and gradient of the communication model (lessons 01 and 03), the scaling
efficiency measured in a rehearsal, and the price of a worker-hour (data/instance_prices.csv).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from utils import scenario
from utils.commcost import gbit_to_bytes_per_s

HOUR = scenario.HOUR


@dataclass(frozen=True)
class Workload:
    """The job to retrain, and what one run of it must fit in."""

    job_hours: float = 23.0  # the scenario: one run on one GPU today
    monthly_growth: float = 0.05  # an assumption, as in lesson 01
    months: float = 0.0  # how far ahead
    deadline_hours: float = 1.0  # hourly retraining
    overhead_minutes: float = 10.0  # start-up, data download, evaluation: fixed per run
    warm_fraction: float = 1.0  # training a warm start needs, as a share of a from-scratch run

    def __post_init__(self) -> None:
        if not self.job_hours > 0:
            raise ValueError(f"job_hours must be positive, got {self.job_hours}")
        if self.monthly_growth < 0:
            raise ValueError(
                f"monthly_growth is {self.monthly_growth}: a negative growth means the data shrinks, which the "
                "scenario does not have; give 0 for data that stays the same size, or a positive fraction (0.05 = 5 %)"
            )
        if self.months < 0:
            raise ValueError(f"months must be at least 0, got {self.months}")
        if not self.deadline_hours > 0:
            raise ValueError(f"deadline_hours must be positive, got {self.deadline_hours}")
        if self.overhead_minutes < 0:
            raise ValueError(f"overhead_minutes must not be negative, got {self.overhead_minutes}")
        if not 0 < self.warm_fraction <= 1:
            raise ValueError(f"warm_fraction is a share of a from-scratch run, in (0, 1], got {self.warm_fraction}")
        if self.overhead_minutes / 60 >= self.deadline_hours:
            raise ValueError(
                f"no configuration can meet a deadline of {self.deadline_hours * 60:g} min: the fixed overheads of "
                f"every run alone take {self.overhead_minutes:g} min (start-up, data, evaluation). Lengthen the "
                "deadline or cut the overheads (a warm pool keeps the instances between runs)"
            )

    @property
    def growth(self) -> float:
        """The data's size at `months` ahead, as a multiple of today's."""
        return scenario.growth_factor(self.monthly_growth, self.months)

    @property
    def training_hours(self) -> float:
        """One run's training on one GPU: today's hours × growth (time ∝ data, lesson 01) × warm share."""
        return self.job_hours * self.growth * self.warm_fraction

    @property
    def budget_hours(self) -> float:
        """What is left of the deadline for training once the fixed overheads are paid."""
        return self.deadline_hours - self.overhead_minutes / 60


@dataclass(frozen=True)
class Cluster:
    """The communication model of lesson 01 (ring allreduce over a link) and a measured efficiency."""

    grad_bytes: float  # gradient per step (bytes)
    step_seconds: float = 0.5  # one step of the job on one GPU (lesson 01's assumption)
    link_gbps: float = 25.0  # per-instance network link
    step_latency: float = 20e-6  # one ring step (lesson 03)
    efficiency: float = 1.0  # compute scaling measured in a rehearsal, applied to compute/N
    scale_batch: bool = True  # each worker keeps its batch (lesson 04): steps fall as N grows

    def __post_init__(self) -> None:
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency is a fraction in (0, 1], got {self.efficiency}")
        for name in ("grad_bytes", "step_seconds", "link_gbps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def run_hours(self, n, training_hours: float) -> np.ndarray:
        """T(N) in hours for a job of `training_hours` on one GPU: compute/(N·efficiency) + allreduces."""
        n = np.asarray(n, dtype=float)
        compute = training_hours * HOUR
        steps = compute / self.step_seconds
        t = scenario.job_seconds_on_workers(
            n, compute, steps, self.grad_bytes, gbit_to_bytes_per_s(self.link_gbps), self.step_latency, self.scale_batch
        )
        comm = t - compute / n
        return (compute / (n * np.where(n > 1, self.efficiency, 1.0)) + comm) / HOUR


def smallest_cluster(work: Workload, cluster: Cluster, max_workers: int = 4096) -> int | None:
    """The fewest workers whose run (training + fixed overheads) meets the deadline, or None."""
    n = np.arange(1, max_workers + 1)
    ok = np.flatnonzero(cluster.run_hours(n, work.training_hours) <= work.budget_hours)
    return int(n[ok[0]]) if ok.size else None


@dataclass
class Option:
    """One row of the options table."""

    name: str
    meets_deadline: bool | None  # None: not comparable (a different model, or no figure)
    hours_per_run: float | None
    instances: int | None
    usd_per_day: float | None
    usd_per_day_spot: float | None
    code_lines: int | None
    infra: str
    risks: str


def usd_per_day(workers: int, hours_per_run: float, usd_per_worker_hour: float, runs_per_day: float) -> float:
    """Every run bills each worker for its whole run (training and overheads, per second)."""
    return workers * hours_per_run * usd_per_worker_hour * runs_per_day


@dataclass
class Decision:
    """The option chosen, and why."""

    option: Option
    reason: str


def decide(options: list[Option]) -> Decision:
    """Among the options that meet the deadline: the cheapest per day, then the fewest changed lines."""
    able = [o for o in options if o.meets_deadline]
    if not able:
        raise ValueError(
            "no option meets the deadline with these inputs: lengthen the deadline, cut the overheads or the "
            "growth, or allow more workers"
        )
    unpriced = [o.name for o in able if o.usd_per_day is None]
    if unpriced:
        raise ValueError(f"{', '.join(unpriced)} meet(s) the deadline but have no cost per day: give them a price")

    def cost(o: Option) -> float:
        return round(o.usd_per_day, 2)

    def lines(o: Option) -> float:  # unknown lines rank last: nothing says the change is small
        return math.inf if o.code_lines is None else o.code_lines

    best = min(able, key=lambda o: (cost(o), lines(o), o.infra))
    ties = [o for o in able if o is not best and cost(o) == cost(best)]
    reason = f"{best.name} meets the deadline at ${best.usd_per_day:,.0f} a day on demand"
    if ties:
        fewer = all(lines(best) < lines(o) for o in ties)
        reason += (
            f"; {', '.join(o.name for o in ties)} costs the same, and {best.name} changes "
            + ("fewer lines" if fewer else "no more lines")
            + f" ({best.code_lines} against {', '.join(str(o.code_lines) for o in ties)})"
        )
    return Decision(option=best, reason=reason)


@dataclass
class WarmStart:
    """A warm start (last run's model, new data) against training from scratch, epoch by epoch."""

    scratch_val: list[float]
    warm_val: list[float]
    epochs_needed: int | None  # warm epochs to reach the scratch model's final validation loss

    @property
    def fraction(self) -> float | None:
        """Warm epochs needed / scratch epochs: the share of a from-scratch run a warm start needs."""
        return None if self.epochs_needed is None else self.epochs_needed / len(self.scratch_val)


def warm_start(values: np.ndarray, epochs: int, old_fraction: float = 0.9, seed: int = 0, batch: int = 64) -> WarmStart:
    """Train from scratch on all the training windows; then train a model on the oldest `old_fraction`
    of them (the last run's model), continue it on all of them, and count the epochs it needs to reach the
    from-scratch model's validation loss."""
    from utils import data, model

    if not 0 < old_fraction < 1:
        raise ValueError(f"old_fraction is the share of the data the last run saw, in (0, 1), got {old_fraction}")
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    s = data.prepare(values)
    n_old = int(len(s.x_train) * old_fraction)

    def fresh():
        return model.compile_forecaster(model.build_forecaster(seed=seed))

    scratch = model.train_forecaster(
        fresh(), s.x_train, s.y_train, s.x_val, s.y_val, epochs=epochs, batch_size=batch, seed=seed, verbose=False
    )
    target = scratch.final_val_loss
    old = fresh()
    model.train_forecaster(
        old,
        s.x_train[:n_old],
        s.y_train[:n_old],
        s.x_val,
        s.y_val,
        epochs=epochs,
        batch_size=batch,
        seed=seed,
        verbose=False,
    )
    warm_val, needed = [], None
    for e in range(epochs):  # the last run's model, one more epoch at a time on all the data
        step = model.train_forecaster(
            old, s.x_train, s.y_train, s.x_val, s.y_val, epochs=1, batch_size=batch, seed=seed + e + 1, verbose=False
        )
        warm_val.append(step.final_val_loss)
        if step.final_val_loss <= target:
            needed = e + 1
            break
    return WarmStart(scratch_val=scratch.history["val_loss"], warm_val=warm_val, epochs_needed=needed)


#: EventBridge Scheduler's universal target for SageMaker's CreateTrainingJob, and the unique id it fills in.
TRAINING_TARGET = "arn:aws:scheduler:::aws-sdk:sagemaker:createTrainingJob"
EXECUTION_ID = "<aws.scheduler.execution-id>"


def hourly_schedule(
    training_request: dict,
    role_arn: str,
    name: str = "forecaster-hourly",
    rate: str = "rate(1 hour)",
    window_minutes: int = 0,
    retry_minutes: int = 10,
    retries: int = 3,
) -> dict:
    """A CreateSchedule request that sends `training_request` to SageMaker at every tick of `rate`.

    A job name must be unique, so the name becomes `<prefix>-<aws.scheduler.execution-id>`, which the
    scheduler replaces with the id of each invocation. `window_minutes` > 0 lets it start up to that late.
    A call SageMaker refuses (throttled, over a quota) is retried `retries` times within `retry_minutes`, not
    with the scheduler's defaults (185 attempts over 24 hours), which could start an hourly job hours late.
    """
    request = json.loads(json.dumps(training_request))
    prefix = request["TrainingJobName"].rsplit("-", 1)[0][:40]
    request["TrainingJobName"] = f"{prefix}-{EXECUTION_ID}"
    if "CheckpointConfig" in request:  # one prefix per run: a shared one would resume the last run's final epoch
        uri = request["CheckpointConfig"]["S3Uri"].rstrip("/")
        request["CheckpointConfig"]["S3Uri"] = f"{uri}/{EXECUTION_ID}"
    window = {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": window_minutes} if window_minutes else {"Mode": "OFF"}
    return {
        "Name": name,
        "ScheduleExpression": rate,
        "FlexibleTimeWindow": window,
        "Target": {
            "Arn": TRAINING_TARGET,
            "RoleArn": role_arn,
            "Input": json.dumps(request),
            "RetryPolicy": {"MaximumEventAgeInSeconds": 60 * retry_minutes, "MaximumRetryAttempts": retries},
        },
    }


def invocation(schedule: dict, execution_id: str = "d32c5kddcf5bb8c3") -> dict:
    """The CreateTrainingJob request one invocation sends (the execution id filled in, as the scheduler does)."""
    return json.loads(schedule["Target"]["Input"].replace(EXECUTION_ID, execution_id))


def options(
    work: Workload,
    cluster: Cluster,
    *,
    a_speedup: float,
    usd_per_gpu_hour: float,
    spot_fraction: float,
    code_lines: dict[str, int],
) -> list[Option]:
    """The capstone's five options as rows: A from a published speed-up, B and E from T(N), C and D not comparable.

    `code_lines` holds the lines each option adds to the single-worker script ("A", "B", "E").
    """
    if not a_speedup > 0 or not usd_per_gpu_hour > 0 or not 0 < spot_fraction <= 1:
        raise ValueError("a_speedup and usd_per_gpu_hour must be positive, spot_fraction in (0, 1]")
    a_hours = work.training_hours / a_speedup + work.overhead_minutes / 60
    n = smallest_cluster(work, cluster)
    hours = None if n is None else float(cluster.run_hours(n, work.training_hours)) + work.overhead_minutes / 60
    day = None if n is None else usd_per_day(n, hours, usd_per_gpu_hour, 24 / work.deadline_hours)
    spot = None if day is None else day * spot_fraction

    def not_comparable(name: str, infra: str, risks: str) -> Option:  # no time, cost or lines to set beside the others
        return Option(name, None, None, None, None, None, None, infra, risks)

    def spread(name: str, lines: int, infra: str, risks: str) -> Option:
        return Option(name, n is not None, hours, n, day, spot, lines, infra, risks)

    return [
        Option(
            "A. a faster GPU (A100, mixed precision)",
            a_hours <= work.deadline_hours,
            a_hours,
            1,
            None,
            None,
            code_lines["A"],
            "a new instance type",
            f"a one-time x{a_speedup:.1f}; growth outruns it; no A100 price in the price file",
        ),
        spread(
            "B. Horovod on SageMaker",
            code_lines["B"],
            "custom image (docker/horovod), MPI launcher with -np fix",
            "Horovod's last release is 0.28.1 (2023); AWS's images dropped it at TF 2.13",
        ),
        not_comparable(
            "C. SageMaker DeepAR",
            "built-in algorithm, JSON Lines input",
            "a different model to validate; no incremental training",
        ),
        not_comparable("D. Amazon EMR", "a Spark cluster to run", "still needs a distribution layer (B or E) on top"),
        spread(
            "E. MWMS on SageMaker's stock image",
            code_lines["E"],
            "stock TF 2.21 image, no launcher",
            "Keras 3 fit fails under MWMS: a custom loop (lesson 05)",
        ),
    ]


def scaled_link_bps(cluster: Cluster, lab_grad_bytes: float, lab_step_seconds: float) -> float:
    """The link rate (bit/s) at which a lab step's allreduce takes the same share of the step's computation as one
    of `cluster`'s: the cluster's link x (lab gradient bytes / cluster's) x (cluster step / lab step)."""
    if lab_grad_bytes <= 0 or lab_step_seconds <= 0:
        raise ValueError("the lab's gradient bytes and step seconds must be positive")
    return cluster.link_gbps * 1e9 * (lab_grad_bytes / cluster.grad_bytes) * (cluster.step_seconds / lab_step_seconds)


def residual_efficiency(
    one_step: float, busy_step: float, two_step: float, comm_seconds: float, strict: bool = True
) -> float:
    """The share of ideal compute scaling at N = 2 that T(N) does not explain, at most 1, in the form T(N) applies
    it (compute / efficiency + allreduce): the computation two workers need (`busy_step`, two independent workers
    sharing the machine) over what their measured step leaves for computation once T(N)'s allreduce
    (`comm_seconds`) is taken out. A `one_step` (one worker alone) much slower than `busy_step` is refused: it
    catches a two-worker step passed as one_step, or a disturbed measurement (not one_step and busy_step swapped,
    which are of the same size). With strict=False that check is left to the caller (one round among several, whose
    spread and contention steady.Steady judges: the value does not depend on `one_step`)."""
    if min(one_step, busy_step, two_step) <= 0 or comm_seconds < 0:
        raise ValueError("step times must be positive and the allreduce time not negative")
    if strict and one_step > 1.5 * busy_step:
        raise ValueError(
            f"one worker alone ({one_step:.3f} s) is much slower than each of two side by side ({busy_step:.3f} s): "
            "the arguments are swapped or the measurement was disturbed; measure again"
        )
    left = two_step - comm_seconds
    return 1.0 if left <= busy_step else busy_step / left


@dataclass(frozen=True)
class Calibration:
    """Step times of the calibration's three runs in every round, the lab link they used, and where they ran."""

    steps: dict[str, list[float]]  # "one worker", "two side by side", "two workers, scaled link": one per round
    link_bps: float  # the lab link's set rate (bit/s)
    comm_seconds: float  # the ring allreduce of the lab's gradient at that rate, as T(N) charges it
    where: str  # "on two lab hosts linked at ..." or the loopback fallback and why

    @property
    def best(self) -> dict[str, float]:
        """The fastest step of each run over the rounds."""
        return {k: min(v) for k, v in self.steps.items()}

    def per_round(self) -> list[float]:
        """The residual efficiency of every round. A round whose one worker was slowed by other programs (far
        slower than each of two side by side) still gives its value: steady.Steady judges the rounds by their
        spread and by what other programs took, and falls back to the quiet machine's reference."""
        rounds = zip(self.steps["one worker"], self.steps["two side by side"], self.steps["two workers, scaled link"])
        return [residual_efficiency(o, s, t, self.comm_seconds, strict=False) for o, s, t in rounds]


def calibrate(
    model_cluster: Cluster, lab_grad_bytes: float, script, args, rounds: int = 1, timeout: float = 600
) -> Calibration:
    """Run `script` (a tf.distribute worker) as one worker alone, as two independent workers side by side, and as
    two workers of one cluster on two hosts of the network lab linked at `scaled_link_bps` (from the first
    round's side-by-side step, the computation T(N) charges the allreduce against), `rounds` times in
    alternation; on loopback where the lab cannot run here (and then no allreduce time is charged)."""
    import sys

    from utils import allreduce_model, launch, netlab

    lab_ok = netlab.support()
    command = [sys.executable, str(script), *map(str, args)]
    steps: dict[str, list[float]] = {"one worker": [], "two side by side": [], "two workers, scaled link": []}

    def step_of(result) -> float:
        return max(r["step_seconds"][-1] for r in result.records())  # the slowest worker's last epoch

    rate, achieved = 0.0, 1.0
    for round_ in range(rounds):
        steps["one worker"].append(
            step_of(launch.launch_tf_workers(script, 1, args=args, timeout=timeout, stream=False))
        )
        if lab_ok.available:
            # two clusters of one, side by side on two hosts: the computation when both cores are busy
            with netlab.Lab(2, None) as lab:
                alone = [
                    {"TF_CONFIG": json.dumps({**lab.tf_config(0), "cluster": {"worker": [f"{h}:2222"]}})}
                    for h in lab.names
                ]
                steps["two side by side"].append(
                    step_of(lab.run([command] * 2, envs=alone, timeout=timeout, stream=False))
                )
            if round_ == 0:  # T(N) charges the allreduce against this computation, so the ratio is kept for it
                rate = min(
                    scaled_link_bps(model_cluster, lab_grad_bytes, steps["two side by side"][0]), netlab.MAX_RATE
                )
            with netlab.Lab(2, rate) as lab:
                if round_ == 0:  # the links first: what they carry against the set rate
                    achieved = min(m.ratio for m in lab.measure(seconds=0.5))
                    print(
                        f"lab links: {achieved:.0%} of the set {netlab.describe_rate(rate)} achieved (measured)",
                        flush=True,
                    )
                steps["two workers, scaled link"].append(
                    step_of(lab.launch_tf_workers(script, args, timeout=timeout, stream=False))
                )
        else:
            envs = [
                launch.worker_env(1, {"TF_CONFIG": json.dumps(launch.tf_config(1, 0, [p]))})
                for p in launch.free_ports(2)
            ]
            envs[1][launch.RUN_MARKER] = envs[0][launch.RUN_MARKER]  # one run: cleaned up together
            side = launch.run_workers(
                [command] * 2, envs, timeout=timeout, run_id=envs[0][launch.RUN_MARKER], stream=False
            )
            steps["two side by side"].append(step_of(side))
            two = launch.launch_tf_workers(script, 2, args=args, timeout=timeout, stream=False)
            steps["two workers, scaled link"].append(step_of(two))
        print(", ".join(f"{k}: {v[-1]:.3f} s a step" for k, v in steps.items()), flush=True)
    if lab_ok.available:
        where = f"on two lab hosts linked at {netlab.describe_rate(rate)}"
        # T(N)'s allreduce at the rate the links really carried
        comm = float(allreduce_model.ring_seconds(2, lab_grad_bytes, 0.0, achieved * rate / 8))
    else:  # no link was crossed: charging one would credit the workers with an allreduce that never happened
        where = f"over loopback ({lab_ok.reason}): the link's share is not in this measurement"
        comm = 0.0
    return Calibration(steps, rate, comm, where)
