"""The course map: each lesson's title and objectives (read from the notebooks) and measured durations."""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

from utils.mode import REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
DURATIONS = REPO_ROOT / "data" / "notebook_durations.csv"
DURATION_FIELDS = ["notebook", "mode", "seconds", "peak_memory_mib", "cpu_model", "usable_cores", "date", "tensorflow"]


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
            "`python scripts/time_notebooks.py --mode full` (and --mode smoke)."
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
    found = [float(r["peak_memory_mib"]) for r in rows
             if r["notebook"] == notebook and r["mode"] == mode and r.get("peak_memory_mib")]
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
            parts.append(f"{which} mode {float(r['seconds']) / 60:.1f} min "
                         f"({r['cpu_model']}, {r['usable_cores']} cores, {r['date']})")
    if not parts:
        return f"Run time of {notebook}: not measured yet (python scripts/time_notebooks.py --mode full {notebook})."
    return f"Measured run time of {notebook}: " + "; ".join(parts) + "."
