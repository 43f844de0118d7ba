"""The capstone's decision: workload, T(N) with efficiency, the smallest cluster, costs, the choice, the warm
start and the hourly EventBridge schedule (checked against botocore's models and moto)."""

from __future__ import annotations

import copy
import json
import math
import re

import botocore.session
import numpy as np
import pytest

from utils import capstone as cap
from utils import data, paths
from utils import sagemaker_job as sj

# ----------------------------------------------------------------------------------------------------
# Workload


def test_growth_compounds_monthly():
    assert cap.Workload().growth == 1.0, "no months ahead: today's data"
    assert cap.Workload(monthly_growth=0.05, months=12).growth == pytest.approx(1.05**12)
    assert cap.Workload(monthly_growth=0.0, months=36).growth == 1.0
    assert cap.Workload(monthly_growth=0.10, months=6).growth == pytest.approx(1.771561)


def test_training_hours_scale_with_growth_and_warm_share():
    assert cap.Workload(job_hours=23.0).training_hours == pytest.approx(23.0)
    assert cap.Workload(job_hours=23.0, monthly_growth=0.05, months=12).training_hours == pytest.approx(
        23.0 * 1.7958563
    )
    full = cap.Workload(job_hours=23.0, monthly_growth=0.05, months=12)
    half = cap.Workload(job_hours=23.0, monthly_growth=0.05, months=12, warm_fraction=0.5)
    assert half.training_hours == pytest.approx(full.training_hours / 2)


def test_budget_is_deadline_less_overheads():
    assert cap.Workload(deadline_hours=1.0, overhead_minutes=10).budget_hours == pytest.approx(50 / 60)
    assert cap.Workload(deadline_hours=2.0, overhead_minutes=0).budget_hours == pytest.approx(2.0)


def test_negative_growth_is_refused_with_why():
    with pytest.raises(ValueError, match="negative"):
        cap.Workload(monthly_growth=-0.01)


@pytest.mark.parametrize(("deadline_hours", "overhead_minutes", "deadline_text"), [(1 / 6, 10, "10"), (0.1, 10, "6")])
def test_deadline_within_the_overheads_cannot_be_met(deadline_hours, overhead_minutes, deadline_text):
    with pytest.raises(ValueError, match="no configuration can meet") as err:
        cap.Workload(deadline_hours=deadline_hours, overhead_minutes=overhead_minutes)
    message = str(err.value)
    assert f"{deadline_text} min" in message, "the message gives the deadline in minutes"
    assert "10 min" in message, "the message names the overhead minutes"


def test_deadline_just_above_the_overheads_is_accepted():
    work = cap.Workload(deadline_hours=11 / 60, overhead_minutes=10)
    assert work.budget_hours == pytest.approx(1 / 60)


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.01, 2.0])
def test_warm_fraction_outside_zero_one_is_refused(fraction):
    with pytest.raises(ValueError, match="warm_fraction"):
        cap.Workload(warm_fraction=fraction)


def test_warm_fraction_one_is_a_full_run():
    assert cap.Workload(warm_fraction=1.0).training_hours == pytest.approx(23.0)


def test_zero_deadline_is_refused_as_such():
    with pytest.raises(ValueError, match="deadline_hours must be positive"):
        cap.Workload(deadline_hours=0)


# ----------------------------------------------------------------------------------------------------
# Cluster.run_hours


def test_one_worker_takes_exactly_the_training_hours():
    for cluster in (
        cap.Cluster(grad_bytes=4e6),
        cap.Cluster(grad_bytes=4e8, link_gbps=1, efficiency=0.5, scale_batch=False),
    ):
        assert float(cluster.run_hours(1, 7.25)) == 7.25, "one worker has no allreduce and no scaling loss"


def test_perfect_scaling_on_a_huge_link_approaches_training_over_n():
    cluster = cap.Cluster(grad_bytes=4e6, link_gbps=1e9, step_latency=0.0, efficiency=1.0, scale_batch=False)
    n = np.array([1, 2, 4, 8, 64, 512])
    np.testing.assert_allclose(cluster.run_hours(n, 23.0), 23.0 / n, rtol=1e-6)
    with_latency = cap.Cluster(grad_bytes=4e6, link_gbps=1e9, efficiency=1.0, scale_batch=False)
    np.testing.assert_allclose(with_latency.run_hours(n[:4], 23.0), 23.0 / n[:4], rtol=1e-2)


