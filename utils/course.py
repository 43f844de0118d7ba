"""The course map: each lesson's title and objectives (read from the notebooks), measured durations and
memory, the core path through each lesson (sections marked "(deep dive)" left out), and a workshop schedule."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from utils.paths import DATA, NOTEBOOKS

DURATIONS = DATA / "notebook_durations.csv"
#: The columns every durations file has.
REQUIRED_DURATION_FIELDS = [
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
#: The columns written: the required ones, then those added later (empty in rows measured before them).
DURATION_FIELDS = [*REQUIRED_DURATION_FIELDS, "core_seconds", "reading_words"]
#: The measured memory of a JupyterLab server (tools/time_notebooks.py --jupyterlab).
JUPYTERLAB_MEMORY = DATA / "jupyterlab_memory.csv"
JUPYTERLAB_FIELDS = ["rss_mib", "jupyterlab", "python", "cpu_model", "date", "how"]
#: SageMaker notebook instance types and their memory, from AWS's documentation (source column).
INSTANCE_TYPES = DATA / "notebook_instance_types.csv"
#: A section whose heading ends with this mark is a deep dive: a workshop's core path leaves it out.
DEEP_DIVE_MARK = "(deep dive)"
#: The title of a lesson's exercises: they are not on the core path whose time a lesson states.
EXERCISES_TITLE = "exercises"
#: Reading speed of the reading estimate: words a minute over what the learner reads on the core path, its text,
#: its code and the outputs a full-mode run prints. A newcomer who read lessons 03 and 06 in JupyterLab needed
#: 60-75 and 75-90 minutes for 11,991 and 13,355 such words (about 150-200 words a minute); 160 lies in both ranges
#: and leans to the slower reader.
READING_WPM = 160


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
    missing = set(REQUIRED_DURATION_FIELDS) - set(rows[0].keys() if rows else REQUIRED_DURATION_FIELDS)
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
    rows.append({k: str(row[k] if k in REQUIRED_DURATION_FIELDS else row.get(k, "")) for k in DURATION_FIELDS})
    rows.sort(key=lambda r: (r["notebook"], r["mode"]))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=DURATION_FIELDS, restval="")
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
            core = r.get("core_seconds") or ""
            core_part = (
                f", of which the core path (no deep dive, no exercise) {float(core) / 60:.1f} min"
                if which == "full" and core and float(core) < float(r["seconds"])
                else ""
            )
            parts.append(
                f"{which} mode {float(r['seconds']) / 60:.1f} min for Run All{core_part} "
                f"({r['cpu_model']}, {r['usable_cores']} cores, {r['date']}{stale})"
            )
    if not parts:
        return f"Run time of {notebook}: not measured yet (make durations, or python tools/time_notebooks.py --mode full {notebook})."
    return f"Measured run time of {notebook}: " + "; ".join(parts) + "."


@dataclass
class MapRow:
    """One lesson of the course map: its title, objectives and measured figures (None where not measured)."""

    notebook: str
    title: str
    objectives: list[str]
    full_seconds: float | None
    smoke_seconds: float | None
    peak_mib: float | None
    core_run_seconds: float | None
    reading_min: float
    current: bool | None  # timed on this version of the lesson; None when never timed


def course_map(rows: list[dict[str, str]] | None = None, folder: Path = NOTEBOOKS) -> list[MapRow]:
    """One row per lesson: title, objectives, measured full and smoke run times, peak memory and core path."""
    rows = read_durations() if rows is None else rows
    table = []
    for lesson in lessons(folder):
        timed = [r for r in rows if r["notebook"] == lesson.notebook]
        table.append(
            MapRow(
                notebook=lesson.notebook,
                title=lesson.title,
                objectives=lesson.objectives,
                full_seconds=duration_of(lesson.notebook, "full", rows),
                smoke_seconds=duration_of(lesson.notebook, "smoke", rows),
                peak_mib=peak_memory_of(lesson.notebook, "full", rows),
                core_run_seconds=core_run_seconds(lesson.notebook, rows, folder),
                reading_min=lesson_reading_minutes(lesson.notebook, rows, folder),
                current=all(is_current(r, folder) for r in timed) if timed else None,
            )
        )
    return table


#: Marks a figure measured on an earlier version of its lesson in the course map.
EARLIER_MARK = "†"


def _figure(value: float | None, scale: float, stale: bool) -> str:
    """A measured figure in the map's table: scaled, one decimal, marked when measured on earlier code."""
    if value is None:
        return "not measured"
    return f"{value / scale:.1f}" + (EARLIER_MARK if stale else "")


