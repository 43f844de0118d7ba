"""Run mode of the course: full (default, for learners) or smoke (CI, `COURSE_SMOKE=1`)."""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")


def is_smoke() -> bool:
    """True when `COURSE_SMOKE` is set to 1 (CI shrinks data and epochs)."""
    value = os.environ.get("COURSE_SMOKE", "0").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(
        f"COURSE_SMOKE={value!r} is not understood: set it to 1 for smoke mode or 0 (or unset it) for full mode."
    )


def pick(full: T, smoke: T) -> T:
    """Return `smoke` in smoke mode and `full` otherwise."""
    return smoke if is_smoke() else full


def describe() -> str:
    """One line that says which mode this run is in, for the top of every notebook."""
    if is_smoke():
        return "Mode: SMOKE (COURSE_SMOKE=1): small data and few epochs, for CI; figures are rough."
    return "Mode: FULL: the sizes the lesson's text refers to (set COURSE_SMOKE=1 for a quick run)."