def test_lower_efficiency_slows_every_n_above_one_only():
    n = np.arange(1, 257)
    perfect = cap.Cluster(grad_bytes=4e6, efficiency=1.0).run_hours(n, 23.0)
    measured = cap.Cluster(grad_bytes=4e6, efficiency=0.8).run_hours(n, 23.0)
    assert measured[0] == perfect[0] == 23.0
    assert np.all(measured[1:] > perfect[1:])
    # the compute part is divided by the efficiency, the communication is not
    np.testing.assert_allclose(measured[1:] - perfect[1:], (23.0 / n[1:]) * (1 / 0.8 - 1), rtol=1e-9)


def test_scaled_batch_keeps_falling_while_a_fixed_batch_turns_back_up():
    n = np.arange(1, 4097)
    scaled = cap.Cluster(grad_bytes=1e8, link_gbps=10, efficiency=0.9, scale_batch=True).run_hours(n, 23.0)
    assert np.all(np.diff(scaled) < 0), "each worker keeps its batch: fewer steps, so more workers always help"
    fixed = cap.Cluster(grad_bytes=1e8, link_gbps=10, efficiency=0.9, scale_batch=False).run_hours(n, 23.0)
    best = int(np.argmin(fixed))
    assert 0 < best < len(n) - 1 and fixed[-1] > fixed[best], "a fixed batch pays every allreduce: T(N) rises again"


@pytest.mark.parametrize(("scale_batch", "comm_steps"), [(True, 7200 / 4), (False, 7200)])
def test_run_hours_by_hand_from_the_ring_formula(scale_batch, comm_steps):
    # 1 h of training: C = 3600 s, step 0.5 s -> S = 7200 steps; N = 4, e = 0.8, K = 100 MB, 10 Gb/s, l = 20 us
    cluster = cap.Cluster(
        grad_bytes=100e6, step_seconds=0.5, link_gbps=10, step_latency=20e-6, efficiency=0.8, scale_batch=scale_batch
    )
    bandwidth = 10e9 / 8  # 1.25e9 bytes/s
    allreduce = 2 * 3 * 20e-6 + 2 * 3 / 4 * 100e6 / bandwidth  # 0.00012 + 0.12 = 0.12012 s
    assert allreduce == pytest.approx(0.12012)
    seconds = 3600 / (4 * 0.8) + comm_steps * allreduce  # 1125 + steps x 0.12012
    assert float(cluster.run_hours(4, 1.0)) == pytest.approx(seconds / 3600, rel=1e-12)
    if scale_batch:
        assert seconds == pytest.approx(1341.216)


def test_cluster_rejects_bad_figures():
    with pytest.raises(ValueError, match="efficiency"):
        cap.Cluster(grad_bytes=4e6, efficiency=0)
    with pytest.raises(ValueError, match="efficiency"):
        cap.Cluster(grad_bytes=4e6, efficiency=1.2)
    with pytest.raises(ValueError, match="link_gbps"):
        cap.Cluster(grad_bytes=4e6, link_gbps=0)


# ----------------------------------------------------------------------------------------------------
# usd_per_day and decide


def test_usd_per_day_by_hand():
    assert cap.usd_per_day(4, 0.75, 1.212, 24) == pytest.approx(87.264)  # 4 x 0.75 h x $1.212 x 24 runs
    assert cap.usd_per_day(1, 23.0, 1.0, 1) == pytest.approx(23.0)


def option(name, meets, usd, lines, infra="SageMaker"):
    return cap.Option(
        name=name,
        meets_deadline=meets,
        hours_per_run=0.9,
        instances=4,
        usd_per_day=usd,
        usd_per_day_spot=None if usd is None else usd * 0.3,
        code_lines=lines,
        infra=infra,
        risks="-",
    )


def test_decide_picks_the_cheapest_option_that_meets_the_deadline():
    options = [
        option("big cluster", True, 300.0, 40),
        option("warm start", True, 120.0, 60),
        option("too slow", False, 10.0, 0),
        option("smaller model", None, 5.0, 5),
    ]
    decision = cap.decide(options)
    assert decision.option.name == "warm start"
    assert "warm start" in decision.reason and "$120" in decision.reason


