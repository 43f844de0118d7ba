"""A line every few seconds while a launched run prints nothing, so that a long cell never looks hung."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

#: Seconds without a shown line after which a note says the run is still going: two waits one after the other stay
#: under the course's limit of 15 s of silence.
EVERY = 7.0


@contextlib.contextmanager
def stream(
    show: Callable[[str], bool] | bool = False,
    what: str = "the workers",
    every: float = EVERY,
    says: Callable[[float], str] | None = None,
) -> Iterator[Callable[[str], bool]]:
    """The `stream` to give utils.launch: the lines `show` selects (False: none), and while none comes for `every`
    seconds a line that says how long `what` have run (or `says(seconds)`, where given)."""
    says = says or (lambda seconds: f"  ... {what}: {seconds:.0f} s, still running")
    select = show if callable(show) else (lambda line: bool(show))
    began = last = time.monotonic()
    done = threading.Event()

    def shown(line: str) -> bool:
        nonlocal last
        if select(line):
            last = time.monotonic()
            return True
        return False

    def note() -> None:
        nonlocal last
        while not done.wait(min(0.5, every / 4)):
            if time.monotonic() - last >= every:
                last = time.monotonic()
                print(says(last - began) + "\n", end="", flush=True)

    def touch() -> None:  # a line the caller printed itself counts as shown
        nonlocal last
        last = time.monotonic()

    shown.touch = touch  # type: ignore[attr-defined]
    shown.speaks_for_itself = True  # type: ignore[attr-defined]  # utils.launch adds no note of its own
    ticker = threading.Thread(target=note, daemon=True)
    ticker.start()
    try:
        yield shown
    finally:
        done.set()
        ticker.join()
