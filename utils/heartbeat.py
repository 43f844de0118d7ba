"""A line every few seconds while a launched run prints nothing, so that a long cell never looks hung."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

#: Seconds without a shown line after which a note says the run is still going: two waits one after the other stay
#: under the course's limit of 15 s of silence.
EVERY = 7.0

#: When a stream last showed a line or printed its note, or ended (time.monotonic()): a stream that starts within
#: `every` seconds of it goes on from there, so that two runs one after the other in a cell are not silent for the
#: tail of the first (after its last line) plus a whole `every` of the second. Its first note still waits at least
#: FIRST_NOTE of its `every` (a line the cell printed between the two streams is not seen here).
_last_output = float("-inf")
FIRST_NOTE = 1 / 3


@contextlib.contextmanager
def stream(
    show: Callable[[str], bool] | bool = False,
    what: str = "the workers",
    every: float = EVERY,
    says: Callable[[float], str] | None = None,
) -> Iterator[Callable[[str], bool]]:
    """The `stream` to give utils.launch: the lines `show` selects (False: none), and while none comes for `every`
    seconds a line that says how long `what` have run (or `says(seconds)`, where given)."""
    global _last_output
    says = says or (lambda seconds: f"  ... {what}: {seconds:.0f} s, still running")
    select = show if callable(show) else (lambda line: bool(show))
    began = time.monotonic()
    last = max(_last_output, began - every * (1 - FIRST_NOTE)) if began - _last_output < every else began
    done = threading.Event()

    def mark() -> None:  # something was shown now
        global _last_output
        nonlocal last
        last = _last_output = time.monotonic()

    def shown(line: str) -> bool:
        if select(line):
            mark()
            return True
        return False

    def note() -> None:
        while not done.wait(min(0.5, every / 4)):
            if time.monotonic() - last >= every:
                mark()
                print(says(last - began) + "\n", end="", flush=True)

    def touch() -> None:  # a line the caller printed itself counts as shown
        mark()

    shown.touch = touch  # type: ignore[attr-defined]
    shown.speaks_for_itself = True  # type: ignore[attr-defined]  # utils.launch adds no note of its own
    ticker = threading.Thread(target=note, daemon=True)
    ticker.start()
    try:
        yield shown
    finally:
        done.set()
        ticker.join()
        _last_output = max(_last_output, last)  # a stream that showed nothing: the next one goes on from its start
