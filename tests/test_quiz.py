"""Multiple-choice questions explain each answer with the lesson's facts and refuse a malformed key."""

import pytest

from utils import quiz


def _question(**facts):
    return quiz.MultipleChoice(
        {
            "a": quiz.Choice("a bigger GPU", False, "one-time factor of {gain:.0f}x"),
            "b": quiz.Choice("more workers", True, "N grows with the data"),
        },
        facts or {"gain": 3.0},
    )


def test_answer_prints_the_explanation_with_facts(capsys):
    q = _question(gain=2.6)
    assert q.answer("A") is False
    out = capsys.readouterr().out
    assert "Not the best answer: one-time factor of 3x" in out
    assert q.answer(" b ") is True
    assert "Correct: N grows with the data" in capsys.readouterr().out


def test_unknown_letter_says_which_letters_exist(capsys):
    assert _question().answer("z") is False
    assert "one of the letters a, b" in capsys.readouterr().out


def test_a_question_needs_exactly_one_right_choice():
    with pytest.raises(ValueError, match="exactly one"):
        quiz.MultipleChoice({"a": quiz.Choice("x", True, ""), "b": quiz.Choice("y", True, "")})


def test_a_missing_fact_is_named():
    with pytest.raises(ValueError, match="gain"):
        quiz.MultipleChoice({"a": quiz.Choice("x", True, "{gain}")}, {})
