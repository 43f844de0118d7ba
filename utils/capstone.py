"""The capstone's decision: which option retrains the 23-hour forecaster every hour, at what cost.

Every figure the decision uses is an argument: the job's hours today, the data's growth, the deadline,
the fixed minutes of every run, the share of a from-scratch training that a warm start needs (measured
by `warm_start`), the link and gradient of the communication model (lessons 01 and 03), the scaling
efficiency measured in a rehearsal, and the price of an instance-hour (utils.prices: data/aws_gpu_prices.csv).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace

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
    serial_hours: float | None = None  # hours per run when the allreduce follows every step (the pessimistic bound)
    price_kind: str = ""  # "quoted" or "estimate" (utils.prices), "" where no price applies


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
    stopped: str = ""  # why the rounds stopped early (a busy machine), or ""

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


def _shows_nothing(line: str) -> bool:
    """A stream that shows no worker line (calibrate's Heartbeat speaks for the run, so launch adds no note)."""
    return False


_shows_nothing.speaks_for_itself = True  # type: ignore[attr-defined]


def calibrate(
    model_cluster: Cluster,
    lab_grad_bytes: float,
    script,
    args,
    rounds: int = 1,
    timeout: float = 600,
    watch=None,
    give_up_above: float | None = None,
) -> Calibration:
    """Run `script` (a tf.distribute worker) as one worker alone, as two independent workers side by side, and as
    two workers of one cluster on two hosts of the network lab linked at `scaled_link_bps` (from the first
    round's side-by-side step, the computation T(N) charges the allreduce against), `rounds` times in
    alternation; on loopback where the lab cannot run here (and then no allreduce time is charged).

    A line is printed at least every 7 s while a run is silent (with what other programs took so far, from `watch`,
    a steady.CpuWatch). After a round, if other programs took more than `give_up_above` of the machine, the rounds
    left are not run: such a measurement would be set aside for the quiet machine's figure anyway
    (`Calibration.stopped` says so)."""
    import sys

    from utils import allreduce_model, launch, netlab

    lab_ok = netlab.support()
    command = [sys.executable, str(script), *map(str, args)]
    steps: dict[str, list[float]] = {"one worker": [], "two side by side": [], "two workers, scaled link": []}

    def step_of(result) -> float:
        return max(r["step_seconds"][-1] for r in result.records())  # the slowest worker's last epoch

    rate, achieved, stopped = 0.0, 1.0, ""

    def beat(what: str) -> Heartbeat:
        return Heartbeat(f"round {round_ + 1} of {rounds}, {what}", watch=watch, limit=give_up_above)

    for round_ in range(rounds):
        with beat("one worker"):
            steps["one worker"].append(
                step_of(launch.launch_tf_workers(script, 1, args=args, timeout=timeout, stream=_shows_nothing))
            )
        if lab_ok.available:
            # two clusters of one, side by side on two hosts: the computation when both cores are busy
            print(f"  round {round_ + 1} of {rounds}: starting two lab hosts ...", flush=True)
            with netlab.Lab(2, None) as lab:
                alone = [
                    {"TF_CONFIG": json.dumps({**lab.tf_config(0), "cluster": {"worker": [f"{h}:2222"]}})}
                    for h in lab.names
                ]
                with beat("two side by side"):
                    steps["two side by side"].append(
                        step_of(lab.run([command] * 2, envs=alone, timeout=timeout, stream=_shows_nothing))
                    )
            if round_ == 0:  # T(N) charges the allreduce against this computation, so the ratio is kept for it
                rate = min(
                    scaled_link_bps(model_cluster, lab_grad_bytes, steps["two side by side"][0]), netlab.MAX_RATE
                )
            print(f"  round {round_ + 1} of {rounds}: two lab hosts on the scaled link ...", flush=True)
            with netlab.Lab(2, rate) as lab:
                if round_ == 0:  # the links first: what they carry against the set rate
                    achieved = min(m.ratio for m in lab.measure(seconds=0.5))
                    print(
                        f"lab links: {achieved:.0%} of the set {netlab.describe_rate(rate)} achieved (measured)",
                        flush=True,
                    )
                with beat("two workers over the scaled link"):
                    steps["two workers, scaled link"].append(
                        step_of(lab.launch_tf_workers(script, args, timeout=timeout, stream=_shows_nothing))
                    )
        else:
            envs = [
                launch.worker_env(1, {"TF_CONFIG": json.dumps(launch.tf_config(1, 0, [p]))})
                for p in launch.free_ports(2)
            ]
            envs[1][launch.RUN_MARKER] = envs[0][launch.RUN_MARKER]  # one run: cleaned up together
            with beat("two side by side"):
                side = launch.run_workers(
                    [command] * 2, envs, timeout=timeout, run_id=envs[0][launch.RUN_MARKER], stream=_shows_nothing
                )
            steps["two side by side"].append(step_of(side))
            with beat("two workers"):
                two = launch.launch_tf_workers(script, 2, args=args, timeout=timeout, stream=_shows_nothing)
            steps["two workers, scaled link"].append(step_of(two))
        print(f"round {round_ + 1}: " + ", ".join(f"{k}: {v[-1]:.3f} s a step" for k, v in steps.items()), flush=True)
        share = Heartbeat("", watch=watch).others_share()
        if give_up_above is not None and share is not None and share > give_up_above and round_ + 1 < rounds:
            stopped = (
                f"other programs took {share:.0%} of this machine during round {round_ + 1}, more than "
                f"{give_up_above:.0%}: the rounds left would be set aside too, so they were not run"
            )
            print(stopped, flush=True)
            break
    if lab_ok.available:
        where = f"on two lab hosts linked at {netlab.describe_rate(rate)}"
        # T(N)'s allreduce at the rate the links really carried
        comm = float(allreduce_model.ring_seconds(2, lab_grad_bytes, 0.0, achieved * rate / 8))
    else:  # no link was crossed: charging one would credit the workers with an allreduce that never happened
        where = f"over loopback ({lab_ok.reason}): the link's share is not in this measurement"
        comm = 0.0
    return Calibration(steps, rate, comm, where, stopped)


# --- 2026: today's instances, sized with the two-level model and the overlap of lessons 03-04 ----------------------


def baseline_gbps(instance_type: str) -> float | None:
    """The sustained baseline (Gbit/s) of an instance whose network is "up to" a burst (utils.links, from
    data/network_rates.csv), or None where the instance's rate is sustained."""
    from utils import allreduce_model, links

    table = allreduce_model.instances()
    if instance_type not in table.index:
        raise ValueError(
            f"unknown instance type {instance_type!r}: data/gpu_instances.csv knows {', '.join(table.index)}"
        )
    rate = links.decision_rate(instance_type)
    return rate.gbps if rate.kind == "baseline" else None


@functools.cache
def _one_instance(instance_type: str):
    from utils import allreduce_model as am

    return am.topology_of(instance_type, 1)


@dataclass(frozen=True)
class Fleet:
    """`instances` of one type train the job, one rank per GPU, each GPU keeping its batch (lesson 04).

    A step on one GPU of this type lasts `step_seconds / speedup` (`speedup`: one GPU of the type against the job's
    GPU today), divided by the residual `efficiency` when more than one GPU trains. The allreduce of `grad_bytes` is
    allreduce_model's two-level one (NVLink or PCIe inside, the network between), NCCL's faster algorithm; it runs
    during the last `overlap` share of the computation (allreduce_model.BACKWARD_SHARE: the backward pass, as
    lesson 04 measures) and lengthens the step only beyond it. overlap=0 charges it after the step (serial T(N)).
    `network_gbps` replaces the instance's rate (None: data/gpu_instances.csv's; pass the baseline for a burst).

    With `layers` ((gradient bytes, multiply-adds) per layer, in the order the backward pass produces them, as
    allreduce_model.layer_gradients gives them) the step is allreduce_model.overlap_step's, lessons 03 and 04's model:
    each layer's gradient leaves only once it is ready, packed by `fusion` (Horovod's today by default), the layers'
    bytes scaled to add up to `grad_bytes`. Without `layers` the whole allreduce may start as the backward pass does
    (allreduce_model.step_efficiency: the optimistic bound)."""

    instance_type: str
    grad_bytes: float
    speedup: float = 1.0
    step_seconds: float = 0.5
    efficiency: float = 1.0
    overlap: float = 2 / 3
    network_gbps: float | None = None
    layers: tuple[tuple[float, float], ...] | None = None
    fusion: object | None = None  # an allreduce_model.Fusion; None: HOROVOD_NOW

    def __post_init__(self) -> None:
        if self.layers is not None and (not self.layers or any(b < 0 or w < 0 for b, w in self.layers)):
            raise ValueError("layers: one (gradient bytes, multiply-adds) pair per layer, none negative")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency is a fraction in (0, 1], got {self.efficiency}")
        if not 0 <= self.overlap <= 1:
            raise ValueError(f"overlap is a share of the step's computation, in [0, 1], got {self.overlap}")
        for name in ("grad_bytes", "speedup", "step_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        self.topology(1)  # an unknown type fails here, naming the ones the data file knows

    @property
    def gpus(self) -> int:
        return self.topology(1).gpus

    def topology(self, instances: int):
        """`instances` of the type as allreduce_model's Topology, at `network_gbps` where given."""
        from utils import allreduce_model as am

        one = _one_instance(self.instance_type)
        t = am.Topology(one.gpus, int(instances), one.inside, one.network)
        if self.network_gbps is None:
            return t
        net = am.Link(self.network_gbps * 1e9 / 8, t.network.latency)
        return am.Topology(t.gpus, t.servers, net if t.gpus == 1 else t.inside, net)

    def step(self, instances: int) -> tuple[float, float]:
        """One step's seconds with `instances` instances, and its allreduce's seconds."""
        from utils import allreduce_model as am

        topo = self.topology(instances)
        compute = self.step_seconds / self.speedup
        if topo.n > 1:
            compute /= self.efficiency
        comm = am.fastest_algorithm(topo, self.grad_bytes)[1] if topo.n > 1 else 0.0
        if self.layers is None or topo.n == 1:
            return compute * float(am.step_efficiency(compute, comm, self.overlap)) ** -1, comm
        sizes = np.array([b for b, _ in self.layers], dtype=float)
        sizes *= self.grad_bytes / sizes.sum()
        work = np.array([w for _, w in self.layers], dtype=float)
        step = am.overlap_step(
            compute,
            sizes,
            lambda nbytes: am.fastest_algorithm(topo, nbytes)[1],
            work if work.sum() > 0 else None,
            backward_share=self.overlap,
            fusion=self.fusion or am.HOROVOD_NOW,
        )
        return step.seconds, comm

    def packed(self, bytes_per_pack: float) -> Fleet:
        """This fleet with TensorFlow's MultiWorkerMirroredStrategy packs of `bytes_per_pack` (0: one pack) in place
        of Horovod's cycle (allreduce_model.Packs); it needs `layers`."""
        from utils import allreduce_model as am

        if self.layers is None:
            raise ValueError("TensorFlow's packs are of the layers' gradients: give the fleet its layers")
        return replace(self, fusion=am.Packs(f"TensorFlow's packs of {bytes_per_pack / 2**20:g} MiB", bytes_per_pack))

    @staticmethod
    def layers_of(model: str) -> tuple[tuple[float, float], ...]:
        """`layers` for one of data/keras_layer_gradients.csv's models, in backward order."""
        from utils import allreduce_model as am

        table = am.layer_gradients(model)
        return tuple(zip(table.gradient_bytes.astype(float), table.macs.astype(float), strict=True))

    def run_hours(self, n, training_hours: float) -> np.ndarray:
        """Hours of training with `n` instances (a number or an array) for a job of `training_hours` on today's GPU."""
        n = np.atleast_1d(np.asarray(n, dtype=int))
        if np.any(n < 1):
            raise ValueError("a fleet has at least 1 instance")
        steps = training_hours * HOUR / self.step_seconds  # on today's GPU; each GPU of the fleet runs steps / GPUs
        out = np.array([steps / (k * self.gpus) * self.step(int(k))[0] / HOUR for k in n])
        return out if out.size > 1 else out[0]


def fewest(work: Workload, fleet: Fleet, at_least: int = 1, most: int = 1024) -> int | None:
    """The fewest instances (at least `at_least`) whose run meets the deadline, or None within `most`. A run's hours
    fall as instances are added (each GPU runs fewer steps; the allreduce grows far slower), so the search doubles,
    then halves."""

    def fits(k: int) -> bool:
        return float(fleet.run_hours(k, work.training_hours)) <= work.budget_hours

    if fits(at_least):
        return at_least
    low, high = at_least, at_least * 2
    while not fits(high):
        if high >= most:
            return None
        low, high = high, min(2 * high, most)
    while high - low > 1:  # low does not fit, high does
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    return high


@dataclass(frozen=True)
class Choice:
    """One way of running the job on today's instances: how it is sized and what its code is."""

    key: str  # the row's letter
    name: str
    fleet: Fleet | None  # None: one GPU with no allreduce (speedup only), or not comparable
    usd: object | None  # a prices.Price, or None where none applies
    lines: int | None
    infra: str
    risks: str
    at_least: int = 1  # 2 for "several instances"
    only: int | None = None  # 1 for "one instance"
    speedup: float | None = None  # for a single GPU (row A)
    ec2_usd: float | None = None  # the EC2 on-demand price an estimate was made from (to vary the ratio)
    precision: str = "float32"  # the policy its job trains with (train_mwms.py's --precision)
    pack_bytes: int | None = None  # MWMS rows: the packs its job allreduces (train_mwms.py's --bytes-per-pack)

    @property
    def job_hyperparameters(self) -> dict[str, object]:
        """What its job must be given to run as the row is sized (train_mwms.py's options): its precision where mixed;
        for an MWMS row, its packs and NCCL (AUTO would leave TensorFlow its own ring, not NCCL's that the model has)."""
        out: dict[str, object] = {} if self.precision == "float32" else {"precision": self.precision}
        if self.pack_bytes is not None:
            out |= {"bytes-per-pack": self.pack_bytes, "collective": "NCCL"}
        return out


def option_rows(
    work: Workload, choices: list[Choice], spot_fraction: float, ratio: float | None = None
) -> list[Option]:
    """The options table: each choice sized with its fleet's overlapped step (the serial bound beside it) and priced;
    with `ratio`, every estimated price becomes its EC2 price x `ratio` (a quoted price is left as it is)."""
    if not 0 < spot_fraction <= 1:
        raise ValueError(f"spot_fraction is the spot price's share of on demand, in (0, 1], got {spot_fraction}")
    if ratio is not None and not ratio > 0:
        raise ValueError(f"ratio is SageMaker's price over EC2's, positive, got {ratio}")
    runs = 24 / work.deadline_hours
    overhead = work.overhead_minutes / 60
    rows = []
    for c in choices:
        label = f"{c.key}. {c.name}"
        hourly = None
        if c.usd is not None:
            hourly = c.usd.usd_per_hour
            if ratio is not None and c.usd.kind == "estimate":
                if c.ec2_usd is None:
                    raise ValueError(f"{label}: an estimate needs the EC2 price it was made from (ec2_usd)")
                hourly = c.ec2_usd * ratio
        kind = "" if c.usd is None else c.usd.kind
        if c.fleet is None and c.speedup is None:
            rows.append(Option(label, None, None, None, None, None, c.lines, c.infra, c.risks, price_kind=kind))
            continue
        if c.fleet is None:  # one GPU alone: no allreduce
            h = work.training_hours / c.speedup + overhead
            rows.append(Option(label, h <= work.deadline_hours, h, 1, None, None, c.lines, c.infra, c.risks, h, kind))
            continue
        if c.only is not None:
            n = c.only if float(c.fleet.run_hours(c.only, work.training_hours)) <= work.budget_hours else None
        else:
            n = fewest(work, c.fleet, c.at_least)
        serial_fleet = replace(c.fleet, overlap=0.0)
        shown = n if n is not None else (c.only or c.at_least)
        h = float(c.fleet.run_hours(shown, work.training_hours)) + overhead
        h_serial = float(serial_fleet.run_hours(shown, work.training_hours)) + overhead
        day = None if (n is None or hourly is None) else usd_per_day(n, h, hourly, runs)
        rows.append(
            Option(
                label,
                n is not None,
                h,
                shown,
                day,
                None if day is None else day * spot_fraction,
                c.lines,
                c.infra,
                c.risks,
                h_serial,
                kind,
            )
        )
    return rows


def serial_instances(work: Workload, fleet: Fleet, at_least: int = 1) -> int | None:
    """The fewest instances when the whole allreduce follows every step (the serial T(N): the pessimistic bound)."""
    return fewest(work, replace(fleet, overlap=0.0), at_least)


class Heartbeat:
    """Print a line every `every` seconds while a long measurement runs silently: what runs, for how long, and what
    share of the machine other programs took so far (from a steady.CpuWatch, if given)."""

    def __init__(self, what: str, every: float = 7.0, watch=None, limit: float | None = None):
        self.what, self.every, self.watch, self.limit = what, every, watch, limit
        self._beat = None

    def others_share(self) -> float | None:
        """The share of the machine other programs took since the watch began, or None without a watch."""
        import time

        w = self.watch
        if w is None or not hasattr(w, "_start"):
            return None
        from utils import envinfo

        seconds = time.perf_counter() - w._start
        return min(1.0, w._others / (seconds * envinfo.cpu_info().usable_cores)) if seconds > 0 else 0.0

    def says(self, seconds: float) -> str:
        """The line shown after `seconds` of the measurement."""
        share = self.others_share()
        busy = "" if share is None else f"; other programs took {share:.0%} of the machine so far"
        if share is not None and self.limit is not None and share > self.limit:
            busy += f" (above {self.limit:.0%}: unless that drops, this measurement will be set aside)"
        return f"  ... {self.what}: {seconds:.0f} s{busy}"

    def __enter__(self) -> Heartbeat:
        from utils import heartbeat

        if self.what:  # the measurement's start is a line too: the silence between two measurements stays short
            print(f"  {self.what} ...", flush=True)
        self._beat = heartbeat.stream(False, every=self.every, says=self.says)
        shown = self._beat.__enter__()
        if self.what:
            shown.touch()  # the line above: a stream that carries on from an earlier one must not note at once
        return self

    def __exit__(self, *exc) -> None:
        self._beat.__exit__(*exc)


def request_on_type(config, aws, instance_type: str) -> dict:
    """The CreateTrainingJob request of `config` on `instance_type`, validated against botocore's SageMaker model.

    sagemaker_job.JobConfig checks a job's shape against data/instance_prices.csv, which has no row for the types
    priced only in data/aws_gpu_prices.csv (ml.p4d.24xlarge ...): the request is built for `config`'s instance type
    (one with the same GPUs, ranks and image) and its InstanceType then set to `instance_type`."""
    from utils import allreduce_model
    from utils import sagemaker_job as sj

    table = allreduce_model.instances()
    if instance_type not in table.index:
        raise ValueError(
            f"unknown instance type {instance_type!r}: data/gpu_instances.csv knows {', '.join(table.index)}"
        )
    gpus = int(table.loc[instance_type, "gpus"])
    stand_in = int(sj.prices().loc[config.instance_type, "gpus"])
    if stand_in != gpus:
        raise ValueError(
            f"{config.instance_type} has {stand_in} GPU(s), {instance_type} {gpus}: choose a stand-in with as many"
        )
    request = sj.request_for(config, aws)
    request["ResourceConfig"]["InstanceType"] = instance_type
    sj.validate(request)
    return request


#: The mixed-precision policy of the rows sized with NVIDIA's mixed-precision figures (train_mwms.py's --precision):
#: bfloat16, which A100s and H100s compute at float16's tensor-core rate and which needs no loss scaling.
MIXED = "mixed_bfloat16"
#: The packs the MWMS rows' jobs allreduce and are sized with (train_mwms.py's --bytes-per-pack). TensorFlow's default,
#: 0, is one pack of every gradient, sent once the backward pass has ended: in lesson 08's model, at the one-GPU
#: machines' link, far slower than 4 MiB packs, which come near Horovod's cycle; inside one 8-GPU instance the packs
#: barely matter.
MWMS_PACK_BYTES = 4 * 2**20


def today_choices(
    work: Workload,
    grad_bytes: float,
    efficiency: float,
    price: dict,
    speedups: dict[str, float],
    lines: dict[str, int],
    p3_gbps: float,
    layers: tuple[tuple[float, float], ...] | None = None,
) -> list[Choice]:
    """Lesson 08's options on today's instances. `price`: a prices.Price by ml. type (ml.p3.2xlarge, ml.g6e.12xlarge,
    ml.p4d.24xlarge, ml.p5.48xlarge); `speedups`: one GPU against today's V100 in float32 ("A100", "H100");
    `lines`: the lines each script adds to the single-worker one ("horovod" with its bridge, "mwms"), and "precision"
    the MWMS script's lines for lesson 06's mixed precision; `p3_gbps`: the one-GPU machines' link; `layers`: the
    job's layers (Fleet.layers_of), for the per-layer overlap. Inside one instance the MWMS script mirrors over all
    its GPUs. The rows sized with a mixed-precision speed (A, G, H, I) train with MIXED, and so would F (no L40S figure
    sizes it); B and E, sized from the V100's float32 step, train in float32. B is sized with Horovod's cycle
    (allreduce_model.HOROVOD_NOW), the MWMS rows (E to I) with TensorFlow's packs of MWMS_PACK_BYTES
    (allreduce_model.Packs), which their jobs set (Choice.job_hyperparameters)."""
    from utils import prices

    ec2 = {t: prices.ec2_price(t.removeprefix("ml.")).usd_per_hour for t in price}
    need = work.training_hours / (4 * work.budget_hours * efficiency)  # per L40S to meet the hour, before the allreduce
    mixed = lines["mwms"] + lines["precision"]

    def fleet(t: str, x: float = 1.0, gbps: float | None = None) -> Fleet:
        return Fleet(t, grad_bytes, speedup=x, efficiency=efficiency, network_gbps=gbps, layers=layers)

    def on(t: str, key: str, name: str, x: float, infra: str, risks: str, **kw) -> Choice:
        mwms = {"precision": MIXED, "pack_bytes": MWMS_PACK_BYTES}
        packed = fleet(t, x).packed(MWMS_PACK_BYTES) if layers else fleet(t, x)
        return Choice(key, name, packed, price[t], mixed, infra, risks, ec2_usd=ec2[t], **mwms, **kw)

    p3, p3_price = fleet("ml.p3.2xlarge", 1.0, p3_gbps), price["ml.p3.2xlarge"]
    p3_mwms = p3.packed(MWMS_PACK_BYTES) if layers else p3
    one_gpu = "one V100 per instance, ENA"
    return [
        Choice("A", "one faster GPU (A100, mixed)", None, None, lines["precision"], "a new type", "no 1-GPU A100", speedup=speedups["A100"], precision=MIXED),
        Choice("B", "Horovod, ml.p3.2xlarge (source)", p3, p3_price, lines["horovod"], one_gpu, "Horovod: 2023", ec2_usd=ec2["ml.p3.2xlarge"]),
        Choice("C", "SageMaker DeepAR", None, None, None, "built-in algorithm", "another model; not incremental"),
        Choice("D", "Amazon EMR", None, None, None, "a Spark cluster", "still needs B's or E's code"),
        Choice("E", "MWMS, ml.p3.2xlarge", p3_mwms, p3_price, lines["mwms"], one_gpu, "Keras 3 fit fails under MWMS", ec2_usd=ec2["ml.p3.2xlarge"], pack_bytes=MWMS_PACK_BYTES),
        Choice("F", "one ml.g6e.12xlarge (4 L40S)", None, price["ml.g6e.12xlarge"], mixed, "PCIe inside", f"no L40S figure; needs x{need:.1f} a GPU", ec2_usd=ec2["ml.g6e.12xlarge"], precision=MIXED, pack_bytes=MWMS_PACK_BYTES),
        on("ml.p4d.24xlarge", "G", "one ml.p4d.24xlarge (8 A100)", speedups["A100"], "NVSwitch inside", "no network", only=1),
        on("ml.p5.48xlarge", "H", "one ml.p5.48xlarge (8 H100)", speedups["H100"], "NVSwitch inside", "no network", only=1),
        on("ml.p4d.24xlarge", "I", "ml.p4d.24xlarge over EFA", speedups["A100"], "EFA between", "several instances", at_least=2),
    ]  # fmt: skip


#: The options table's columns as the lesson shows them.
TABLE_COLUMNS = {
    "meets_deadline": "meets the hour",
    "instances": "instances",
    "hours_per_run": "h a run",
    "serial_hours": "h (serial)",
    "usd_per_day": "$ a day",
    "usd_per_day_spot": "$ a day, spot",
    "price_kind": "price",
    "code_lines": "lines",
}


def options_frame(options: list[Option]):
    """The options as a pandas DataFrame with the lesson's columns (infra and risks left to the deep dive)."""
    import pandas as pd

    frame = pd.DataFrame([o.__dict__ for o in options]).set_index("name")
    return frame[list(TABLE_COLUMNS)].rename(columns=TABLE_COLUMNS)
