"""Exercise checks accept right answers, reject wrong ones and guide unanswered ones."""

import hashlib
import json

import numpy as np

from utils import checks


def test_report_accepts_close_numbers_and_rejects_others(capsys):
    assert checks.report("x", 3.0000000001, 3.0)
    assert not checks.report("x", 3.1, 3.0, hint="think")
    assert "Hint: think" in capsys.readouterr().out
    assert not checks.report("x", [1, 2], [1, 2, 3])


def test_unanswered_is_not_correct(capsys):
    assert not checks.report("x", None, 1)
    assert "not answered yet" in capsys.readouterr().out


def test_allreduce_checks():
    assert checks.allreduce_sum_of_ranks(1) == 1
    assert checks.allreduce_sum_of_ranks(4) == 10
    assert checks.check_allreduce_sum(3, 6)
    assert not checks.check_allreduce_sum(3, 3)
    assert checks.check_allreduce_average(4, 2.5)
    assert checks.check_global_batch(32, 4, 128)
    assert not checks.check_global_batch(32, 4, 32)


def test_global_batch_of_replicas_tells_workers_from_replicas(capsys):
    # 4 instances x 8 GPUs: 32 replicas of 32 examples each.
    assert checks.check_global_batch_of_replicas(per_replica_batch=32, replicas=32, answer=1024, workers=4)
    assert not checks.check_global_batch_of_replicas(per_replica_batch=32, replicas=32, answer=128, workers=4)
    out = capsys.readouterr().out
    hint = out.splitlines()[-1]  # the hint names neither factor's value nor the answer
    assert "multiplied by the workers" in hint and "1024" not in hint and "32" not in hint.split("gave 128")[1]
    assert not checks.check_global_batch_of_replicas(per_replica_batch=32, replicas=32, answer=32, workers=4)
    assert "a replica is one device" in capsys.readouterr().out


def test_weights_sha256_reads_a_result_line_exactly():
    """The digest of weights printed as JSON equals the script's digest of the float32 arrays, and one ulp changes it."""
    w = [np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), np.float32([0.1, 2.0])]
    printed = json.loads(json.dumps([x.tolist() for x in w]))
    assert checks._weights_sha256(printed) == hashlib.sha256(b"".join(x.tobytes() for x in w)).hexdigest()
    nudged = [w[0], np.float32([0.1, np.nextafter(np.float32(2.0), np.float32(3.0))])]
    assert checks._weights_sha256([x.tolist() for x in nudged]) != checks._weights_sha256(printed)


def test_restart_arithmetic():
    assert checks.restart_after_failure(7) == (7, 1)
    assert checks.restart_after_failure(7, checkpoint_every=3) == (7, 1)
    assert checks.restart_after_failure(8, checkpoint_every=3) == (7, 2)
    assert checks.restart_after_failure(1) == (1, 1)
    assert checks.check_restart(5, 2, 5, 1)
    assert not checks.check_restart(5, 2, 4, 2)


def test_usable_cores_counts_the_allowed_cpus(capsys):
    import os

    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert checks.cores_allowed() == allowed
    assert checks.check_usable_cores(allowed)
    assert not checks.check_usable_cores(allowed + 1)
    assert "usable by this process" in capsys.readouterr().out


def test_lesson01_checks_accept_the_right_answer_and_reject_a_wrong_one(capsys):
    assert checks.check_speedup_needed(23.0, 0.30, 29.9)
    assert not checks.check_speedup_needed(23.0, 0.30, 23.0)  # forgot the growth
    # 10 h / 8 + 10,000 x 2 x 7/8 x 100 MB / 12.5 GB/s = 1.25 h + 140 s
    assert checks.check_job_hours_on_workers(10, 10_000, 100, 8, 100, 1.25 + 140 / 3600)
    assert not checks.check_job_hours_on_workers(10, 10_000, 100, 8, 100, 1.25)  # communication left out
    assert checks.check_data_to_halve_error(0.1, 1024)
    assert not checks.check_data_to_halve_error(0.1, 5)
    assert checks.check_doubling_months(10, 3.61)
    assert not checks.check_doubling_months(10, 1.2)  # 12 / 10
    assert "Hint" in capsys.readouterr().out