def course_map_markdown(rows: list[dict[str, str]] | None = None, folder: Path = NOTEBOOKS) -> str:
    """The course map in Markdown: one linked line per lesson, then its measured figures in a compact table and
    the objectives in a collapsed block. Links are relative to the notebooks' folder (JupyterLab and the site)."""
    lessons_ = course_map(rows, folder)
    out = [f"- [{r.title}]({r.notebook})" for r in lessons_]
    out += [
        "",
        "| lesson | core path (min): run + reading | full mode (min) | smoke mode (min) | peak memory (GiB) |",
        "|:--|--:|--:|--:|--:|",
    ]
    for r in lessons_:
        stale = r.current is False
        core = (
            f"not measured + {r.reading_min:.0f}"
            if r.core_run_seconds is None
            else f"{r.core_run_seconds / 60:.1f} + {r.reading_min:.0f}{EARLIER_MARK if stale else ''}"
        )
        out.append(
            f"| [{r.notebook[:2]}]({r.notebook}) | {core} | {_figure(r.full_seconds, 60, stale)} "
            f"| {_figure(r.smoke_seconds, 60, stale)} | {_figure(r.peak_mib, 1024, stale)} |"
        )
    notes = [
        f"The core path leaves out the sections marked *{DEEP_DIVE_MARK}*; its reading time is estimated at "
        f"{READING_WPM} words a minute over its text, code and the outputs of a full-mode run, without the exercises (each lesson's own duration, an estimate, adds them "
        "and the deep dives). Full and smoke mode: the whole lesson's run time; peak memory: the kernel "
        "and its workers together, in full mode."
    ]
    if any(r.current is False for r in lessons_):
        notes.append(f"{EARLIER_MARK} measured on an earlier version of the lesson's code.")
    out += ["", " ".join(notes), "", "<details><summary>What each lesson has you do (its objectives)</summary>", ""]
    out += [f"- **{r.notebook[:2]}**: " + " · ".join(r.objectives) for r in lessons_]
    out += ["", "</details>"]
    return "\n".join(out) + "\n"


def measured_on(rows: list[dict[str, str]] | None = None) -> list[str]:
    """The machines, TensorFlow versions and dates that the durations were measured with."""
    rows = read_durations() if rows is None else rows
    return sorted(
        {f"{r['cpu_model']}, {r['usable_cores']} cores, TensorFlow {r['tensorflow']}, {r['date']}" for r in rows}
    )


# --- Memory: the course's measured peak plus a JupyterLab server, against the machine and instance sizes


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def read_jupyterlab_memory(path: Path = JUPYTERLAB_MEMORY) -> list[dict[str, str]]:
    """Rows of the JupyterLab-memory file: a headless JupyterLab server's RSS, measured (empty if never)."""
    return _read_csv(path)


def record_jupyterlab_memory(row: dict[str, str], path: Path = JUPYTERLAB_MEMORY) -> None:
    """Append one measurement of a JupyterLab server's memory to the file."""
    rows = [*read_jupyterlab_memory(path), {k: str(row[k]) for k in JUPYTERLAB_FIELDS}]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=JUPYTERLAB_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def instance_types(path: Path = INSTANCE_TYPES) -> list[dict[str, str]]:
    """SageMaker notebook instance types with their vCPUs and memory (GiB), as AWS documents them."""
    return _read_csv(path)


