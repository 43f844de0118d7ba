"""The hands-on exercises' checks pass on the solutions and name the TODO that is wrong otherwise."""

from __future__ import annotations

import pytest

from utils import checks, paths

EXERCISES = paths.SCRIPTS / "exercises"
SOLUTION = (EXERCISES / "mwms_solution.py").read_text()


def test_mwms_check_passes_on_the_solution(capsys):
    assert checks.check_mwms_script(EXERCISES / "mwms_solution.py")
    assert "correct" in capsys.readouterr().out


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
