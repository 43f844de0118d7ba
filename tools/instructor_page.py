"""Write docs/instructor.md, the instructor's page, and each lesson's Duration paragraph from the course map's
measured figures, so that the map, the page and the lessons say the same.

    python tools/instructor_page.py            # (re)write the page and the lessons' Duration paragraphs
    python tools/instructor_page.py --check    # exit 1 if either differs from what the figures give now

The schedule, the memory the course needs and the list of cells that skip without Horovod are computed by
utils.course from data/notebook_durations.csv, data/jupyterlab_memory.csv and the notebooks themselves;
`make durations` rewrites the page after re-timing the lessons.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils import course
from utils.paths import NOTEBOOKS, REPO_ROOT

PAGE = REPO_ROOT / "docs" / "instructor.md"
WORKSHOP_MIN, BREAK_AFTER_MIN, BREAK_MIN = 180, 60, 10
# A workshop day: 6 hours with the breaks and a lunch after about half of it. The course's core paths take two such
# days, in order: the first day goes as far as it can, the second carries on from there.
DAY_MIN, LUNCH_AFTER_MIN, LUNCH_MIN = 360, 150, 45


def _clock(minutes: float) -> str:
    return f"{int(minutes) // 60}:{int(minutes) % 60:02d}"


def schedule_table(plan: list[course.Slot], left: list[str], skipped: list[str] | None = None) -> str:
    """A workshop's schedule as a markdown table, then what it skips and leaves for afterwards."""
    titles = {lesson.notebook: lesson.title for lesson in course.lessons()}
    lines = ["| starts at | block | minutes | of which: code running | reading (estimate) |", "|---|---|---|---|---|"]
    for slot in plan:
        if slot.what in ("break", "lunch"):
            lines.append(f"| {_clock(slot.start_min)} | {slot.what} | {slot.minutes:.0f} | | |")
        else:
            lines.append(
                f"| {_clock(slot.start_min)} | `{slot.what}`: {titles[slot.what]} | {slot.minutes:.0f} "
                f"| {slot.run_min:.1f} | {slot.reading_min:.0f} |"
            )
    end = plan[-1].start_min + plan[-1].minutes if plan else 0
    lines.append(f"| {_clock(end)} | end of the core path | | | |")
    lines.append("")
    if skipped:
        names = ", ".join(f"`{name}`" for name in skipped)
        lines.append(f"Skipped to make room for the lessons after them: {names} (self-study after the day).")
    after = ", ".join(f"`{name}`" for name in left) or "none"
    lines.append(f"Left for after the workshop (self-study, or a second session): {after}.")
    return "\n".join(lines)


def two_days() -> tuple[list[course.Slot], list[course.Slot], list[str]]:
    """Two workshop days of DAY_MIN each, the lessons in order: the first day as far as it goes, the second from
    there. Returns both schedules and the lessons neither day reaches."""
    pauses = dict(
        break_after_min=BREAK_AFTER_MIN, break_min=BREAK_MIN, lunch_after_min=LUNCH_AFTER_MIN, lunch_min=LUNCH_MIN
    )
    first, _ = course.workshop_schedule(DAY_MIN, **pauses)
    taught = tuple(slot.what for slot in first if slot.what not in ("break", "lunch"))
    second, left = course.workshop_schedule(DAY_MIN, skip=taught, **pauses)
    return first, second, left


def horovod_table() -> str:
    """Per lesson, the sections with cells that skip without Horovod."""
    lines = ["| lesson | sections with cells that skip without Horovod |", "|---|---|"]
    for lesson in course.lessons():
        found = course.horovod_sections(NOTEBOOKS / lesson.notebook)
        lines.append(f"| `{lesson.notebook}` | {'; '.join(found) if found else 'none: runs in full'} |")
    return "\n".join(lines)


def days_tables() -> str:
    """The two days' schedules as markdown tables, and what neither reaches."""
    first, second, left = two_days()
    out = ["### Day one", "", _table_only(first), "", "### Day two", "", _table_only(second), ""]
    out.append(
        "The two days reach every lesson's core path."
        if not left
        else f"Neither day reaches {', '.join(f'`{n}`' for n in left)}: leave {'it' if len(left) == 1 else 'them'} for "
        "self-study, or plan a third session."
    )
    return "\n".join(out)


def _table_only(plan: list[course.Slot]) -> str:
    return schedule_table(plan, []).split("\n\n")[0]


