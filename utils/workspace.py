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

Nothing the learner wrote is lost, as a database keeps a committed row:

- Before a lesson you edited is merged or reset, your copy is saved in `workspace/saved/` (a folder JupyterLab
  shows), under a name no other save can take; a copy identical to one already saved is not saved twice.
- Each copy carries, in its notebook metadata, which course version it was last merged with (the common ancestor
  of the three-way merge, kept in `workspace/.course/bases/`). The merged copy and that mark are one write, so a
  sync that is killed, interrupted or repeated merges each change once; and a copy saved over a merge from a tab
  that was open (JupyterLab's "Overwrite") still carries the old mark, so the next sync brings the change again.
- A copy is replaced only if it is still what sync read: a save from JupyterLab that lands during the merge is
  merged again (or, if it lands at the very instant of the swap, saved in `workspace/saved/`).
- One sync at a time (a lock in `workspace/.course/lock`); temporary files live in `workspace/.course/tmp/` and a
  run removes those an interrupted one left.
- A copy that cannot be read (empty, cut short, nbformat 3, a byte-order mark) or written (disk full, read-only)
  is left as it is, with one line that names it and says what to do; the other lessons still sync.
- A copy that is a symbolic link is never written through, nor replaced by a file (which would detach the file it
  points to): sync leaves it as it is and says how to have the course's changes merged.
- A copy of a lesson the course has since renamed or removed is kept, untouched; sync and status name it, one
  line each, as no longer updated by the course.

The exercise files that lessons ask the learner to edit (scripts/exercises/*_todo.py) are copied into
`workspace/exercises/` the same way and merged line by line (`git merge-file`); where the course changed lines the
learner had edited, the learner's copy stays as it is and sync names the course's new version.
"""

from __future__ import annotations

import os
import signal
import sys


def _interrupted_at_start(signum: int, frame: object) -> None:
    """Ctrl-C while `python -m utils.workspace` is still starting (its imports, its arguments), when it has written
    nothing: one line and status 130, where Python would print a traceback."""
    os.write(2, b"[workspace] interrupted while starting: nothing was changed; run it again\n")
    os._exit(130)


# Before the imports below, which take most of the command's first tenth of a second; not where Ctrl-C is ignored
# (a command started in the background by a shell script), which stays so.
if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_at_start)

import argparse
import codecs
import copy
import hashlib
import itertools
import json
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows, which the course does not support
    fcntl = None

from utils.paths import NOTEBOOKS, REPO_ROOT

WORKSPACE = REPO_ROOT / "workspace"
#: The mark put in the note above a course cell that changed where the learner had edited it.
UPDATE_NOTE = "course-update"
#: The notebook metadata key in a learner's copy that names the course version it was last merged with.
META_KEY = "course_workspace"
#: The course's exercise files, which lessons ask the learner to edit: copied into workspace/exercises/.
EXERCISES = REPO_ROOT / "scripts" / "exercises"
EXERCISE_GLOB = "*_todo.py"
#: How long a sync waits for another one in the same workspace before it gives up.
LOCK_WAIT_S = 120.0
#: How many times a lesson is merged again when its copy changes (a save from JupyterLab) during the merge.
ATTEMPTS = 4
#: What to do about a lesson that was open in JupyterLab while sync merged the course's change into its file.
OPEN_ADVICE = (
    "it is open in JupyterLab: if you have unsaved work there, save it (when JupyterLab says the file changed on "
    "disk, choose Overwrite: what is on your screen is kept), close the tab, run make update again and open the "
    "lesson anew; with nothing unsaved, just close the tab and open the lesson again. A tab left open keeps the "
    "old version on screen, and its next save puts it back"
)
#: The action of a learner's copy of a lesson the course no longer has (renamed or removed since it was copied).
GONE = "no longer in the course"
#: Points where a test can act (HOOKS[point](path)); with COURSE_WORKSPACE_KILL_AT=point the process is killed
#: there, with COURSE_WORKSPACE_INTERRUPT_AT=point it gets Ctrl-C (SIGINT).
HOOKS: dict[str, Callable[[Path], None]] = {}


class WorkspaceError(Exception):
    """The whole workspace cannot be synced (wrong folder, nothing writable): one line, exit status 1."""


class LessonError(Exception):
    """One lesson is left as it is: one line that names its file and says what to do."""


class _Changed(Exception):
    """The learner's copy changed between sync's read and its write: merge again."""


@dataclass
class Change:
    lesson: str
    action: str  # "added", "unchanged", "updated", "merged", "reset", "kept", "left as it was", ...
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.lesson}: {self.action}" + (f" ({self.detail})" if self.detail else "")


def _hook(point: str, path: Path) -> None:
    if os.environ.get("COURSE_WORKSPACE_KILL_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("COURSE_WORKSPACE_INTERRUPT_AT") == point:
        os.kill(os.getpid(), signal.SIGINT)
    if point in HOOKS:
        HOOKS[point](path)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _dump(nb: dict) -> bytes:
    """A notebook as JupyterLab saves it (indent 1, sorted keys), so that opening and saving changes nothing."""
    return (json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def parse(raw: bytes, where: Path) -> dict:
    """A notebook from its bytes, or a LessonError that says in one line what is wrong with `where`."""
    if not raw.strip():
        raise LessonError(f"{where} is empty ({len(raw)} bytes)")
    if raw.startswith(codecs.BOM_UTF8):
        raise LessonError(
            f"{where} starts with a UTF-8 byte-order mark (a Windows editor saved it; JupyterLab cannot open it)"
        )
    try:
        nb = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise LessonError(f"{where} is not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise LessonError(
            f"{where} is not a complete notebook (invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}; "
            "cut short?)"
        ) from None
    if not isinstance(nb, dict):
        raise LessonError(f"{where} is JSON but not a notebook")
    if nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        version = nb.get("nbformat", "unknown")
        raise LessonError(f"{where} is in notebook format {version}, not 4 (an old Jupyter saved it)")
    for n, c in enumerate(nb["cells"], 1):
        if not isinstance(c, dict) or c.get("cell_type") not in ("code", "markdown", "raw"):
            raise LessonError(f"{where}: cell {n} is not a notebook cell")
        if not isinstance(c.get("source", ""), (str, list)):
            raise LessonError(f"{where}: cell {n} has no text source")
    return nb


def _read(path: Path) -> dict:
    return parse(path.read_bytes(), path)


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
    for n, c in enumerate(nb["cells"], 1):
        if not c.get("id"):
            raise LessonError(
                f"{where}: cell {n} has no id (a notebook saved by nbformat before 4.5, as Colab or an old Jupyter "
                "saves it), so its cells cannot be matched with the course's"
            )
        if c["id"] in cells:
            raise LessonError(f"{where}: the cell id {c['id']!r} appears twice")
        cells[c["id"]] = c
    return cells


def unique_ids(nb: dict) -> list[tuple[str, str]]:
    """Gives each later cell whose id repeats an earlier one a new id (`<id>-2`, `<id>-3`, ...) in place, as
    nbformat's validator would; returns the (old, new) pairs. A learner's copy can have such cells (a cell pasted
    as JSON, two notebooks joined by hand); without this, a merge by ids would keep only one of them."""
    seen = {c.get("id") for c in nb["cells"]}
    used: set[str] = set()
    renamed = []
    for c in nb["cells"]:
        cid = c.get("id")
        if not cid:
            continue
        if cid in used:
            new = next(f"{cid}-{k}" for k in itertools.count(2) if f"{cid}-{k}" not in seen)
            seen.add(new)
            renamed.append((cid, new))
            c["id"] = new
        used.add(c["id"])
    return renamed


def unique_ids_of(nb: dict) -> dict:
    """A copy of `nb` with repeated cell ids made unique (see unique_ids)."""
    nb = copy.deepcopy(nb)
    unique_ids(nb)
    return nb


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
    that both had changed (each kept as the learner's, with the course's version below it). Cells of `mine` whose
    id repeats an earlier cell's are kept as cells the learner added (see `unique_ids`)."""
    mine = copy.deepcopy(mine)
    unique_ids(mine)
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


def deleted_but_changed(base: dict, mine: dict, theirs: dict) -> int:
    """How many cells the learner deleted that the course has since changed (they stay deleted)."""
    m = {c.get("id") for c in mine["cells"]}
    b = {c.get("id"): c for c in base["cells"]}
    return sum(1 for c in theirs["cells"] if c.get("id") in b and c.get("id") not in m and _src(c) != _src(b[c["id"]]))


def _mark(nb: dict, base_id: str) -> dict:
    """`nb` with the mark of the course version it was merged with (the merge and the mark are one write)."""
    nb = {**nb, "metadata": {**nb.get("metadata", {}), META_KEY: {"base": base_id}}}
    return nb


class Workspace:
    """The lessons of `course` (the course's folder) as the learner's copies in `root`."""

    def __init__(self, root: Path = WORKSPACE, course: Path = NOTEBOOKS, exercises: Path | None = None):
        self.root, self.course = Path(root), Path(course)
        # the exercise files a lesson asks the learner to edit (scripts/exercises/*_todo.py), copied into
        # workspace/exercises/ and merged like the lessons, so that an exercise never edits a file git tracks
        self.exercises = Path(exercises) if exercises else None
        self.meta = self.root / ".course"
        self.base = self.meta / "base"  # per lesson: the course version its copy was last merged with
        self.bases = self.meta / "bases"  # every such version, by the hash its copies' mark names
        self.tmp, self.hold = self.meta / "tmp", self.meta / "hold"
        self.saved = self.root / "saved"  # the learner's saved copies, where JupyterLab shows them
        self.late: list[Path] = []

    # --- where things are -------------------------------------------------------------------------------------

    def lessons(self) -> list[str]:
        if not self.course.is_dir():
            raise WorkspaceError(f"no lessons in {self.course}: run this from a clone of the course")
        names = sorted(p.name for p in self.course.glob("*.ipynb"))
        if not names:
            raise WorkspaceError(f"no lessons in {self.course}: run this from a clone of the course")
        return names

    def _number(self, name: str) -> str:
        return name.split("_", 1)[0]

    def _what_to_do(self, name: str) -> str:
        return (
            f"left as it is; `python -m utils.workspace reset {self._number(name)}` replaces it with the course's "
            "version (yours is saved in workspace/saved/ first)"
        )

    @staticmethod
    def _link(path: Path, course_p: Path) -> str | None:
        """Where the learner's copy `path` is a symbolic link, why sync leaves it as it is and what to do, in one
        line; else None. Sync never writes through a link: the file it points to can be anywhere (another clone,
        a synced folder, even the course's own copy in notebooks/), out of reach of the workspace's lock, its
        temporary files and the recovery of an interrupted run; nor does it replace the link by a file, which
        would leave the learner's file behind, no longer the one JupyterLab opens."""
        if not path.is_symlink():
            return None
        target = Path(os.path.realpath(path))
        return (
            f"{path} is a link to {target}, and sync does not write through links, so the course's changes are not "
            f"merged into it; to have them merged, put your file in place of the link (mv {target} {path}) and run "
            f"sync again; the course's version is {course_p}"
        )

    def orphans(self) -> list[Change]:
        """The learner's copies of lessons that the course has renamed or removed since they were copied (this
        lesson's record is in .course/base/, the course's file is not): one Change each, kept and untouched."""
        lessons = self.lessons()
        ids: dict[str, set[str]] = {}  # each lesson's cell ids, read at the first orphan
        out = []
        for record in sorted(self.base.glob("*.ipynb")) if self.base.is_dir() else []:
            name, mine_p = record.name, self.root / record.name
            if name in lessons or not os.path.lexists(mine_p):
                continue
            detail = (
                "kept as it is, untouched, but no longer updated by the course, which renamed or removed this lesson"
            )
            try:
                old = parse(record.read_bytes(), record)
            except (OSError, LessonError):
                old = None
            try:
                mine = _read(mine_p)
                found = self.base_of(name, mine)
                edited = found is None or _text(mine) != _text(found[0])
            except (OSError, LessonError):
                edited = True
            if old is not None:
                if not ids:
                    for lesson in lessons:
                        try:
                            ids[lesson] = {c.get("id") for c in _read(self.course / lesson)["cells"]} - {None}
                        except (OSError, LessonError):
                            ids[lesson] = set()
                # the lesson it was renamed to, if one lesson (and one only) has most of its cells
                mine_ids = {c.get("id") for c in old["cells"]} - {None}
                most = [n for n, i in ids.items() if mine_ids and len(mine_ids & i) > len(mine_ids) / 2]
                if len(most) == 1:
                    detail += f"; most of its cells are now in {most[0]}"
                    detail += ": copy your edits there to follow its updates" if edited else ""
            if not edited:
                detail += "; you had not edited it: delete it if you no longer need it"
            out.append(Change(name, GONE, detail))
        return out

    # --- writing without ever cutting or overwriting ----------------------------------------------------------

    def _tmp_file(self, data: bytes) -> Path:
        """`data` in a new file of .course/tmp/ (a name no other process uses), flushed to disk."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        tmp = self.tmp / f"{os.getpid()}-{uuid.uuid4().hex}.partial"
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def _put(self, data: bytes, dest: Path) -> None:
        """A record (never a learner's copy) replaced whole, or not at all."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._tmp_file(data)
        try:
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)

    def _link_new(self, tmp: Path, dest: Path) -> bool:
        """`tmp` appears as `dest`; False (and nothing done) where `dest` exists already: never an overwrite."""
        try:
            os.link(tmp, dest)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: the same check, with a short window
            if os.path.lexists(dest):
                return False
            os.rename(tmp, dest)
        return True

    def keep(self, data: bytes, name: str, why: str) -> Path:
        """Saves `data` (a copy of lesson or exercise file `name`) in workspace/saved/ under a name no other save
        takes; a copy identical to one already saved there is not saved again (that one is returned)."""
        stem, suffix = Path(name).stem, Path(name).suffix
        self.saved.mkdir(parents=True, exist_ok=True)
        for p in sorted(self.saved.glob(f"{glob_escape(stem)}.*{suffix}")):
            try:
                if p.stat().st_size == len(data) and p.read_bytes() == data:
                    return p
            except OSError:
                continue
        stamp = time.strftime("%Y%m%d-%H%M%S")
        tmp = self._tmp_file(data)
        try:
            for n in itertools.count(1):
                dest = self.saved / f"{stem}.{why}-{stamp}{'' if n == 1 else f'-{n}'}{suffix}"
                if self._link_new(tmp, dest):
                    return dest
        finally:
            tmp.unlink(missing_ok=True)
        raise AssertionError("unreachable")

    def _settle(self, path: Path, wait_s: float = 2.0) -> None:
        """Waits (at most `wait_s`) while Jupyter's server is saving `path`: it copies the file to `.~name`
        first, writes the file in place, then removes the copy."""
        marker = path.with_name(".~" + path.name)
        deadline = time.monotonic() + wait_s
        while marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    @staticmethod
    def _being_written(path: Path, read: bytes, wait_s: float = 1.0) -> bool:
        """True where `path` no longer holds `read` within `wait_s`: a save is writing it. Jupyter's server copies a
        notebook to `.~name` before it writes it in place (`_settle` waits on that copy), but where the file was
        away at that instant (a sync had moved it aside) it writes a new one, with no copy to wait on."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                if path.read_bytes() != read:
                    return True
            except OSError:
                return True
        return False

    def _commit(self, path: Path, data: bytes, read: bytes) -> None:
        """Replaces the learner's copy `path` with `data` only if it still holds `read` (what sync read and
        merged); else raises _Changed and leaves it as it is. The copy is first moved aside (so that a save
        from JupyterLab during the swap lands either in it, checked after, or in a new file, which is kept);
        a kill leaves it in .course/hold/, from where the next run puts it back."""
        tmp = self._tmp_file(data)
        self.hold.mkdir(parents=True, exist_ok=True)
        rel = path.relative_to(self.root).as_posix().replace("/", "%")
        held = self.hold / f"{rel}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _hook("before-commit", path)
            self._settle(path)
            os.rename(path, held)
            try:
                _hook("held", path)
                if held.read_bytes() != read:
                    self._put_back(held, path)
                    raise _Changed
                if not self._link_new(tmp, path):  # a save made a new file at `path` in the instant it was away
                    self._put_back(held, path)
                    raise _Changed
            except _Changed:
                raise
            except BaseException:
                if not os.path.lexists(path):
                    os.rename(held, path)
                raise
            _hook("after-commit", path)
            # A save that opened the old file just before the swap writes into it: wait for it, and keep it.
            self._settle(path)
            late = held.read_bytes()
            if late != read:
                self.late.append(self.keep(late, path.name, "saved-during-update"))
            held.unlink()
        finally:
            tmp.unlink(missing_ok=True)

    def _put_back(self, held: Path, path: Path) -> None:
        """`held` back at `path`, or, where something new is at `path`, into workspace/saved/."""
        if not self._link_new(held, path) and path.read_bytes() != held.read_bytes():
            self.late.append(self.keep(held.read_bytes(), path.name, "saved-during-update"))
        held.unlink(missing_ok=True)

    def _create(self, path: Path, data: bytes) -> bool:
        """A new learner's copy at `path`; False where a file appeared there meanwhile (left as it is)."""
        tmp = self._tmp_file(data)
        try:
            return self._link_new(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    # --- one sync at a time, and what an interrupted one left -------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        if self.root.exists() and not self.root.is_dir():
            raise WorkspaceError(f"{self.root} is not a folder: give --root a folder (default: workspace/)")
        try:
            self.meta.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.meta / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise WorkspaceError(
                f"cannot write in {self.meta} ({err.strerror}): sync needs to write in your workspace; "
                "check that the disk is not full or read-only and that the folder is yours"
            ) from None
        try:
            if fcntl is not None:
                deadline, told = time.monotonic() + LOCK_WAIT_S, False
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise WorkspaceError(
                                f"another sync has held {self.meta / 'lock'} for {LOCK_WAIT_S:.0f} s: let it "
                                "finish (or stop it), then run sync again"
                            ) from None
                        if not told:
                            print("[workspace] another sync is running in this workspace: waiting for it", flush=True)
                            told = True
                        time.sleep(0.05)
            self._recover()
            yield
        finally:
            os.close(fd)

    def _recover(self) -> None:
        """What an interrupted run left: copies moved aside go back (or, where a new one is there, into
        saved/), temporary files go, and saved copies from before saved/ existed move there."""
        for held in sorted(self.hold.glob("*")) if self.hold.is_dir() else []:
            name = held.name.rsplit(".", 1)[0].replace("%", "/")
            path = self.root / name
            if not os.path.lexists(path):
                os.rename(held, path)
            else:
                if path.read_bytes() != held.read_bytes():
                    self.keep(held.read_bytes(), Path(name).name, "interrupted-update")
                held.unlink()
        for tmp in self.tmp.glob("*") if self.tmp.is_dir() else []:
            tmp.unlink(missing_ok=True)
        # the .partial files of the earlier version of this tool (the copy beside them is whole)
        for leftover in [*self.root.glob("*.ipynb.partial"), *self.base.glob("*.partial")]:
            leftover.unlink(missing_ok=True)
        old_saved = self.meta / "saved"
        for p in sorted(old_saved.glob("*.ipynb")) if old_saved.is_dir() else []:
            self.saved.mkdir(parents=True, exist_ok=True)
            if not self._link_new(p, self.saved / p.name) and (self.saved / p.name).read_bytes() != p.read_bytes():
                self.keep(p.read_bytes(), p.name.split(".", 1)[0] + ".ipynb", "saved")
            p.unlink(missing_ok=True)

    # --- the course version a copy was merged with --------------------------------------------------------------

    def _store_base(self, raw: bytes) -> str:
        base_id = _digest(raw)
        dest = self.bases / f"{base_id}.ipynb"
        if not dest.exists():
            self._put(raw, dest)
        return base_id

    def base_of(self, name: str, mine: dict) -> tuple[dict, str] | None:
        """The course version `mine` was last merged with, and its hash: the one its mark names, else this
        lesson's record; None where neither can be read (a record that cannot be read counts as none)."""
        mark = mine.get("metadata", {}).get(META_KEY, {})
        candidates = []
        if isinstance(mark, dict) and isinstance(mark.get("base"), str) and re.fullmatch(r"[0-9a-f]{16}", mark["base"]):
            candidates.append(self.bases / f"{mark['base']}.ipynb")
        candidates.append(self.base / name)
        for p in candidates:
            try:
                raw = p.read_bytes()
                return parse(raw, p), _digest(raw)
            except (OSError, LessonError):
                continue
        return None

    def _record(self, name: str, raw: bytes) -> None:
        self._put(raw, self.base / name)

    # --- sync -----------------------------------------------------------------------------------------------------

    def sync_one(self, name: str) -> Change:
        course_p, mine_p = self.course / name, self.root / name
        try:
            theirs_raw = course_p.read_bytes()
            theirs = parse(theirs_raw, course_p)
            _ids(theirs, course_p)
        except LessonError as err:
            raise LessonError(
                f"{err}: the course's own copy is damaged; `git checkout -- {course_p}` restores it"
            ) from None
        for _ in range(ATTEMPTS):
            if not os.path.lexists(mine_p):
                base_id = self._store_base(theirs_raw)
                if self._create(mine_p, _dump(_mark(theirs, base_id))):
                    self._record(name, theirs_raw)
                    return Change(name, "added")
                continue
            if mine_p.is_symlink() and not mine_p.exists():
                raise LessonError(f"{mine_p} is a link to a file that is not there: left as it is")
            self._settle(mine_p)
            mine_raw = mine_p.read_bytes()
            try:
                mine = parse(mine_raw, mine_p)
            except LessonError as err:
                if self._being_written(mine_p, mine_raw):
                    continue  # a save that made the file anew (no `.~` copy beside it) is writing it: read it again
                raise LessonError(f"{err}: {self._what_to_do(name)}") from None
            _hook("read", mine_p)
            found = self.base_of(name, mine)
            if found is None:
                # a copy made without this tool, or its records deleted: nothing to merge from, so the copy is
                # kept as it is, and the course's version becomes the one later updates merge from
                self._store_base(theirs_raw)
                self._record(name, theirs_raw)
                if _text(mine) == _text(theirs):
                    return Change(name, "unchanged")
                return Change(
                    name,
                    "kept as it is",
                    "there was no record of the course version it came from (was workspace/.course removed?); "
                    f"from now on the course's changes merge into it. To see how it differs: notebooks/{name}; "
                    f"to take the course's version: reset {self._number(name)}",
                )
            base, _ = found
            if _text(theirs) == _text(base):
                return Change(name, "unchanged")
            link = self._link(mine_p, course_p)
            if link:
                raise LessonError(link)
            edited = _text(mine) != _text(base)
            try:
                merged, both = merge(base, mine, theirs, mine_p)
            except LessonError as err:
                raise LessonError(f"{err}: {self._what_to_do(name)}") from None
            renamed = unique_ids(copy.deepcopy(mine))
            base_id = self._store_base(theirs_raw)
            saved = self.keep(mine_raw, name, "before-update") if edited else None
            try:
                self._commit(mine_p, _dump(_mark(merged, base_id)), mine_raw)
            except _Changed:
                continue  # saved from JupyterLab during the merge: merge that copy
            self._record(name, theirs_raw)
            if not edited:
                return Change(name, "updated")
            detail = f"your copy before the update: {saved.relative_to(self.root)}"
            if both:
                detail = (
                    f"{both} cell(s) you edited changed in the course too: see the notes marked 'Course update'; "
                    + detail
                )
            gone = deleted_but_changed(base, mine, theirs)
            if gone:
                detail += (
                    f"; the course changed {gone} cell(s) you had deleted: they stay deleted (their new version is "
                    f"in notebooks/{name})"
                )
            if renamed:
                detail += "; cells that had the same id as an earlier one now have ids " + ", ".join(
                    n for _, n in renamed
                )
            return Change(name, "merged", detail)
        raise LessonError(
            f"{mine_p} kept changing while it was being updated (saved from JupyterLab?): left as it is; "
            "save and close it, then run sync again"
        )

    def sync(self) -> list[Change]:
        names = self.lessons()
        out: list[Change] = []
        is_open: set[Path] | None = None  # asked once, at the first lesson that changes
        with self.locked():
            for name in names:
                self.late = []
                try:
                    change = self.sync_one(name)
                except LessonError as err:
                    change = Change(name, "left as it was", str(err))
                except OSError as err:
                    change = Change(
                        name,
                        "left as it was",
                        f"{self.root / name} could not be updated ({err.strerror}: {err.filename}): free some space "
                        "or make the folder writable, then run sync again; your copy is unchanged",
                    )
                if self.late:
                    change.detail += "; a save made during the update is kept as " + ", ".join(
                        str(p.relative_to(self.root)) for p in self.late
                    )
                if change.action in ("updated", "merged"):
                    if is_open is None:
                        is_open = open_in_jupyter()
                    if (self.root / name).resolve() in is_open:
                        change.detail += ("; " if change.detail else "") + OPEN_ADVICE
                out.append(change)
            out.extend(self.orphans())
            for name in self.exercise_files():
                self.late = []
                label = f"exercises/{name}"
                try:
                    change = self.sync_exercise(name)
                except OSError as err:
                    change = Change(
                        label,
                        "left as it was",
                        f"{self.root / label} could not be updated ({err.strerror}: {err.filename}): free some space "
                        "or make the folder writable, then run sync again; your copy is unchanged",
                    )
                if self.late:
                    change.detail += "; a save made during the update is kept as " + ", ".join(
                        str(p.relative_to(self.root)) for p in self.late
                    )
                out.append(change)
        return out

    # --- exercise files (text, merged line by line) ---------------------------------------------------------------

    def exercise_files(self) -> list[str]:
        if self.exercises is None or not self.exercises.is_dir():
            return []
        return sorted(p.name for p in self.exercises.glob(EXERCISE_GLOB))

    def _merge_text(self, base: bytes, mine: bytes, theirs: bytes) -> bytes | None:
        """A three-way merge of text, line by line (`git merge-file`); None where both changed the same lines."""
        files = [self._tmp_file(data) for data in (mine, base, theirs)]
        try:
            done = subprocess.run(
                ["git", "merge-file", "-p", "--quiet", *map(str, files)], capture_output=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        finally:
            for f in files:
                f.unlink(missing_ok=True)
        return done.stdout if done.returncode == 0 else None

    def sync_exercise(self, name: str) -> Change:
        label = f"exercises/{name}"
        course_p, mine_p, record = self.exercises / name, self.root / "exercises" / name, self.base / "exercises" / name
        theirs = course_p.read_bytes()
        for _ in range(ATTEMPTS):
            if not os.path.lexists(mine_p):
                mine_p.parent.mkdir(parents=True, exist_ok=True)
                if self._create(mine_p, theirs):
                    self._put(theirs, record)
                    return Change(label, "added")
                continue
            mine = mine_p.read_bytes()
            try:
                base = record.read_bytes()
            except OSError:
                base = None
            if base is None:  # no record: the copy stays as it is, and the course's version is the new base
                self._put(theirs, record)
                return Change(label, "unchanged" if mine == theirs else "kept as it is")
            if theirs == base:
                return Change(label, "unchanged")
            link = self._link(mine_p, course_p)
            if link:
                return Change(label, "left as it was", link)
            if mine == base:
                new, action, detail = theirs, "updated", ""
            else:
                saved = self.keep(mine, name, "before-update")
                new = self._merge_text(base, mine, theirs)
                if new is None:  # both changed the same lines: the copy stays the learner's
                    self._put(theirs, record)
                    return Change(
                        label,
                        "kept as it is",
                        f"the course changed lines you had edited: its new version is {course_p} (compare, and copy "
                        f"what you need); your copy is also saved as {saved.relative_to(self.root)}",
                    )
                action, detail = "merged", f"your copy before the update: {saved.relative_to(self.root)}"
            try:
                self._commit(mine_p, new, mine)
            except _Changed:
                continue
            self._put(theirs, record)
            return Change(label, action, detail)
        raise LessonError(f"{mine_p} kept changing while it was being updated: save and close it, then run sync again")

    # --- status and reset -----------------------------------------------------------------------------------------

    def status(self) -> list[Change]:
        out = []
        for name in self.lessons():
            mine_p = self.root / name
            if not mine_p.exists():
                out.append(Change(name, "not copied yet", "run sync"))
                continue
            try:
                theirs = _read(self.course / name)
                mine = _read(mine_p)
                _ids(unique_ids_of(mine), mine_p)
            except (LessonError, OSError) as err:
                out.append(Change(name, "cannot be read", f"{err}: {self._what_to_do(name)}"))
                continue
            found = self.base_of(name, mine)
            if found is None:
                out.append(Change(name, "no record", "run sync: it keeps your copy as it is"))
                continue
            base, base_id = found
            edited = _text(mine) != _text(base)
            detail = ""
            if _text(theirs) != _text(base):
                detail = "the course has changed it since: run sync"
                try:
                    record_raw = (self.base / name).read_bytes()
                except OSError:
                    record_raw = b""
                if (
                    record_raw
                    and _digest(record_raw) != base_id
                    and _text(parse(record_raw, self.base / name)) == _text(theirs)
                ):
                    detail = (
                        "it was saved over the course's last update (a JupyterLab tab open during the update, "
                        "then 'Overwrite'?): close its tab, run make update again and open it anew to bring the course's change"
                    )
            link = self._link(mine_p, self.course / name)
            if link:  # sync leaves it as it is: say so, and what to do, instead of "run sync"
                detail = ("the course has changed it since; " if detail else "") + link
            out.append(Change(name, "edited" if edited else "as the course", detail))
        for name in self.exercise_files():
            label, mine_p = f"exercises/{name}", self.root / "exercises" / name
            try:
                mine, theirs = mine_p.read_bytes(), (self.exercises / name).read_bytes()
                base = (self.base / "exercises" / name).read_bytes()
            except OSError:
                out.append(Change(label, "not copied yet", "run sync"))
                continue
            detail = "the course has changed it since: run sync" if theirs != base else ""
            out.append(Change(label, "edited" if mine != base else "as the course", detail))
        gone = self.orphans()
        out.extend(gone)
        lessons = set(self.lessons()) | {c.lesson for c in gone}
        for p in sorted(self.root.glob("*.ipynb")) if self.root.is_dir() else []:
            if p.name not in lessons:
                out.append(Change(p.name, "yours", "not a lesson of the course: sync leaves it alone"))
        return out

    def reset(self, lesson: str, discard: bool = False) -> Change:
        name = self.find(lesson)
        course_p, mine_p = self.course / name, self.root / name
        try:
            theirs_raw = course_p.read_bytes()
            theirs = parse(theirs_raw, course_p)
        except LessonError as err:
            raise LessonError(
                f"{err}: the course's own copy is damaged; `git checkout -- {course_p}` restores it"
            ) from None
        with self.locked():
            base_id = self._store_base(theirs_raw)
            data = _dump(_mark(theirs, base_id))
            for _ in range(ATTEMPTS):
                self.late = []
                detail = ""
                if not os.path.lexists(mine_p):
                    if not self._create(mine_p, data):
                        continue
                else:
                    mine_raw = mine_p.read_bytes()
                    if not discard and not self._is_course(mine_raw, theirs):
                        detail = f"yours is saved as {self.keep(mine_raw, name, 'reset').relative_to(self.root)}"
                    try:
                        self._commit(mine_p, data, mine_raw)
                    except _Changed:
                        continue
                self._record(name, theirs_raw)
                return Change(name, "reset", detail)
        raise LessonError(f"{mine_p} kept changing (saved from JupyterLab?): save and close it, then reset again")

    @staticmethod
    def _is_course(raw: bytes, theirs: dict) -> bool:
        try:
            mine = json.loads(raw.decode("utf-8"))
            return mine["cells"] == theirs["cells"]
        except (ValueError, KeyError, TypeError):
            return False

    def find(self, lesson: str) -> str:
        names = self.lessons()
        hits = [n for n in names if n == lesson or n.startswith(f"{lesson}_") or n == f"{lesson}.ipynb"]
        if len(hits) != 1:
            raise WorkspaceError(
                f"no single lesson matches {lesson!r}: give its number (e.g. 03) or file name; "
                f"the lessons are {', '.join(names)}"
            )
        return hits[0]


def exercise_file(name: str, root: Path = WORKSPACE, course: Path = EXERCISES) -> Path:
    """The exercise file a lesson asks the learner to edit: their copy in workspace/exercises/ (made by sync), or,
    where there is none (CI executes notebooks/ without a workspace), the course's own in scripts/exercises/."""
    mine = Path(root) / "exercises" / name
    return mine if mine.is_file() else Path(course) / name


def running_jupyter_servers() -> list[dict]:
    """The Jupyter servers of this user that run now: their `jpserver-<pid>.json` files in Jupyter's runtime folder
    (what `jupyter_server.serverapp.list_running_servers` reads, without its 10-second import)."""
    try:
        from jupyter_core.paths import jupyter_runtime_dir

        folder = Path(jupyter_runtime_dir())
    except ImportError:
        return []
    servers = []
    for f in sorted(folder.glob("jpserver-*.json")) if folder.is_dir() else []:
        try:
            info = json.loads(f.read_text(encoding="utf-8"))
            os.kill(int(info["pid"]), 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        servers.append(info)
    return servers


def open_in_jupyter(timeout: float = 1.0) -> set[Path]:
    """The notebooks that running Jupyter servers of this user have a session (a kernel) for, as resolved paths:
    JupyterLab starts one for each notebook tab it opens (its REST API: GET /api/sessions)."""
    found: set[Path] = set()
    for info in running_jupyter_servers():
        root = Path(info.get("root_dir") or info.get("notebook_dir") or ".")
        request = urllib.request.Request(
            str(info.get("url", "")).rstrip("/") + "/api/sessions",
            headers={"Authorization": f"token {info.get('token', '')}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                sessions = json.load(answer)
        except (OSError, ValueError):
            continue
        for session in sessions if isinstance(sessions, list) else []:
            path = session.get("path") if isinstance(session, dict) else None
            if isinstance(path, str):
                found.add((root / path).resolve())
    return found


def glob_escape(text: str) -> str:
    return re.sub(r"([*?[])", r"[\1]", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=WORKSPACE, help="the workspace folder (default: workspace/)")
    parser.add_argument("--course", type=Path, default=NOTEBOOKS, help="the course's lessons (default: notebooks/)")
    parser.add_argument(
        "--exercises",
        type=Path,
        default=None,
        help="the course's exercise files (default: scripts/exercises/ with the default --course, else none)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="copy new lessons and merge the course's changes into yours")
    sub.add_parser("status", help="which lessons you edited, and which the course changed since")
    reset = sub.add_parser("reset", help="a lesson back to the course's version (yours is saved unless --discard)")
    reset.add_argument("lesson", help="its number (03) or file name")
    reset.add_argument("--discard", action="store_true", help="do not save your copy first")
    args = parser.parse_args(argv)
    exercises = args.exercises or (EXERCISES if args.course == NOTEBOOKS else None)
    ws = Workspace(args.root, args.course, exercises)
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted_at_start:  # from here, Ctrl-C is answered below
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if args.command == "sync":
            changes = ws.sync()
            for c in changes:
                if c.action != "unchanged":
                    print(f"[workspace] {c}", file=sys.stderr if c.action == "left as it was" else sys.stdout)
            left = [c for c in changes if c.action == "left as it was"]
            print(
                f"[workspace] {sum(c.lesson.endswith('.ipynb') and c.action != GONE for c in changes)} lessons in {ws.root}: open them there (your work stays yours on updates; "
                f"copies saved before an update or reset are in {ws.saved})"
                + (f"; {len(left)} left as they were (above)" if left else "")
            )
        elif args.command == "status":
            for c in ws.status():
                print(c)
        else:
            print(f"[workspace] {ws.reset(args.lesson, args.discard)}")
    except (WorkspaceError, LessonError) as err:
        print(f"[workspace] ERROR: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"[workspace] ERROR: {err.filename or ws.root}: {err.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("[workspace] interrupted: each lesson is either updated or as it was; run sync again", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
