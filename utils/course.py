"""The course map: each lesson's title and objectives (read from the notebooks) and measured durations."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from utils.paths import DATA, NOTEBOOKS

DURATIONS = DATA / "notebook_durations.csv"
DURATION_FIELDS = [
    "notebook",
    "mode",
    "seconds",
    "peak_memory_mib",
    "cpu_model",
    "usable_cores",
    "date",
    "tensorflow",
    "code_hash",
]


@dataclass
class Lesson:
    """One notebook of the course: file name, title and its list of objectives."""

    notebook: str
    title: str
    objectives: list[str]


def read_lesson(path: Path) -> Lesson:
    """Read a lesson notebook's title (its first heading) and the bullets under '## Objectives'."""
    nb = json.loads(path.read_text())
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    title_match = re.search(r"^#\s+(.+)$", md, re.M)
    title = title_match.group(1).strip() if title_match else path.stem
    objectives: list[str] = []
    section = re.search(r"^##\s+Objectives\s*$(.*?)(?=^##\s|\Z)", md, re.M | re.S)
    if section:
        objectives = [m.strip() for m in re.findall(r"^\s*[-*]\s+(.+)$", section.group(1), re.M)]
    return Lesson(notebook=path.name, title=title, objectives=objectives)


def lessons(folder: Path = NOTEBOOKS) -> list[Lesson]:
    """All lesson notebooks of the course, in their numbered order."""
    return [read_lesson(p) for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))]


def code_hash(path: Path) -> str:
    """A short hash of a notebook's code cells: a measured duration belongs to the code it timed."""
    nb = json.loads(Path(path).read_text())
    code = "\n\0".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return hashlib.sha256(code.encode()).hexdigest()[:12]


def is_current(row: dict[str, str], folder: Path = NOTEBOOKS) -> bool:
    """True when a durations row was measured on the lesson's code as it is now."""
    path = folder / row["notebook"]
    return path.is_file() and row.get("code_hash", "") == code_hash(path)


def read_durations(path: Path = DURATIONS) -> list[dict[str, str]]:
    """Rows of the measured-durations file (empty when no lesson has been timed yet)."""
    if not path.exists():
        return []
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    missing = set(DURATION_FIELDS) - set(rows[0].keys() if rows else DURATION_FIELDS)
    if missing:
        raise ValueError(
            f"{path} lacks the columns {sorted(missing)}; regenerate it with "
            "`python tools/time_notebooks.py --mode full` (and --mode smoke)."
        )
    return rows


def duration_of(notebook: str, mode: str, rows: list[dict[str, str]] | None = None) -> float | None:
    """The latest measured wall time (seconds) of `notebook` in `mode` ('full' or 'smoke'), or None."""
    rows = read_durations() if rows is None else rows
    times = [float(r["seconds"]) for r in rows if r["notebook"] == notebook and r["mode"] == mode]
    return times[-1] if times else None


def peak_memory_of(notebook: str, mode: str, rows: list[dict[str, str]] | None = None) -> float | None:
    """The latest measured peak memory (MiB) of `notebook`'s processes in `mode`, or None."""
    rows = read_durations() if rows is None else rows
    found = [
        float(r["peak_memory_mib"])
        for r in rows
        if r["notebook"] == notebook and r["mode"] == mode and r.get("peak_memory_mib")
    ]
    return found[-1] if found else None


def record_duration(row: dict[str, str], path: Path = DURATIONS) -> None:
    """Replace the row for (notebook, mode) in the durations file with `row`."""
    rows = [r for r in read_durations(path) if (r["notebook"], r["mode"]) != (row["notebook"], row["mode"])]
    rows.append({k: str(row[k]) for k in DURATION_FIELDS})
    rows.sort(key=lambda r: (r["notebook"], r["mode"]))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=DURATION_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def measured_duration_line(notebook: str, rows: list[dict[str, str]] | None = None) -> str:
    """One line with the measured run time of `notebook` in both modes and the machine that measured it."""
    rows = read_durations() if rows is None else rows
    parts = []
    for which in ("full", "smoke"):
        match = [r for r in rows if r["notebook"] == notebook and r["mode"] == which]
        if match:
            r = match[-1]
            stale = "" if is_current(r) else ", measured on an earlier version of this lesson"
            parts.append(
                f"{which} mode {float(r['seconds']) / 60:.1f} min "
                f"({r['cpu_model']}, {r['usable_cores']} cores, {r['date']}{stale})"
            )
    if not parts:
        return f"Run time of {notebook}: not measured yet (make durations, or python tools/time_notebooks.py --mode full {notebook})."
    return f"Measured run time of {notebook}: " + "; ".join(parts) + "."


def _minutes(seconds: float | None) -> str:
    return "not measured yet" if seconds is None else f"{seconds / 60:.1f} min"


def course_map(rows: list[dict[str, str]] | None = None, folder: Path = NOTEBOOKS) -> list[dict[str, str]]:
    """One row per lesson: title, objectives, measured full and smoke run times and peak memory (marked when stale)."""
    rows = read_durations() if rows is None else rows
    table = []
    for lesson in lessons(folder):
        timed = [r for r in rows if r["notebook"] == lesson.notebook]
        peak = peak_memory_of(lesson.notebook, "full", rows)
        table.append(
            {
                "notebook": lesson.notebook,
                "title": lesson.title,
                "objectives": "<br>".join(lesson.objectives),
                "full mode": _minutes(duration_of(lesson.notebook, "full", rows)),
                "smoke mode": _minutes(duration_of(lesson.notebook, "smoke", rows)),
                "peak memory (full)": "not measured yet" if peak is None else f"{peak / 1024:.1f} GiB",
                "timed on": (
                    "this version"
                    if timed and all(is_current(r, folder) for r in timed)
                    else "an earlier version"
                    if timed
                    else ""
                ),
            }
        )
    return table


def measured_on(rows: list[dict[str, str]] | None = None) -> list[str]:
    """The machines, TensorFlow versions and dates that the durations were measured with."""
    rows = read_durations() if rows is None else rows
    return sorted(
        {f"{r['cpu_model']}, {r['usable_cores']} cores, TensorFlow {r['tensorflow']}, {r['date']}" for r in rows}
    )
