"""The heartbeat prints a note while nothing is shown, and passes the chosen lines through."""

import time

import pytest

from utils import heartbeat


@pytest.fixture(autouse=True)
def _no_earlier_stream(monkeypatch):
    """Each test starts as if no stream had run before it (a stream goes on from the last one's output)."""
    monkeypatch.setattr(heartbeat, "_last_output", float("-inf"))


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


def test_a_run_right_after_another_keeps_the_first_ones_pace(capsys):
    # the first run's last line, then 1 s of its tail and of the cell between the runs: the second run's first note is
    # due 2 s after that line (1 s into the second run), not 2 s after the second run's start (3 s of silence)
    with heartbeat.stream(lambda line: True, what="first", every=2.0) as shown:
        shown("epoch 2/2")
        time.sleep(1.0)
    quiet = time.monotonic()
    with heartbeat.stream(False, every=2.0, says=lambda s: f"note {time.monotonic() - quiet:.2f} s in"):
        time.sleep(2.3)
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note ")]
    assert notes and float(notes[0].split()[1]) < 1.9, notes  # due at 1.0 s; the thread looks every 0.5 s


def test_a_run_long_after_the_last_output_waits_a_whole_interval(capsys):
    with heartbeat.stream(lambda line: True, every=0.2) as shown:
        shown("a line")
    time.sleep(0.8)
    with heartbeat.stream(False, what="later", every=0.6):
        time.sleep(0.45)  # a stream that carried over anyway would note from 0.2 s (a third of its interval)
    assert "later" not in capsys.readouterr().out


def test_a_carried_over_stream_still_waits_a_third_of_its_interval_before_its_first_note(capsys):
    # the earlier line is 0.9 of an interval old when the second stream starts: carried over alone, its note would be
    # due 0.15 s in; it waits until 0.5 s (a third of 1.5 s), and the stream ends at 0.4 s
    with heartbeat.stream(lambda line: True, every=1.5) as shown:
        shown("a line")
        time.sleep(1.35)
    with heartbeat.stream(False, what="second", every=1.5):
        time.sleep(0.4)
    assert "second" not in capsys.readouterr().out