def test_decide_on_equal_cost_picks_fewer_lines_and_says_so():
    options = [option("Horovod", True, 200.0, 45), option("MWMS", True, 200.0, 12), option("slow", False, 1.0, 0)]
    decision = cap.decide(options)
    assert decision.option.name == "MWMS"
    assert "MWMS" in decision.reason and "Horovod" in decision.reason
    assert "12" in decision.reason and "45" in decision.reason


def test_decide_costs_within_a_cent_are_equal():
    decision = cap.decide([option("A", True, 100.004, 30), option("B", True, 99.996, 10)])
    assert decision.option.name == "B"
    decision = cap.decide([option("A", True, 99.99, 30), option("B", True, 100.00, 10)])
    assert decision.option.name == "A", "a cent cheaper wins over fewer lines"


@pytest.mark.parametrize(
    "options",
    [
        [option("too slow", False, 10.0, 0), option("way too slow", False, 1.0, 0)],
        [option("no figure", None, 1.0, 0), option("too slow", False, 1.0, 0)],
        [],
    ],
)
def test_decide_refuses_when_nothing_meets_the_deadline(options):
    with pytest.raises(ValueError, match="no option meets the deadline"):
        cap.decide(options)


def test_decide_never_chooses_a_not_comparable_option():
    options = [option("other model", None, 0.5, 1), option("cluster", True, 500.0, 80)]
    assert cap.decide(options).option.name == "cluster"


def test_decide_prefers_a_free_option():
    options = [option("paid", True, 50.0, 10), option("free spare GPUs", True, 0.0, 10)]
    assert cap.decide(options).option.name == "free spare GPUs"


def test_decide_ranks_unknown_lines_last_and_refuses_an_unpriced_option():
    known, unknown = option("known", True, 50.0, 10), option("unknown", True, 50.0, None)
    assert cap.decide([unknown, known]).option.name == "known"
    same = cap.decide([option("p", True, 50.0, 10), option("q", True, 50.0, 10)])
    assert "no more lines (10 against 10)" in same.reason
    with pytest.raises(ValueError, match="no cost per day"):
        cap.decide([option("unpriced", True, None, 10)])


# ----------------------------------------------------------------------------------------------------
# warm_start (one small real run)


@pytest.fixture(scope="module")
def warm():
    return cap.warm_start(data.synthetic_series(1500), epochs=2)


def test_warm_start_stops_at_the_first_epoch_reaching_scratch(warm):
    assert len(warm.scratch_val) == 2
    assert all(math.isfinite(v) for v in warm.scratch_val + warm.warm_val)
    target = warm.scratch_val[-1]
    if warm.epochs_needed is None:
        assert len(warm.warm_val) == 2 and all(v > target for v in warm.warm_val)
        assert warm.fraction is None
    else:
        assert 1 <= warm.epochs_needed <= 2
        assert len(warm.warm_val) == warm.epochs_needed, "no epoch is trained past the one that reaches scratch"
        assert warm.warm_val[warm.epochs_needed - 1] <= target
        assert all(v > target for v in warm.warm_val[: warm.epochs_needed - 1])
        assert warm.fraction == warm.epochs_needed / 2


def test_warm_start_fraction_of_a_given_result():
    assert cap.WarmStart(scratch_val=[3, 2, 1, 0.5], warm_val=[0.9, 0.4], epochs_needed=2).fraction == 0.5
    assert cap.WarmStart(scratch_val=[3, 2], warm_val=[2.5, 2.1], epochs_needed=None).fraction is None


@pytest.mark.parametrize(("old_fraction", "epochs", "match"), [(0.0, 2, "old_fraction"), (1.0, 2, "old_fraction")])
def test_warm_start_rejects_bad_old_fraction(old_fraction, epochs, match):
    with pytest.raises(ValueError, match=match):
        cap.warm_start(data.synthetic_series(1500), epochs=epochs, old_fraction=old_fraction)


def test_warm_start_rejects_zero_epochs():
    with pytest.raises(ValueError, match="epochs"):
        cap.warm_start(data.synthetic_series(1500), epochs=0)


# ----------------------------------------------------------------------------------------------------
# The hourly schedule (EventBridge Scheduler -> SageMaker CreateTrainingJob)


@pytest.fixture(scope="module")
def aws_request():
    with sj.offline_aws() as aws:
        yield aws, sj.request_for(sj.JobConfig(kind="mwms", instances=2), aws)


@pytest.fixture(scope="module")
def job_name_pattern():
    pattern = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingJobName")
    return pattern.metadata["pattern"]


