"""The heartbeat prints a note while nothing is shown, and passes the chosen lines through."""

import time

from utils import heartbeat


def test_a_note_comes_while_nothing_is_shown_and_lines_are_selected(capsys):
    with heartbeat.stream(lambda line: line.startswith("epoch"), what="the test", every=0.3) as shown:
        assert shown("epoch 1") and not shown("RESULT {}")
        time.sleep(1.0)
    out = capsys.readouterr().out
    assert "the test:" in out and "still running" in out


def test_false_shows_no_line_and_notes_every_quiet_interval(capsys):
    with heartbeat.stream(False, what="quiet", every=0.2, says=lambda s: f"after {s:.1f} s") as shown:
        assert not shown("anything")
        time.sleep(1.0)  # 5 intervals: 2 notes at least, though a busy machine delays the thread
    notes = capsys.readouterr().out.splitlines()
    assert 2 <= len(notes) <= 5 and all(n.startswith("after ") for n in notes), notes


def test_a_line_the_caller_printed_itself_holds_the_note_back(capsys):
    # 1.8 s of lines, each 0.15 s after the last: a note would come after 1 s without one (a busy machine may hold
    # this loop back for some tenths)
    with heartbeat.stream(False, what="busy", every=1.0) as shown:
        for _ in range(12):  # a line every 0.15 s, printed by the caller, never through `shown`
            print("a result")
            shown.touch()
            time.sleep(0.15)
    assert "busy:" not in capsys.readouterr().out