def test_lesson02_checks_accept_the_right_answer_and_reject_a_wrong_one():
    assert checks.check_scaled_rate(0.01, 8, 0.08)
    assert not checks.check_scaled_rate(0.01, 8, 0.01)
    assert checks.check_gpipe_bubble(4, 12, 0.2)
    assert not checks.check_gpipe_bubble(4, 12, 0.25)
    assert checks.check_micro_batches_for(4, 0.10, 28)  # 3/31 < 0.1, and 3/30 is not
    assert not checks.check_micro_batches_for(4, 0.10, 27)
    assert checks.check_training_state_bytes(10**9, "adam", 16e9)
    assert not checks.check_training_state_bytes(10**9, "adam", 4e9)  # the weights alone
    assert checks.check_training_state_bytes(10**9, "sgd", 8e9)
    # 16e9 B > 0.9 x 16 GiB = 15.46e9 B, but < 16 GiB = 17.18e9 B
    assert checks.check_state_fits(10**9, "adam", 16, 0.10, False)
    assert not checks.check_state_fits(10**9, "adam", 16, 0.10, True)
    assert checks.check_state_fits(10**9, "adam", 16, 0.0, True)
    assert checks.check_parameter_server_values(16, 10**6, 16_000_000)
    assert not checks.check_parameter_server_values(16, 10**6, 10**6)
    assert checks.check_ring_worker_values(16, 10**6, 1_875_000)
    assert not checks.check_ring_worker_values(16, 10**6, 2_000_000)


def test_ring_worker_values_with_uneven_chunks_and_small_rings():
    # K = 1003 on 7 workers: chunks of 144 (the first 1003 mod 7 = 2) and 143; worker 0 skips chunks 1 and 2
    assert checks.check_ring_worker_values(7, 1003, 2 * 1003 - 144 - 143)
    assert not checks.check_ring_worker_values(7, 1003, 1718)  # what worker 0 receives, not what it sends
    assert checks.check_ring_worker_values(2, 10, 10)  # N = 2: each worker sends K
    assert checks.check_ring_worker_values(1, 10, 0)


def test_bad_inputs_of_the_new_checks_say_what_to_do():
    import pytest

    with pytest.raises(ValueError, match="between 0 and 1"):
        checks.check_micro_batches_for(4, 0.0, 1)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        checks.check_training_state_bytes(10, "adagrad", 1)


# ----------------------------------------------------------------------------------------------------
# lesson 08's checks, on workloads worked by hand


def _fast_cluster():
    """A link so fast and hops so short that T(N) is the compute over N, plus a few seconds at most."""
    from utils import capstone

    return capstone.Cluster(grad_bytes=4.0, link_gbps=1e6, step_latency=1e-9)


def test_capstone_workers_by_hand(capsys):
    from utils import capstone

    # 4 h of training, no overheads, a 1 h deadline: 4 workers take 1 h plus their allreduces, 5 take 0.8 h
    work = capstone.Workload(job_hours=4.0, monthly_growth=0.0, overhead_minutes=0.0)
    cluster = _fast_cluster()
    assert checks.check_capstone_workers(5, work, cluster)
    assert not checks.check_capstone_workers(4, work, cluster)
    assert not checks.check_capstone_workers(6, work, cluster)
    assert "4 workers take longer" in capsys.readouterr().out
    assert not checks.check_capstone_workers(0, work, cluster)


def _row(name, usd, lines, instances=4, meets=True):
    from utils import capstone

    return capstone.Option(name, meets, 0.9, instances, usd, usd * 0.3, lines, "SageMaker", "")


def test_capstone_tiebreak_reads_the_deciding_column_off_the_tables(capsys):
    # E cheaper in one table, B in the other: the cost decides, before the lines
    by_cost = [[_row("B. h", 100.0, 60), _row("E. m", 90.0, 30)], [_row("B. h", 50.0, 60), _row("E. m", 55.0, 30)]]
    assert checks.check_capstone_tiebreak("$ per day", by_cost)
    assert "B the cheaper 1 times, E 1 times" in capsys.readouterr().out
    assert not checks.check_capstone_tiebreak("lines of code", by_cost)
    # at the same cost the lines decide; a table where both run on one instance, or neither meets, is not counted
    alone = [[_row("B. h", 10.0, 60, instances=1), _row("E. m", 20.0, 30, instances=1)]]
    missed = [[_row("B. h", 10.0, 60, meets=False), _row("E. m", 20.0, 30, meets=False)]]
    same = [[_row("B. h", 100.0, 60), _row("E. m", 100.0, 30)]]
    assert checks.check_capstone_tiebreak("lines of code", same + alone + missed)
    assert "over 1 of 3 tables" in capsys.readouterr().out
    assert checks.check_capstone_tiebreak(("$ per day", "lines of code"), by_cost + same)
    # one that meets the deadline where the other does not: that decides first
    assert checks.check_capstone_tiebreak(
        "meets the hour", [[_row("B. h", 100.0, 60), _row("E. m", 90.0, 30, meets=False)]]
    )
    assert not checks.check_capstone_tiebreak(None, by_cost)