def test_schedule_is_a_valid_create_schedule_request(aws_request):
    _, request = aws_request
    before = copy.deepcopy(request)
    schedule = cap.hourly_schedule(request, request["RoleArn"])
    assert request == before, "building the schedule leaves the training request as it was"
    sj.validate(schedule, "CreateSchedule", "scheduler")
    assert schedule["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:sagemaker:createTrainingJob"
    assert schedule["Target"]["RoleArn"] == request["RoleArn"]
    assert schedule["ScheduleExpression"] == "rate(1 hour)"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    sent = json.loads(schedule["Target"]["Input"])
    assert sent["TrainingJobName"].endswith("-<aws.scheduler.execution-id>")
    # retries bounded within minutes, far below the scheduler's own limits (the service model's maxima)
    limits = botocore.session.get_session().get_service_model("scheduler").shape_for("RetryPolicy").members
    retry = schedule["Target"]["RetryPolicy"]
    assert retry == {"MaximumEventAgeInSeconds": 600, "MaximumRetryAttempts": 3}
    assert retry["MaximumEventAgeInSeconds"] < limits["MaximumEventAgeInSeconds"].metadata["max"]
    assert retry["MaximumRetryAttempts"] < limits["MaximumRetryAttempts"].metadata["max"]


def test_flexible_window(aws_request):
    _, request = aws_request
    schedule = cap.hourly_schedule(request, request["RoleArn"], window_minutes=15)
    sj.validate(schedule, "CreateSchedule", "scheduler")
    assert schedule["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 15}


def test_invocation_is_the_training_request_under_a_unique_valid_name(aws_request, job_name_pattern):
    _, request = aws_request
    schedule = cap.hourly_schedule(request, request["RoleArn"])
    first = cap.invocation(schedule, "d32c5kddcf5bb8c3")
    second = cap.invocation(schedule, "a81f0c29be47d513")
    for inv in (first, second):
        sj.validate(inv)
        assert re.fullmatch(job_name_pattern, inv["TrainingJobName"]), inv["TrainingJobName"]
        assert len(inv["TrainingJobName"]) <= 63
        assert "<" not in json.dumps(inv), "the execution id placeholder is filled in"
        assert {k: v for k, v in inv.items() if k != "TrainingJobName"} == {
            k: v for k, v in request.items() if k != "TrainingJobName"
        }
    assert first["TrainingJobName"] != second["TrainingJobName"]
    assert first["TrainingJobName"].startswith("course-mwms") and "d32c5kddcf5bb8c3" in first["TrainingJobName"]


def test_invocation_name_stays_valid_for_a_long_job_name(aws_request, job_name_pattern):
    _, request = aws_request
    long = dict(request, TrainingJobName="forecaster-capstone-hourly-retraining-job-" + "x" * 6 + "-20261125025238")
    assert len(long["TrainingJobName"]) == 63 and re.fullmatch(job_name_pattern, long["TrainingJobName"])
    inv = cap.invocation(cap.hourly_schedule(long, request["RoleArn"]), "d32c5kddcf5bb8c3")
    sj.validate(inv)
    assert re.fullmatch(job_name_pattern, inv["TrainingJobName"]), inv["TrainingJobName"]


def test_schedule_can_be_created_in_moto(aws_request):
    aws, request = aws_request
    schedule = cap.hourly_schedule(request, request["RoleArn"], name="forecaster-hourly-moto", window_minutes=15)
    client = aws.boto.client("scheduler")
    try:
        client.create_schedule(**schedule)
        stored = client.get_schedule(Name=schedule["Name"])
    except NotImplementedError as exc:  # pragma: no cover - depends on the moto version
        pytest.skip(f"moto does not emulate EventBridge Scheduler's CreateSchedule/GetSchedule: {exc}")
    assert stored["ScheduleExpression"] == "rate(1 hour)"
    assert stored["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 15}
    assert stored["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:sagemaker:createTrainingJob"
    assert json.loads(stored["Target"]["Input"]) == json.loads(schedule["Target"]["Input"])


def test_each_scheduled_run_gets_its_own_checkpoint_prefix():
    with sj.offline_aws() as aws:
        request = sj.request_for(sj.JobConfig(kind="mwms", instances=2, checkpoints=True), aws)
    schedule = cap.hourly_schedule(request, request["RoleArn"])
    first, second = cap.invocation(schedule, "aaaa1111"), cap.invocation(schedule, "bbbb2222")
    base = request["CheckpointConfig"]["S3Uri"]
    assert first["CheckpointConfig"]["S3Uri"] == f"{base}/aaaa1111"
    assert second["CheckpointConfig"]["S3Uri"] == f"{base}/bbbb2222", "a run must not resume the last run's epochs"
    sj.validate(first)


def test_the_lab_link_keeps_the_clusters_ratio_of_allreduce_to_computation():
    cluster = cap.Cluster(grad_bytes=100e6, step_seconds=0.5, link_gbps=25.0)
    bps = cap.scaled_link_bps(cluster, lab_grad_bytes=10e6, lab_step_seconds=0.25)
    assert bps == pytest.approx(25e9 * 0.1 * 2)  # a tenth of the bytes in half the time

    # the same ratio: ring bytes over the link, divided by the step
    def share(grad_bytes, bits_per_s, step):
        return 2 * 0.5 * grad_bytes / (bits_per_s / 8) / step

    assert share(10e6, bps, 0.25) == pytest.approx(share(100e6, 25e9, 0.5))
    with pytest.raises(ValueError):
        cap.scaled_link_bps(cluster, 0, 1)


def test_residual_efficiency_is_what_the_model_leaves_unexplained():
    # two workers should compute 1.0 s a step and allreduce 0.1 s; they took 1.25 s: 1.15 s for the computation
    assert cap.residual_efficiency(0.9, 1.0, 1.25, 0.1) == pytest.approx(1.0 / 1.15)
    # faster than the model: capped at 1 (no super-linear credit)
    assert cap.residual_efficiency(0.9, 1.0, 1.0, 0.1) == 1.0
    with pytest.raises(ValueError, match="swapped"):
        cap.residual_efficiency(2.0, 1.0, 1.2, 0.1)


def test_a_disturbed_round_does_not_stop_the_lesson_the_steadiness_check_judges_it():
    """Round 2's one worker was slowed by another program (0.617 s against 0.407 s side by side, as seen in a
    test run beside others): per_round still gives every round's value, and the spread of the rounds (here
    within tolerance) and what other programs took decide whether the verdict may use them."""
    steps = {"one worker": [0.40, 0.617], "two side by side": [0.41, 0.407], "two workers, scaled link": [0.5, 0.52]}
    cal = cap.Calibration(steps=steps, link_bps=1e8, comm_seconds=0.05, where="on loopback")
    assert cal.per_round() == pytest.approx([0.41 / 0.45, 0.407 / 0.47])
    with pytest.raises(ValueError, match="disturbed"):  # a single measurement is still refused
        cap.residual_efficiency(0.617, 0.407, 0.52, 0.05)


def test_the_cluster_model_reproduces_its_own_calibration_point():
    """T(N) with the residual efficiency gives back, at N = 2, the two-worker step it was measured from."""
    busy, two = 0.8, 1.3
    cluster = cap.Cluster(grad_bytes=50e6, step_seconds=busy, link_gbps=1.0, step_latency=0.0)
    comm = 2 * 0.5 * 50e6 / (1e9 / 8)  # the ring at N = 2: each worker sends the gradient once
    e = cap.residual_efficiency(busy, busy, two, comm)
    hours = 10.0
    steps_each = hours * cap.HOUR / busy / 2  # each worker keeps its batch: half the steps each
    per_step = cap.Cluster(**{**cluster.__dict__, "efficiency": e}).run_hours(2, hours) * cap.HOUR / steps_each
    assert per_step == pytest.approx(two)


# ----------------------------------------------------------------------------------------------------
# Calibration where the network lab cannot run (lesson 08's fallback)


def test_calibration_without_the_lab_runs_on_loopback_charges_no_link_and_says_why(monkeypatch):
    """What lesson 08 prints as `measured {cal.where}` on a machine without the lab: every run still happens, on
    loopback, and no allreduce time is credited to the workers for a link they never crossed."""
    from utils import netlab, paths

    monkeypatch.setenv("COURSE_NETLAB", "off")
    netlab.support.cache_clear()  # checked once per process: another test may have found the lab
    tiny = ["--width", "32", "--depth", "1", "--batch-size", "64", "--epochs", "2", "--data-size", str(64 * 2 * 3 + 24)]
    cluster = cap.Cluster(grad_bytes=1e8, link_gbps=10.0)
    try:
        cal = cap.calibrate(cluster, 4e6, paths.SCRIPTS / "train_mwms.py", tiny, rounds=1, timeout=240)
    finally:
        netlab.support.cache_clear()  # the next test checks the machine afresh
    assert cal.where.startswith("over loopback (COURSE_NETLAB=off is set"), cal.where
    assert cal.comm_seconds == 0.0 and cal.link_bps == 0.0
    assert {k: len(v) for k, v in cal.steps.items()} == dict.fromkeys(cal.steps, 1)
    assert all(v[0] > 0 for v in cal.steps.values()), cal.steps
    lesson = (paths.NOTEBOOKS / "08_capstone.ipynb").read_text()
    assert "measured {cal.where}" in lesson, "lesson 08 no longer says where its calibration ran"


# ----------------------------------------------------------------------------------------------------
# 2026: fleets of today's instances, sized with the two-level model and the overlap


RESNET50 = 4 * 25.6e6  # ResNet-50's gradient in float32, as the lesson takes it


def test_the_sustained_baseline_is_read_where_aws_gives_one():
    assert cap.baseline_gbps("ml.p3.2xlarge") == 2.5
    assert cap.baseline_gbps("ml.p4d.24xlarge") is None, "EFA's 400 Gbit/s is sustained"
    with pytest.raises(ValueError, match="ml.p3.2xlarge"):
        cap.baseline_gbps("ml.p9.huge")


def test_the_overlapped_step_hides_the_allreduce_behind_the_backward_pass():
    fleet = cap.Fleet("ml.p3.2xlarge", RESNET50, network_gbps=2.5)
    step, comm = fleet.step(40)
    compute = fleet.step_seconds
    assert comm > 2 / 3 * compute, "at 2.5 Gbit/s the allreduce outlasts the backward pass"
    assert step == pytest.approx(compute / 3 + comm), "only the forward third is not overlapped"
    serial = cap.Fleet("ml.p3.2xlarge", RESNET50, network_gbps=2.5, overlap=0.0)
    assert serial.step(40)[0] == pytest.approx(compute + comm)
    inside = cap.Fleet("ml.p4d.24xlarge", RESNET50, speedup=5.0)
    step, comm = inside.step(1)
    assert comm < 2 / 3 * step and step == pytest.approx(compute / 5), "NVSwitch: the allreduce hides entirely"


def test_with_layers_a_gradient_leaves_only_once_the_backward_pass_made_it():
    from utils import allreduce_model as am

    # two layers of equal bytes and work; no fusion and no cycle: each leaves the moment it is ready
    two = ((1.0, 1.0), (1.0, 1.0))
    by_layer = cap.Fleet("ml.p3.2xlarge", RESNET50, network_gbps=2.5, layers=two, fusion=am.UNFUSED)
    whole = cap.Fleet("ml.p3.2xlarge", RESNET50, network_gbps=2.5)
    topo, compute = by_layer.topology(40), by_layer.step_seconds
    half = am.fastest_algorithm(topo, RESNET50 / 2)[1]
    # the first half is ready in the middle of the backward pass, the second at its end
    first_ready, second_ready = compute / 3 + compute / 3, compute
    expected = max(first_ready + half, second_ready) + half
    assert by_layer.step(40)[0] == pytest.approx(expected)
    assert by_layer.step(40)[0] > whole.step(40)[0] - 1e-12, "waiting for each gradient never beats the bound"
    serial = cap.Fleet("ml.p3.2xlarge", RESNET50, network_gbps=2.5, overlap=0.0, layers=two, fusion=am.UNFUSED)
    assert serial.step(40)[0] == pytest.approx(compute + 2 * half)
    with pytest.raises(ValueError, match="layers"):
        cap.Fleet("ml.p3.2xlarge", RESNET50, layers=((-1.0, 1.0),))
    assert len(cap.Fleet.layers_of("ResNet-50 v1.5")) > 50


def test_the_serial_bound_needs_about_a_third_more_one_gpu_workers():
    work = cap.Workload()
    fleet = cap.Fleet("ml.p3.2xlarge", RESNET50, efficiency=0.95, network_gbps=2.5)
    over, serial = cap.fewest(work, fleet), cap.serial_instances(work, fleet)
    assert 1.25 < serial / over < 1.6


def test_fewest_is_the_smallest_fleet_that_fits():
    work = cap.Workload(months=12)
    fleet = cap.Fleet("ml.p3.2xlarge", RESNET50, efficiency=0.9, network_gbps=2.5)
    n = cap.fewest(work, fleet)
    assert fleet.run_hours(n, work.training_hours) <= work.budget_hours
    assert fleet.run_hours(n - 1, work.training_hours) > work.budget_hours
    assert cap.fewest(work, fleet, most=n - 1) is None
    assert cap.fewest(cap.Workload(job_hours=0.5), fleet) == 1
    big = cap.Fleet("ml.p4d.24xlarge", RESNET50, speedup=5.76)
    today = cap.Workload()
    assert cap.fewest(today, big) == 1, "one p4d meets today's hour"
    assert cap.fewest(today, big, at_least=2) == 2, "asked for at least 2, it is 2 even though 1 fits"


def test_a_fleet_refuses_what_it_cannot_model():
    with pytest.raises(ValueError, match="data/gpu_instances.csv knows"):
        cap.Fleet("ml.p9.huge", RESNET50)
    with pytest.raises(ValueError, match="efficiency"):
        cap.Fleet("ml.p3.2xlarge", RESNET50, efficiency=1.5)
    with pytest.raises(ValueError, match="at least 1"):
        cap.Fleet("ml.p3.2xlarge", RESNET50).run_hours(0, 23.0)


def _choices():
    from utils import prices

    p3, p4d = prices.price("ml.p3.2xlarge"), prices.price("ml.p4d.24xlarge")
    ec2 = prices.ec2_price("p4d.24xlarge").usd_per_hour
    return [
        cap.Choice("A", "one A100", None, None, 1, "", "", speedup=5.76),
        cap.Choice(
            "B", "p3 fleet", cap.Fleet("ml.p3.2xlarge", RESNET50, network_gbps=2.5), p3, 130, "", "", ec2_usd=3.06
        ),
        cap.Choice("C", "DeepAR", None, None, None, "", ""),
        cap.Choice(
            "G", "one p4d", cap.Fleet("ml.p4d.24xlarge", RESNET50, speedup=5.76), p4d, 105, "", "", only=1, ec2_usd=ec2
        ),
    ]


def test_option_rows_size_price_and_mark_every_row():
    work = cap.Workload()
    a, b, c, g = cap.option_rows(work, _choices(), spot_fraction=0.3)
    assert a.hours_per_run == pytest.approx(23 / 5.76 + 10 / 60) and not a.meets_deadline and a.usd_per_day is None
    assert c.meets_deadline is None and c.hours_per_run is None
    assert b.price_kind == "quoted" and g.price_kind == "estimate"
    assert b.serial_hours > b.hours_per_run, "the serial bound is slower"
    assert g.usd_per_day == pytest.approx(g.hours_per_run * 25.251 * 24, rel=1e-3)
    assert g.usd_per_day_spot == pytest.approx(0.3 * g.usd_per_day)
    assert cap.decide([a, b, c, g]).option is g


def test_the_ratio_moves_estimates_only():
    work = cap.Workload()
    base = cap.option_rows(work, _choices(), 0.3)
    at_ec2 = cap.option_rows(work, _choices(), 0.3, ratio=1.0)
    assert at_ec2[1].usd_per_day == pytest.approx(base[1].usd_per_day), "a quoted price stays as it is"
    assert at_ec2[3].usd_per_day == pytest.approx(base[3].usd_per_day / 1.15, rel=1e-3)
    with pytest.raises(ValueError, match="positive"):
        cap.option_rows(work, _choices(), 0.3, ratio=0)


def test_one_instance_that_cannot_meet_the_hour_says_no():
    work = cap.Workload(months=24, monthly_growth=0.10)
    g = cap.option_rows(work, _choices(), 0.3)[3]
    assert g.meets_deadline is False and g.instances == 1 and g.usd_per_day is None


def test_the_choice_check_runs_the_learners_answer(capsys):
    from utils import checks

    work = cap.Workload()
    rows = cap.option_rows(work, _choices(), 0.3)
    hourly = {"B": 3.825, "G": 25.251}
    g = rows[3]
    right = {"choice": g.name, "instances": 1, "$ per day": g.usd_per_day}
    assert checks.check_capstone_choice(right, rows, 24, hourly)
    assert not checks.check_capstone_choice({**right, "$ per day": 2 * g.usd_per_day}, rows, 24, hourly)
    b = rows[1]
    assert not checks.check_capstone_choice((b.name, b.instances, b.usd_per_day), rows, 24, hourly)
    assert "cost less" in capsys.readouterr().out
    assert not checks.check_capstone_choice(None, rows, 24, hourly)


def test_the_heartbeat_prints_while_a_run_is_silent(capsys):
    import time

    with cap.Heartbeat("waiting", every=0.05):
        time.sleep(0.5)  # room for 10 notes, of which 2 are asked for: a busy machine delays the thread
    assert capsys.readouterr().out.count("waiting") >= 2


def test_a_request_on_a_type_the_job_file_lacks_is_validated():
    with sj.offline_aws() as aws:
        job = sj.JobConfig(kind="mwms", instances=1, instance_type="ml.p3.16xlarge", hyperparameters={"epochs": 1})
        request = cap.request_on_type(job, aws, "ml.p4d.24xlarge")
        assert request["ResourceConfig"]["InstanceType"] == "ml.p4d.24xlarge"
        with pytest.raises(ValueError, match="GPU"):
            cap.request_on_type(job, aws, "ml.g6e.12xlarge")


def test_each_rows_job_runs_as_the_row_assumes_in_mixed_precision_and_with_tensorflows_packs():
    """A row whose size moves with the A100/H100 speed (NVIDIA's mixed-precision figures) must train with
    train_mwms.py's --precision: a job in float32 would run at TF32's speed and miss what it was sized for. The MWMS
    rows are sized with TensorFlow's packs, which their jobs set (--bytes-per-pack; the default, one pack, overlaps
    nothing), and NCCL, which the model assumes (AUTO would leave TensorFlow its own ring)."""
    from utils import prices

    types = ("ml.p3.2xlarge", "ml.g6e.12xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge")
    price = {t: prices.price(t) for t in types}
    lines = {"horovod": 30, "mwms": 20, "precision": 2}
    layers = cap.Fleet.layers_of("ResNet-50 v1.5")

    def rows(x: float) -> dict:
        made = cap.today_choices(cap.Workload(), 1e8, 0.9, price, {"A100": x, "H100": 2 * x}, lines, 2.5, layers)
        return {c.key: c for c in made}

    slow, fast = rows(3.0), rows(6.0)
    moved = {
        k
        for k in slow
        if slow[k].speedup != fast[k].speedup
        or (slow[k].fleet is not None and slow[k].fleet.speedup != fast[k].fleet.speedup)
    }
    assert moved == {"A", "G", "H", "I"}
    assert all(fast[k].precision == cap.MIXED for k in moved)
    assert all(fast[k].precision == "float32" for k in ("B", "E"))  # V100s, sized from a float32 step
    assert fast["G"].lines == fast["E"].lines + lines["precision"]  # the same script, plus the precision lines
    script = (paths.SCRIPTS / "train_mwms.py").read_text()
    assert re.search(r'"--precision".*choices=\[[^]]*"' + cap.MIXED + '"', script), "the script takes the policy"
    # the MWMS rows' jobs set TensorFlow's packs; one pack (TensorFlow's default) leaves nothing to overlap
    assert {k for k, c in fast.items() if c.pack_bytes} == {"E", "F", "G", "H", "I"}
    assert all(fast[k].pack_bytes == cap.MWMS_PACK_BYTES for k in "EFGHI") and '"--bytes-per-pack"' in script
    mwms, hvd = fast["E"].fleet, fast["B"].fleet  # the same instances: E sized with its packs, B with Horovod's cycle
    assert mwms.fusion.bytes_per_pack == cap.MWMS_PACK_BYTES and hvd.fusion is None
    assert mwms.packed(0).step(8)[0] > 1.2 * mwms.step(8)[0] and abs(mwms.step(8)[0] / hvd.step(8)[0] - 1) < 0.05
    assert fast["B"].job_hyperparameters == {}
    mixed_mwms = {"precision": cap.MIXED, "bytes-per-pack": cap.MWMS_PACK_BYTES, "collective": "NCCL"}
    assert fast["G"].job_hyperparameters == mixed_mwms and fast["E"].job_hyperparameters == {
        "bytes-per-pack": cap.MWMS_PACK_BYTES,
        "collective": "NCCL",
    }
    assert re.search(r'"--collective".*choices=\[[^]]*"NCCL"', script), "the script takes NCCL"
    with pytest.raises(ValueError, match="layers"):
        cap.Fleet("ml.p3.2xlarge", 1e8).packed(0)