@dataclass
class MemoryNeed:
    """The course's measured memory need: the largest lesson peak (full mode) plus a JupyterLab server."""

    peak_mib: float | None
    peak_notebook: str | None
    jupyterlab_mib: float | None
    jupyterlab_date: str | None
    unmeasured: list[str] = field(default_factory=list)

    @property
    def total_mib(self) -> float | None:
        """Peak plus JupyterLab in MiB, or None while either is not measured."""
        if self.peak_mib is None or self.jupyterlab_mib is None:
            return None
        return self.peak_mib + self.jupyterlab_mib


def memory_need(
    rows: list[dict[str, str]] | None = None,
    lab_rows: list[dict[str, str]] | None = None,
    folder: Path = NOTEBOOKS,
) -> MemoryNeed:
    """The largest full-mode peak memory among the lessons, and the latest measured JupyterLab RSS."""
    rows = read_durations() if rows is None else rows
    lab_rows = read_jupyterlab_memory() if lab_rows is None else lab_rows
    peaks = {lesson.notebook: peak_memory_of(lesson.notebook, "full", rows) for lesson in lessons(folder)}
    measured = {name: mib for name, mib in peaks.items() if mib is not None}
    top = max(measured, key=lambda name: measured[name]) if measured else None
    lab = [r for r in lab_rows if r.get("rss_mib")]
    return MemoryNeed(
        peak_mib=measured[top] if top else None,
        peak_notebook=top,
        jupyterlab_mib=float(lab[-1]["rss_mib"]) if lab else None,
        jupyterlab_date=lab[-1]["date"] if lab else None,
        unmeasured=sorted(name for name, mib in peaks.items() if mib is None),
    )


def instances_with_memory(
    need_mib: float, types: list[dict[str, str]] | None = None, families: tuple[str, ...] = ("ml.t3.", "ml.m5.")
) -> list[dict[str, str]]:
    """The instance types of the given families with at least `need_mib` of memory, smallest first."""
    types = instance_types() if types is None else types
    fits = [t for t in types if t["instance_type"].startswith(families) and float(t["memory_gib"]) * 1024 >= need_mib]
    return sorted(fits, key=lambda t: (float(t["memory_gib"]), t["instance_type"]))


