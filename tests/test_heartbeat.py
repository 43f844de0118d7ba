"""The heartbeat prints a note while nothing is shown, and passes the chosen lines through."""

import time

from utils import heartbeat


def test_a_note_comes_while_nothing_is_shown_and_lines_are_selected(capsys):
    with heartbeat.stream(lambda line: line.startswith("epoch"), what="the test", every=0.3) as shown:
        assert shown("epoch 1") and not shown("RESULT {}")
        time.sleep(1.0)
    out = capsys.readouterr().out
    assert "the test:" in out and "still running" in out


def test_false_shows_no_line():
    with heartbeat.stream(False, every=60) as shown:
        assert not shown("anything")
