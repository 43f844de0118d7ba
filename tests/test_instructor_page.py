"""The instructor's page is generated from the measured figures, and is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_instructor_page_is_current():
    out = subprocess.run(
        [sys.executable, str(REPO / "tools" / "instructor_page.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr + out.stdout


def test_instructor_page_shows_the_measured_schedule_and_memory():
    from utils import course

    page = (REPO / "docs" / "instructor.md").read_text()
    plan, left = course.workshop_schedule()
    lessons = [slot.what for slot in plan if slot.what != "break"]
    assert lessons and all(f"`{name}`" in page for name in lessons + left)
    assert plan[-1].start_min + plan[-1].minutes <= 180
    assert course.memory_line() in page


@pytest.mark.xfail(
    strict=True,
    reason="the core paths, read at the measured pace with their outputs, are longer than the day: lessons must move "
    "material into deep dives before the day reaches SageMaker and the capstone (the page says to plan a second day)",
)
def test_the_full_day_reaches_multi_worker_sagemaker_and_the_capstone():
    sys.path.insert(0, str(REPO / "tools"))
    import instructor_page

    plan, left, skipped = instructor_page.day_schedule()
    taught = [slot.what for slot in plan if slot.what not in ("break", "lunch")]
    assert set(instructor_page.DAY_MUST) <= set(taught), f"the day reaches only {taught}"


def test_the_full_day_fits_its_hours_and_the_page_lists_it():
    sys.path.insert(0, str(REPO / "tools"))
    import instructor_page

    plan, left, skipped = instructor_page.day_schedule()
    taught = [slot.what for slot in plan if slot.what not in ("break", "lunch")]
    assert plan[-1].start_min + plan[-1].minutes <= instructor_page.DAY_MIN
    assert [slot.what for slot in plan].count("lunch") == 1
    assert set(skipped) <= set(instructor_page.DAY_SKIPPABLE) and not set(skipped) & set(taught)
    page = (REPO / "docs" / "instructor.md").read_text()
    assert all(f"`{name}`" in page.split("## A full day")[1] for name in taught + skipped)
