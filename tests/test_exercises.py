"""The hands-on exercises' checks name the TODO that is wrong. That they pass on the solutions is asserted where
the lessons run them: lesson 04's and 05's solution cells, which CI executes (COURSE_SOLUTIONS=run)."""

from __future__ import annotations

import pytest
from conftest import needs_horovod

from utils import checks, paths

EXERCISES = paths.SCRIPTS / "exercises"
SOLUTION = (EXERCISES / "mwms_solution.py").read_text()


def test_mwms_check_fails_on_the_unfilled_copy_and_names_todo_1(capsys):
    assert not checks.check_mwms_script(EXERCISES / "mwms_todo.py")
    out = capsys.readouterr().out
    assert "TODO 1" in out and "TODO 6" in out


@pytest.mark.parametrize(
    "right, wrong, named",
    [
        (
            "loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)",
            "loss = tf.reduce_mean(per_example)",
            "TODO 2 or 4",
        ),
        ("GLOBAL_BATCH = args.batch_size * workers", "GLOBAL_BATCH = args.batch_size", "TODO 2"),
    ],
    ids=["local mean loss", "per-worker batch"],
)
def test_mwms_check_names_a_single_wrong_todo(tmp_path, capsys, right, wrong, named):
    assert right in SOLUTION
    script = tmp_path / "attempt.py"
    script.write_text(SOLUTION.replace(right, wrong))
    assert not checks.check_mwms_script(script)
    out = capsys.readouterr().out
    assert f"not yet: {named}" in out and "TODO 6" not in out


def test_the_exercise_and_its_solution_mark_the_same_todos():
    import re

    marks = lambda text: sorted(set(re.findall(r"# TODO (\d)", text)))
    assert marks((EXERCISES / "mwms_todo.py").read_text()) == marks(SOLUTION) == list("123456")


HOROVOD_SOLUTION = (EXERCISES / "horovod_solution.py").read_text()


@needs_horovod
def test_horovod_check_fails_on_the_unfilled_copy_and_names_the_todos(capsys):
    assert not checks.check_horovod_script(EXERCISES / "horovod_todo.py")
    out = capsys.readouterr().out
    for todo in ("TODO 1", "TODO 2", "TODO 3", "TODO 5", "TODO 6"):
        assert f"not yet: {todo}" in out
    assert "TODO 1: each process should find 2 ranks" in out


SHARD = (
    "x_train, y_train = data.shard(splits.x_train, splits.y_train, hvd.rank(), hvd.size())",
    "x_train, y_train = data.shard(splits.x_train, splits.y_train, 0, hvd.size())",
)
AVERAGING = ("net = hvd_keras.distributed(net)  # TODO 4", "")
BROADCAST = ("callbacks = [hvd_keras.BroadcastInitialState(root_rank=0)]", "callbacks = []")
WRITER = ("writer = hvd.rank() == 0", "writer = hvd.rank() == 1")


@needs_horovod
@pytest.mark.parametrize(
    "mistakes, named",
    [((SHARD, BROADCAST), ("TODO 3", "TODO 5")), ((AVERAGING, WRITER), ("TODO 4", "TODO 6"))],
    ids=["same shard on both ranks, no broadcast", "no gradient averaging, rank 1 writes"],
)
def test_horovod_check_names_exactly_the_wrong_todos(tmp_path, capsys, mistakes, named):
    """Two mistakes a run, each seen in an observation of its own (examples trained on and first-step weights;
    final weights and files written): each named, nothing else (one run of the check costs two TensorFlow
    processes, so four single mistakes are checked in two runs)."""
    attempt = HOROVOD_SOLUTION
    for right, wrong in mistakes:
        assert right in attempt
        attempt = attempt.replace(right, wrong)
    script = tmp_path / "attempt.py"
    script.write_text(attempt)
    assert not checks.check_horovod_script(script)
    out = capsys.readouterr().out
    assert out.count("not yet:") == len(named) and all(f"not yet: {todo}" in out for todo in named), out


def test_the_horovod_exercise_and_its_solution_mark_the_same_todos():
    import re

    marks = lambda text: sorted(set(re.findall(r"# TODO (\d)", text)))
    assert marks((EXERCISES / "horovod_todo.py").read_text()) == marks(HOROVOD_SOLUTION) == list("123456")


@pytest.mark.parametrize(
    "call, right, wrong",
    [
        (lambda a: checks.check_ring_bytes(8, 1_000_000, a), 1_750_000 * 4, 2_000_000 * 4),
        (lambda a: checks.check_uneven_ring_worker(4, 10, 0, a), 15, 16),  # chunks 3 3 2 2: 20 - 3 - 2
        (lambda a: checks.check_uneven_ring_worker(5, 12, 0, a), 19, 20),  # lesson 03's: chunks 3 3 2 2 2: 24 - 3 - 2
        (lambda a: checks.check_ring_time_ms(16, 100e6, 25, a), 60.0, 64.0),  # 2 x 15/16 x 100e6 / 3.125e9 s
        (lambda a: checks.check_scaling_efficiency(10_000, 4, 34_000, a), 0.85, 3.4),
        (lambda a: checks.check_warmup_rate(0.001, 8, 100, 50, a), 0.0045, 0.004),
        (lambda a: checks.check_warmup_rate(0.001, 8, 100, 100, a), 0.008, 0.001),
        (
            lambda a: checks.check_cycle_wait_ms([{"bytes": 4096, "seconds": 0.003, "best_seconds": 0.001}], 4096, a),
            2.0,
            3.0,
        ),
    ],
    ids=[
        "ring bytes",
        "uneven ring",
        "uneven ring, lesson 03",
        "ring time",
        "efficiency",
        "warm-up halfway",
        "warm-up done",
        "cycle wait",
    ],
)
def test_numeric_checks_accept_the_right_answer_and_reject_a_wrong_one(call, right, wrong, capsys):
    assert call(right)
    assert not call(wrong)
    assert not call(None)
    out = capsys.readouterr().out
    assert "correct" in out and "not quite" in out and "not answered yet" in out


def test_fit_prediction_check_uses_both_regimes():
    from utils.allreduce_model import LineFit

    fit = LineFit(intercept=1e-3, slope=1e-9, bend=1e6, slope_above=2e-9)
    # 8 MB: 1 ms + 1e6 x 1 ns + 7e6 x 2 ns = 1 + 1 + 14 = 16 ms
    assert checks.check_fit_prediction_ms(fit, 8e6, 16.0)
    assert not checks.check_fit_prediction_ms(fit, 8e6, 9.0)  # one slope all the way
