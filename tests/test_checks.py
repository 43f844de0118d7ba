"""Exercise checks accept right answers, reject wrong ones and guide unanswered ones."""

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


def test_restart_arithmetic():
    assert checks.restart_after_failure(7) == (7, 1)
    assert checks.restart_after_failure(7, checkpoint_every=3) == (7, 1)
    assert checks.restart_after_failure(8, checkpoint_every=3) == (7, 2)
    assert checks.restart_after_failure(1) == (1, 1)
    assert checks.check_restart(5, 2, 5, 1)
    assert not checks.check_restart(5, 2, 4, 2)