def _smallest_per_family(need_mib: float, types: list[dict[str, str]] | None) -> list[dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for t in instances_with_memory(need_mib, types):
        found.setdefault(t["instance_type"].rsplit(".", 1)[0], t)
    return list(found.values())


def _gib(mib: float) -> str:
    return f"{mib / 1024:.2f} GiB"


def memory_line(need: MemoryNeed | None = None, types: list[dict[str, str]] | None = None) -> str:
    """One sentence on the memory the course needs, how it was measured, and the smallest instances with it."""
    need = memory_need() if need is None else need
    if need.total_mib is None:
        missing = "the lessons' peak memory" if need.peak_mib is None else "a JupyterLab server's memory"
        return f"Memory the course needs: not measured yet ({missing}; python tools/time_notebooks.py measures it)."
    sizes = ", ".join(
        f"{t['instance_type']} ({t['memory_gib']} GiB)" for t in _smallest_per_family(need.total_mib, types)
    )
    line = (
        f"Memory the course needs: {_gib(need.total_mib)}, the peak of {need.peak_notebook} in full mode "
        f"({_gib(need.peak_mib or 0)}, kernel and workers) plus a JupyterLab server "
        f"({need.jupyterlab_mib:.0f} MiB, measured {need.jupyterlab_date})."
    )
    if sizes:
        line += f" The smallest SageMaker notebook instances with that much: {sizes}."
    if need.unmeasured:
        line += f" Not measured yet: {', '.join(need.unmeasured)}."
    return line


def memory_warning(
    total_bytes: int, need: MemoryNeed | None = None, types: list[dict[str, str]] | None = None
) -> str | None:
    """A warning with what to do when a machine with `total_bytes` of memory has less than the course needs."""
    need = memory_need() if need is None else need
    if need.total_mib is None or total_bytes / 2**20 >= need.total_mib:
        return None
    sizes = " or ".join(
        f"{t['instance_type']} ({t['memory_gib']} GiB)" for t in _smallest_per_family(need.total_mib, types)
    )
    return (
        f"WARNING: this machine has {_gib(total_bytes / 2**20)} of memory and the course needs "
        f"{_gib(need.total_mib)} ({need.peak_notebook} at its peak, plus JupyterLab): its largest runs may fail or "
        "be killed. Close other programs and other notebooks' kernels; on a SageMaker notebook instance, stop it "
        f"and change its type to one with more memory{': ' + sizes if sizes else ''}."
    )


# --- The core path: sections marked "(deep dive)" in their heading are left out of a workshop


@dataclass
class Section:
    """A heading of a lesson, whether it is a deep dive, and the indices of the cells under it."""

    title: str
    level: int
    deep_dive: bool
    cells: list[int] = field(default_factory=list)


def _cells(nb: dict | Path) -> list[dict]:
    data = json.loads(Path(nb).read_text()) if isinstance(nb, (str, Path)) else nb
    return data["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def sections(nb: dict | Path) -> list[Section]:
    """The lesson's sections in order: each markdown heading opens one; cells before the first belong to ''."""
    found = [Section(title="", level=0, deep_dive=False)]
    deep_level: int | None = None
    for i, cell in enumerate(_cells(nb)):
        headings = re.findall(r"^(#{1,6})\s+(.+?)\s*$", _source(cell), re.M) if cell["cell_type"] == "markdown" else []
        for hashes, title in headings:
            level = len(hashes)
            if deep_level is not None and level <= deep_level:
                deep_level = None
            if deep_level is None and title.lower().endswith(DEEP_DIVE_MARK):
                deep_level = level
            found.append(Section(title=title, level=level, deep_dive=deep_level is not None))
            if len(found[-1].cells) == 0 and headings[0] == (hashes, title):
                found[-1].cells.append(i)
        if not headings:
            found[-1].cells.append(i)
    return [sec for sec in found if sec.cells or sec.title]


def core_cells(nb: dict | Path) -> list[int]:
    """Indices of the cells on the core path (every cell outside a deep-dive section)."""
    return sorted(i for sec in sections(nb) if not sec.deep_dive for i in sec.cells)


def path_cells(nb: dict | Path) -> list[int]:
    """Indices of the cells a learner reads and runs on the core path: its cells outside the exercises (a section
    titled "Exercises" and the sections under it), which come on top like the deep dives."""
    outside, level = [], None
    by_cell = {i: sec for sec in sections(nb) for i in sec.cells}
    for i in core_cells(nb):
        sec = by_cell[i]
        if level is not None and sec.level <= level and sec.level:
            level = None
        if level is None and sec.title.strip().lower().startswith(EXERCISES_TITLE):
            level = sec.level
        if level is None:
            outside.append(i)
    return outside


def has_deep_dives(nb: dict | Path) -> bool:
    """True when the lesson marks at least one section as a deep dive."""
    return any(sec.deep_dive for sec in sections(nb))


def _seconds_of(cell: dict) -> float:
    timing = cell.get("metadata", {}).get("execution", {})
    begin, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (begin and end):
        return 0.0
    parse = dt.datetime.fromisoformat
    return max(0.0, (parse(end.replace("Z", "+00:00")) - parse(begin.replace("Z", "+00:00"))).total_seconds())


def core_seconds(executed_nb: dict) -> float | None:
    """Seconds the core path's code cells, exercises left out, ran in an executed notebook (nbclient's timings), or
    None if untimed."""
    cells = _cells(executed_nb)
    if not any(c.get("metadata", {}).get("execution") for c in cells if c["cell_type"] == "code"):
        return None
    return sum(_seconds_of(cells[i]) for i in path_cells(executed_nb) if cells[i]["cell_type"] == "code")


def output_text(cell: dict) -> str:
    """The text a reader sees in a cell's outputs: streams, and each rich output's Markdown or plain text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(_joined(out.get("text", "")))
        else:
            data = out.get("data", {})
            for kind in ("text/markdown", "text/plain"):
                if kind in data:
                    parts.append(_joined(data[kind]))
                    break
    return "\n".join(parts)


def _joined(text: str | list[str]) -> str:
    return "".join(text) if isinstance(text, list) else text


def reading_words(nb: dict | Path, core_only: bool = True) -> int:
    """Words a learner reads in the lesson (its core path without the exercises, by default): text, code and, in an
    executed copy, the outputs' text."""
    cells = _cells(nb)
    chosen = path_cells(nb) if core_only else range(len(cells))
    return sum(len(re.findall(r"\w+", _source(cells[i]) + "\n" + output_text(cells[i]))) for i in chosen)


def reading_minutes(nb: dict | Path, core_only: bool = True, wpm: int = READING_WPM) -> float:
    """Estimated reading time of the lesson (core path only by default) at `wpm` words a minute: its text and
    code, and its outputs where `nb` is an executed copy."""
    return reading_words(nb, core_only) / wpm


def lesson_reading_minutes(notebook: str, rows: list[dict[str, str]] | None = None, folder: Path = NOTEBOOKS) -> float:
    """The reading estimate of a lesson's core path: from the words its last full-mode run showed (outputs
    included, recorded by tools/time_notebooks.py), or, where none is recorded, from its text and code alone."""
    rows = read_durations() if rows is None else rows
    match = [r for r in rows if r["notebook"] == notebook and r["mode"] == "full"]
    if match and match[-1].get("reading_words"):
        return int(match[-1]["reading_words"]) / READING_WPM
    return reading_minutes(folder / notebook)


def core_run_seconds(notebook: str, rows: list[dict[str, str]] | None = None, folder: Path = NOTEBOOKS) -> float | None:
    """Measured run time of the lesson's core path in full mode; the whole lesson's when it has no deep dive."""
    rows = read_durations() if rows is None else rows
    match = [r for r in rows if r["notebook"] == notebook and r["mode"] == "full"]
    if match and match[-1].get("core_seconds"):
        return float(match[-1]["core_seconds"])
    if not has_deep_dives(folder / notebook):
        return duration_of(notebook, "full", rows)
    return None


@dataclass
class Slot:
    """One block of a workshop: a lesson's core path (run time plus reading) or a break, in minutes."""

    what: str
    start_min: float
    minutes: float
    run_min: float = 0.0
    reading_min: float = 0.0


def workshop_schedule(
    total_min: float = 180,
    break_after_min: float = 60,
    break_min: float = 10,
    rows: list[dict[str, str]] | None = None,
    folder: Path = NOTEBOOKS,
    skip: tuple[str, ...] = (),
    lunch_after_min: float | None = None,
    lunch_min: float = 45,
) -> tuple[list[Slot], list[str]]:
    """Lessons' core paths in order (those in `skip` left out), with a break after each `break_after_min`
    (the first break from `lunch_after_min` on is a lunch of `lunch_min`), within `total_min`.

    Returns the schedule and the lessons left for after the workshop (those that do not fit, and those
    whose core path is not measured yet); skipped lessons are in neither."""
    rows = read_durations() if rows is None else rows
    plan: list[Slot] = []
    left: list[str] = []
    clock = since_break = 0.0
    for lesson in lessons(folder):
        if lesson.notebook in skip:
            continue
        run = core_run_seconds(lesson.notebook, rows, folder)
        if run is None or left:
            left.append(lesson.notebook)
            continue
        run_min, reading = run / 60, lesson_reading_minutes(lesson.notebook, rows, folder)
        need = math.ceil(run_min + reading)
        if since_break and since_break + need > break_after_min:
            lunch = lunch_after_min is not None and clock >= lunch_after_min and all(s.what != "lunch" for s in plan)
            pause = lunch_min if lunch else break_min
            if clock + pause + need <= total_min:
                plan.append(Slot("lunch" if lunch else "break", clock, pause))
                clock, since_break = clock + pause, 0.0
        if clock + need > total_min:
            left.append(lesson.notebook)
            continue
        plan.append(Slot(lesson.notebook, clock, need, run_min, reading))
        clock, since_break = clock + need, since_break + need
    return plan, left


def horovod_sections(nb: dict | Path) -> list[str]:
    """Titles of the sections with a cell that calls `L.need_horovod()` (cells that skip without Horovod)."""
    cells = _cells(nb)
    return [
        sec.title
        for sec in sections(nb)
        if any(cells[i]["cell_type"] == "code" and "need_horovod()" in _source(cells[i]) for i in sec.cells)
    ]


#: The paragraph of a lesson's "## Duration" section that tools/instructor_page.py writes from the measured figures.
DURATION_START = "Core path"


def duration_paragraph(notebook: str, rows: list[dict[str, str]] | None = None, folder: Path = NOTEBOOKS) -> str:
    """What a lesson's Duration section says, from the same figures as the course map and the instructor's page:
    the core path's reading estimate and its measured run time in full mode."""
    rows = read_durations() if rows is None else rows
    reading = lesson_reading_minutes(notebook, rows, folder)
    run = core_run_seconds(notebook, rows, folder)
    timed = [r for r in rows if r["notebook"] == notebook and r["mode"] == "full"]
    stale = bool(timed) and not is_current(timed[-1], folder)
    ran = (
        "its run time is not measured yet"
        if run is None
        else f"about {max(1, round(run / 60))} minute{'s' if round(run / 60) > 1 else ''} of running in full mode, "
        f"measured on {timed[-1]['cpu_model']} with {timed[-1]['usable_cores']} cores"
        + (" on an earlier version of this lesson" if stale else "")
    )
    total = reading + (run or 0) / 60
    whole = max(1, round(float(timed[-1]["seconds"]) / 60)) if timed else 0
    read = "its text, code and outputs" if timed and timed[-1].get("reading_words") else "its text and code"
    return (
        f"{DURATION_START}: about {5 * max(1, math.ceil(total / 5))} minutes, that is about {round(reading)} minutes "
        f"of reading ({read} at {READING_WPM} words a minute) and {ran}. The exercises and "
        f"the sections marked *{DEEP_DIVE_MARK}* come on top"
        + (
            f": Run All, deep dives included, ran about {whole} minute{'s' if whole > 1 else ''} "
            "in full mode on the same machine"
            if timed and run is not None
            else ""
        )
        + ". The first code cell prints the measured run times, and lesson 00's course map has every lesson's."
    )


def with_duration(nb: dict, paragraph: str) -> bool:
    """Put `paragraph` in the notebook's "## Duration" section in place of the one it has (the section's first
    paragraph). Returns True when the notebook changed; raises ValueError when it has no Duration section."""
    for cell in nb["cells"]:
        text = _source(cell)
        if cell["cell_type"] != "markdown" or "## Duration" not in text:
            continue
        new = re.sub(
            r"(## Duration\n)(.*?)(\n\n|\n(?=#)|$)", lambda m: m[1] + paragraph + m[3], text, count=1, flags=re.S
        )
        if new == text:
            return False
        lines = new.split("\n")
        cell["source"] = [line + "\n" for line in lines[:-1]] + [lines[-1]]
        return True
    raise ValueError("the lesson has no '## Duration' section: add one after its objectives")