def test_warm_fraction_alone_by_hand(capsys):
    from utils import capstone

    # 10 h from scratch, 30 of the 60 min taken by overheads: a warm start may need 0.5 h / 10 h = 5 %
    work = capstone.Workload(job_hours=10.0, monthly_growth=0.0, overhead_minutes=30.0)
    assert checks.check_warm_fraction_alone(0.05, work)
    assert not checks.check_warm_fraction_alone(0.06, work)
    assert not checks.check_warm_fraction_alone(0.04, work)
    assert "would still fit" in capsys.readouterr().out
    assert not checks.check_warm_fraction_alone(1.5, work)
    # a job that fits from scratch: the whole run, 100 %
    assert checks.check_warm_fraction_alone(1.0, capstone.Workload(job_hours=0.25, monthly_growth=0.0))


def test_a_correct_float_is_shown_to_the_precision_the_check_uses(capsys):
    assert checks.report("x", 12 * np.log(2) / np.log(10), 3.6123599479677737)
    assert capsys.readouterr().out.strip() == "[x] correct: 3.61236"


def test_ps_rule_owner_is_read_from_the_rule_that_refuses_the_ps_replica(capsys):
    """A PS replica in a TFJob for train_mwms.py: the webhook admits it, TensorFlow's rule refuses it."""
    from utils import kubeflow

    job = kubeflow.tfjob("exercise", chief=1, workers=2, image="img", command=["python", "train_mwms.py"])
    assert not checks.check_ps_rule_owner(None, job)
    assert "not answered yet" in capsys.readouterr().out
    assert checks.check_ps_rule_owner("tensorflow", job)
    assert "TensorFlow's MultiWorkerMirroredStrategy" in capsys.readouterr().out
    assert not checks.check_ps_rule_owner("operator", job)
    assert "not quite" in capsys.readouterr().out


def test_ps_rule_owner_takes_the_learners_words_and_never_prints_the_answer_unasked(capsys):
    from utils import kubeflow

    job = kubeflow.tfjob("exercise", chief=1, workers=2, image="img", command=["python", "train_mwms.py"])
    assert not checks.check_ps_rule_owner(None, job)
    assert "tensorflow" not in capsys.readouterr().out.lower()  # the unanswered message names no owner
    for right in ("TensorFlow", "TensorFlow's", " the script ", "MWMS", "tensorflow\u2019s"):
        assert checks.check_ps_rule_owner(right, job), right
    for wrong in ("the operator", "Operator's", "webhook"):
        assert not checks.check_ps_rule_owner(wrong, job), wrong
    capsys.readouterr()
    assert not checks.check_ps_rule_owner("kubelet", job)
    assert "names neither the operator nor TensorFlow" in capsys.readouterr().out


def test_data_reads_are_judged_against_what_the_run_counted(capsys):
    """Lesson 05's exercise 3: the learner's formula against the lines worker 0 read in the DATA run."""
    run = "DATA, three files"
    records = [{"rank": r, "runs": {run: {"ids": list(range(r, 12, 2)), "lines_read": 12}}} for r in range(2)]
    right_fraction = lambda n, w: (w - 1) / w
    assert checks.check_data_reads(lambda n, w: n, records, 12, right_fraction)
    assert not checks.check_data_reads(lambda n, w: n // w, records, 12, right_fraction)  # kept, not read
    assert not checks.check_data_reads(lambda n, w: None, records, 12, right_fraction)
    out = capsys.readouterr().out
    assert "correct: 12" in out and "not quite: you gave 6" in out and "not answered yet" in out
    # the second part is checked too: a right count with a wrong or missing fraction is not correct
    assert not checks.check_data_reads(lambda n, w: n, records, 12, lambda n, w: 1 / w / 2)
    assert not checks.check_data_reads(lambda n, w: n, records, 12)
    out = capsys.readouterr().out
    assert "not quite: you gave 0.25" in out and "a fraction between 0 and 1" in out
    failed = [{"rank": 0, "runs": {run: {"error": "boom"}}}]
    try:
        checks.check_data_reads(lambda n, w: n, failed, 12)
    except ValueError as err:
        assert "section 4" in str(err)
    else:
        raise AssertionError("a failed run was judged")
