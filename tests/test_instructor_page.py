"""The instructor's page is generated from the measured figures, and is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_two_days_reach_every_lesson_and_the_page_lists_them():
    sys.path.insert(0, str(REPO / "tools"))
    import instructor_page

    first, second, left = instructor_page.two_days()
    assert not left, f"two days do not reach {left}: move material of the longest core paths into deep dives"
    for day in (first, second):
        assert day[-1].start_min + day[-1].minutes <= instructor_page.DAY_MIN
        assert [slot.what for slot in day].count("lunch") <= 1
    taught = [slot.what for slot in first + second if slot.what not in ("break", "lunch")]
    from utils import course

    assert taught == [lesson.notebook for lesson in course.lessons()], "the days keep the lessons' order, none twice"
    page = (REPO / "docs" / "instructor.md").read_text().split("## Two days")[1]
    day_one, day_two = page.split("### Day two")
    assert all(f"`{slot.what}`" in day_one for slot in first if slot.what not in ("break", "lunch"))
    assert all(f"`{slot.what}`" in day_two.split("## ")[0] for slot in second if slot.what not in ("break", "lunch"))
