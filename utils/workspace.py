"""The learner's workspace: their own copies of the lessons, into which the course's updates merge.

    python -m utils.workspace sync             # copy new lessons, merge the course's changes (make lab, make update)
    python -m utils.workspace status           # which lessons you edited, and which the course changed since
    python -m utils.workspace reset 03         # lesson 03 back to the course's version; yours is saved first
    python -m utils.workspace reset 03 --discard   # the same, without saving yours

Why a workspace: `notebooks/` holds the course's lessons as git tracks them. A lesson run or edited there is a
changed file to git, and `git pull` of a course fix to that lesson stops ("Your local changes ... would be
overwritten by merge"). So JupyterLab opens the copies in `workspace/` (ignored by git): `git pull` only ever
touches `notebooks/`, and `sync` then brings each change into your copy, cell by cell, by the cells' ids:

- a cell you did not edit takes the course's new version (its outputs stay where its code did not change);
- a cell you edited stays yours; where the course changed it too, its new version is put right below yours,
  after a note, so you can compare and keep either;
- cells you added stay where you put them; cells the course added appear; a cell the course removed goes,
  unless you had edited it.

Before a lesson you edited is merged, your copy is saved in `workspace/.course/saved/`: nothing is lost.
`workspace/.course/base/` keeps the course's version each copy was last brought up to date with (the common
ancestor of a three-way merge).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from utils.paths import NOTEBOOKS, REPO_ROOT

WORKSPACE = REPO_ROOT / "workspace"
#: The mark put in the note above a course cell that changed where the learner had edited it.
UPDATE_NOTE = "course-update"


@dataclass
class Change:
    lesson: str
    action: str  # "added", "unchanged", "updated", "merged", "reset"
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.lesson}: {self.action}" + (f" ({self.detail})" if self.detail else "")


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _write(path: Path, nb: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)  # a learner's copy is never left half-written


def _src(cell: dict | None) -> str | None:
    if cell is None:
        return None
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _text(nb: dict) -> list[tuple[str, str, str]]:
    """What a learner writes in a notebook: each cell's id, type and source (no outputs, counts or metadata)."""
    return [(c.get("id", ""), c["cell_type"], _src(c)) for c in nb["cells"]]


def _ids(nb: dict, where: Path) -> dict[str, dict]:
    cells = {}
    for c in nb["cells"]:
        if not c.get("id"):
            raise ValueError(
                f"{where}: a cell has no id (nbformat 4.5 or later gives every cell one); run "
                "`python -m utils.workspace reset` on this lesson to take the course's copy"
            )
        cells[c["id"]] = c
    return cells


def _note(course_cell: dict) -> tuple[dict, dict]:
    """A Markdown note and a copy of the course's new version of a cell the learner had edited."""
    new = copy.deepcopy(course_cell)
    new["id"] = uuid.uuid4().hex[:8]
    if new["cell_type"] == "code":
        new["outputs"], new["execution_count"] = [], None
    note = {
        "cell_type": "markdown",
        "id": uuid.uuid4().hex[:8],
        "metadata": {"tags": [UPDATE_NOTE]},
        "source": [
            "**Course update.** The course changed the cell above, which you had edited: its new version follows. "
            "Keep the one you want and delete the other (and this note)."
        ],
    }
    return note, new


def merge(base: dict, mine: dict, theirs: dict, where: Path = Path("lesson")) -> tuple[dict, int]:
    """Three-way merge of a lesson by cell ids: `base` the course's version the learner's copy came from, `mine`
    the learner's copy, `theirs` the course's new version. Returns the merged notebook and the number of cells
    that both had changed (each kept as the learner's, with the course's version below it)."""
    b, m, t = _ids(base, where), _ids(mine, where), _ids(theirs, where)
    # A cell of mine the course walk below does not place (one the learner added, or edited where the course
    # removed it) goes after the nearest cell before it, in the learner's order, that the walk does place.
    kept_alone = {i for i in m if i not in t and (i not in b or _src(m[i]) != _src(b[i]))}
    after: dict[str | None, list[dict]] = {}
    anchor = None
    for c in mine["cells"]:
        if c["id"] in kept_alone:
            after.setdefault(anchor, []).append(c)
        elif c["id"] in t:
            anchor = c["id"]
    cells, both = list(after.get(None, [])), 0
    for c in theirs["cells"]:
        i = c["id"]
        if i in m:
            edited, changed = _src(m[i]) != _src(b.get(i)), _src(c) != _src(b.get(i))
            if not edited and changed:
                cells.append(copy.deepcopy(c))  # the course's new version
            elif edited and changed and _src(m[i]) != _src(c):
                cells.append(m[i])
                cells.extend(_note(c))
                both += 1
            else:
                cells.append(m[i])  # unchanged by the course, or the same edit on both sides: outputs and all
        elif i not in b:
            cells.append(copy.deepcopy(c))  # a cell the course added
        # else: the learner deleted a cell the course still has: it stays deleted
        cells.extend(after.get(i, []))
    merged = {**copy.deepcopy(theirs), "cells": cells}
    merged["metadata"] = {
        **theirs.get("metadata", {}),
        **{k: v for k, v in mine.get("metadata", {}).items() if k not in theirs.get("metadata", {})},
    }
    return merged, both