def render() -> str:
    """The whole page, from the figures measured now."""
    marked = [lesson.notebook for lesson in course.lessons() if course.has_deep_dives(NOTEBOOKS / lesson.notebook)]
    deep = (
        f"Lessons that mark deep dives so far: {', '.join(f'`{n}`' for n in marked)}."
        if marked
        else "No lesson marks a deep dive yet, so each lesson's core path is still the whole lesson."
    )
    measured = "; ".join(course.measured_on()) or "not measured yet"
    return f"""# Running the course as a workshop

<!-- Written by tools/instructor_page.py from the measured figures; do not edit by hand. -->

This page is for an instructor who runs the course in a room. Its figures come from the course map
(`data/notebook_durations.csv`, measured on: {measured}); `make durations` re-times the lessons and
rewrites this page.

## A 3-hour schedule

Each block is one lesson's **core path**: the lesson without the sections whose heading ends in
"(deep dive)". Its time is the core path's measured run time in full mode plus a reading estimate
(the words of the core path's text, code and full-mode outputs at {course.READING_WPM} words a minute: a rule
set against one newcomer's reading of two lessons, not a measurement of each). The exercises are not in the
blocks: give them as homework, or to those who finish a block early, with the deep dives. A {BREAK_MIN}-minute
break comes after about {BREAK_AFTER_MIN} minutes of work. {deep}

{schedule_table(*course.workshop_schedule(WORKSHOP_MIN, BREAK_AFTER_MIN, BREAK_MIN))}

## Two days ({DAY_MIN // 60} hours each)

The same blocks and breaks, with a {LUNCH_MIN}-minute lunch at the first break after {_clock(LUNCH_AFTER_MIN)}.
The lessons keep their order: the first day goes as far as it can, the second day carries on from there.
Where only one day is possible, stop where day one ends and give the rest as self-study: the capstone
(`08_capstone.ipynb`) builds on lessons 01 and 03 to 07.

{days_tables()}

Learners' machines are often slower than the one that measured these times: allow for it, and keep the
deep dives for those who finish early.

## Before the day

1. **One machine with network access, like the learners' (same system, processor and Python 3.11)**:
   `make wheelhouse` collects every pinned package and the Horovod wheel into `wheelhouse/`. Copy that
   folder to a USB stick or a shared drive.
2. **Every laptop, the day before**: copy the course with `wheelhouse/` inside it, then run `make lab`.
   With the folder present, the set-up installs from it with no package index, and Horovod from its wheel
   (no compile). Check that `notebooks/00_start_here.ipynb` runs to the end.
3. **SageMaker notebook instances**: attach the lifecycle configuration of
   `tools/sagemaker_lifecycle/` (see the README) and start each instance once the day before: the first
   start installs everything and compiles Horovod in the background; later starts take seconds.
4. {course.memory_line()}

## When a laptop cannot build Horovod

Everything else still installs: `make lab` says that Horovod could not be built and goes on. In the
lessons, each cell that needs Horovod calls `L.need_horovod()`, which prints `skipped:` and the reason,
with what to do (run `make horovod`, read the README's troubleshooting table), and the cell skips its
Horovod part instead of failing. These are the sections concerned:

{horovod_table()}

For those sections, pair the learner with a neighbour whose machine has Horovod, or give them a
SageMaker notebook instance set up as above.
"""


def lesson_durations(folder: Path = NOTEBOOKS) -> dict[Path, dict]:
    """The lessons whose Duration paragraph differs from what the figures give now, each with its new content."""
    rows, changed = course.read_durations(), {}
    for lesson in course.lessons(folder):
        path = folder / lesson.notebook
        nb = json.loads(path.read_text())
        if course.with_duration(nb, course.duration_paragraph(lesson.notebook, rows, folder)):
            changed[path] = nb
    return changed


def main() -> None:
    """Write the page and the lessons' Duration paragraphs, or with --check fail when they are not current."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page or a lesson is not current")
    args = parser.parse_args()
    text, lessons = render(), lesson_durations()
    if args.check:
        stale = [str(PAGE.relative_to(REPO_ROOT))] if not PAGE.exists() or PAGE.read_text() != text else []
        stale += [f"the Duration section of {p.name}" for p in lessons]
        if stale:
            sys.exit(f"not current: {', '.join(stale)}; run `python tools/instructor_page.py`.")
        print(f"{PAGE.relative_to(REPO_ROOT)} and the lessons' Duration sections are current.")
        return
    # The paragraph's own words count in a lesson's reading estimate (where no full-mode run recorded the words),
    # so a new paragraph can move the estimate it states: rewrite until nothing changes (once more at most).
    for _ in range(3):
        if not lessons:
            break
        for path, nb in lessons.items():  # the layout JupyterLab saves in
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            print(f"wrote the Duration section of {path.relative_to(REPO_ROOT)}")
        lessons = lesson_durations()
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