class Workspace:
    """The lessons of `course` (the course's folder) as the learner's copies in `root`."""

    def __init__(self, root: Path = WORKSPACE, course: Path = NOTEBOOKS):
        self.root, self.course = Path(root), Path(course)
        self.base, self.saved = self.root / ".course" / "base", self.root / ".course" / "saved"

    def lessons(self) -> list[str]:
        names = sorted(p.name for p in self.course.glob("*.ipynb"))
        if not names:
            raise FileNotFoundError(f"no lessons in {self.course}: run this from a clone of the course")
        return names

    def _save(self, name: str, why: str) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        dest = self.saved / f"{Path(name).stem}.{why}-{stamp}.ipynb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.root / name, dest)
        return dest

    def _take_course(self, name: str) -> None:
        nb = _read(self.course / name)
        _write(self.root / name, nb)
        _write(self.base / name, nb)

    def sync_one(self, name: str) -> Change:
        mine_p, base_p = self.root / name, self.base / name
        theirs = _read(self.course / name)
        if not mine_p.exists():
            self._take_course(name)
            return Change(name, "added")
        if not base_p.exists():
            # a copy made without this tool (or its record deleted): nothing to merge from, so keep it untouched
            # and put the course's version beside it
            dest = self._save(name, "yours")
            self._take_course(name)
            return Change(name, "reset", f"your earlier copy is saved as {dest.relative_to(self.root)}")
        base, mine = _read(base_p), _read(mine_p)
        if _text(theirs) == _text(base):
            return Change(name, "unchanged")
        edited = _text(mine) != _text(base)
        saved = self._save(name, "before-update") if edited else None
        merged, both = merge(base, mine, theirs, mine_p)
        _write(mine_p, merged)
        _write(base_p, theirs)
        if not edited:
            return Change(name, "updated")
        detail = f"your copy before the update: {saved.relative_to(self.root)}"
        if both:
            detail = (
                f"{both} cell(s) you edited changed in the course too: see the notes marked 'Course update'; " + detail
            )
        return Change(name, "merged", detail)

    def sync(self) -> list[Change]:
        self.root.mkdir(parents=True, exist_ok=True)
        return [self.sync_one(name) for name in self.lessons()]

    def status(self) -> list[Change]:
        out = []
        for name in self.lessons():
            mine_p, base_p = self.root / name, self.base / name
            if not mine_p.exists() or not base_p.exists():
                out.append(Change(name, "not copied yet", "run sync"))
                continue
            base = _read(base_p)
            edited = _text(_read(mine_p)) != _text(base)
            course_changed = _text(_read(self.course / name)) != _text(base)
            out.append(
                Change(
                    name,
                    "edited" if edited else "as the course",
                    "the course has changed it since: run sync" if course_changed else "",
                )
            )
        return out

    def reset(self, lesson: str, discard: bool = False) -> Change:
        name = self.find(lesson)
        detail = ""
        if (self.root / name).exists() and not discard:
            detail = f"yours is saved as {self._save(name, 'reset').relative_to(self.root)}"
        self._take_course(name)
        return Change(name, "reset", detail)

    def find(self, lesson: str) -> str:
        names = self.lessons()
        hits = [n for n in names if n == lesson or n.startswith(f"{lesson}_") or n == f"{lesson}.ipynb"]
        if len(hits) != 1:
            raise SystemExit(
                f"no single lesson matches {lesson!r}: give its number (e.g. 03) or file name; "
                f"the lessons are {', '.join(names)}"
            )
        return hits[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=WORKSPACE, help="the workspace folder (default: workspace/)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="copy new lessons and merge the course's changes into yours")
    sub.add_parser("status", help="which lessons you edited, and which the course changed since")
    reset = sub.add_parser("reset", help="a lesson back to the course's version (yours is saved unless --discard)")
    reset.add_argument("lesson", help="its number (03) or file name")
    reset.add_argument("--discard", action="store_true", help="do not save your copy first")
    args = parser.parse_args(argv)
    ws = Workspace(args.root)
    if args.command == "sync":
        changes = ws.sync()
        for c in changes:
            if c.action != "unchanged":
                print(f"[workspace] {c}")
        print(f"[workspace] {len(changes)} lessons in {ws.root}: open them there (your work stays yours on updates)")
    elif args.command == "status":
        for c in ws.status():
            print(c)
    else:
        print(f"[workspace] {ws.reset(args.lesson, args.discard)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
