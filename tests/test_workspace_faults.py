"""The learner's workspace under faults (utils/workspace.py): races with a save from JupyterLab, kills, Ctrl-C, two
syncs at once, damaged copies and records, a full or read-only disk, a second sync. Each test names the trial of the
fault report it reproduces (W05 ... W31); nothing a learner wrote may be lost, hidden or merged twice."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from utils import workspace
from utils.paths import REPO_ROOT

MINE = "K = 5  # MY VALUE"
FIX = "K = 2_000_000  # COURSE FIX"


def notebook(cells: list[tuple[str, str]], kind: str = "code") -> dict:
    return {
        "cells": [
            {"cell_type": kind, "execution_count": None, "id": cid, "metadata": {}, "outputs": [], "source": src}
            if kind == "code"
            else {"cell_type": kind, "id": cid, "metadata": {}, "source": src}
            for cid, src in cells
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def as_saved(nb: dict) -> str:
    """A notebook's text as JupyterLab's server saves it: indent 1, sorted keys."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write(path: Path, nb: dict) -> None:
    """As JupyterLab's server saves a notebook: in place, indent 1, sorted keys."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(as_saved(nb), encoding="utf-8")


def beside(work: Callable[[], None]) -> Callable[[], None]:
    """Starts `work` in a thread (a save from JupyterLab during a sync); the function returned waits for it and
    raises here whatever it raised there (pytest only warns about a thread's exception)."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as err:
            failed.append(err)

    t = threading.Thread(target=run)
    t.start()

    def join() -> None:
        t.join()
        if failed:
            raise failed[0]

    return join


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def src(nb: dict, cid: str) -> str:
    return next("".join(c["source"]) for c in nb["cells"] if c["id"] == cid)


def all_text(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in read(path)["cells"])


def notes(path: Path) -> int:
    return sum(workspace.UPDATE_NOTE in c.get("metadata", {}).get("tags", []) for c in read(path)["cells"])


LESSONS = ["01_one.ipynb", "02_two.ipynb", "03_three.ipynb"]


def course_v1(n_cells: int = 6) -> dict:
    return notebook([(f"c{i}", f"x{i} = {i}") for i in range(n_cells)])


@pytest.fixture
def ws(tmp_path) -> workspace.Workspace:
    """A course of three lessons, synced into a workspace."""
    for name in LESSONS:
        write(tmp_path / "notebooks" / name, course_v1())
    w = workspace.Workspace(tmp_path / "workspace", tmp_path / "notebooks")
    assert [c.action for c in w.sync()] == ["added"] * 3
    return w


def edit(path: Path, cid: str, text: str) -> None:
    nb = read(path)
    next(c for c in nb["cells"] if c["id"] == cid)["source"] = text
    write(path, nb)


def add_cell(path: Path, after: str, cid: str, text: str) -> None:
    nb = read(path)
    i = [c["id"] for c in nb["cells"]].index(after)
    nb["cells"].insert(
        i + 1, {"cell_type": "code", "execution_count": None, "id": cid, "metadata": {}, "outputs": [], "source": text}
    )
    write(path, nb)


def edited_and_changed(w: workspace.Workspace, names=("01_one.ipynb",)) -> None:
    """The learner edits cell c1 of each lesson; the course changes c1 (a conflict) and c3."""
    for name in names:
        edit(w.root / name, "c1", MINE)
        edit(w.course / name, "c1", FIX)
        edit(w.course / name, "c3", "x3 = 'course'")


def everywhere(w: workspace.Workspace, text: str, name: str) -> bool:
    """`text` in the learner's copy of `name` or in one of its saved copies."""
    copies = [w.root / name, *w.saved.glob(Path(name).stem + ".*.ipynb")]
    return any(text in p.read_text(encoding="utf-8") for p in copies if p.exists())


def no_leftovers(w: workspace.Workspace) -> None:
    assert not list(w.root.glob("*.partial")) and not list(w.base.glob("*.partial"))
    assert not list(w.tmp.glob("*")) and not list(w.hold.glob("*"))
    for p in w.saved.glob("*.ipynb"):
        read(p)  # every saved copy is a whole notebook


# --- the breaks that lose or hide work ---------------------------------------------------------------------------


def test_W19_two_resets_in_the_same_second_keep_the_learners_copy(ws, monkeypatch):
    monkeypatch.setattr(workspace.time, "strftime", lambda fmt, *a: "20261128-163445")  # one second for every save
    mine = ws.root / "01_one.ipynb"
    edit(mine, "c1", MINE)
    first, second = ws.reset("01"), ws.reset("01")
    assert "saved as" in first.detail and second.detail == ""  # the second copy was the course's: nothing to save
    assert everywhere(ws, MINE, "01_one.ipynb")
    # two different copies saved in the same second: two files
    edit(mine, "c1", "MY SECOND VALUE")
    ws.reset("01")
    assert everywhere(ws, MINE, "01_one.ipynb") and everywhere(ws, "MY SECOND VALUE", "01_one.ipynb")
    assert len(list(ws.saved.glob("01_one.reset-*.ipynb"))) == 2


def test_W11_a_rerun_in_the_same_second_keeps_the_earlier_saved_copy(ws, monkeypatch):
    monkeypatch.setattr(workspace.time, "strftime", lambda fmt, *a: "20261128-163445")
    mine = ws.root / "01_one.ipynb"
    edit(mine, "c1", "FIRST")
    ws.keep(mine.read_bytes(), "01_one.ipynb", "before-update")
    edit(mine, "c1", "SECOND")
    ws.keep(mine.read_bytes(), "01_one.ipynb", "before-update")
    assert everywhere(ws, "FIRST", "01_one.ipynb") and everywhere(ws, "SECOND", "01_one.ipynb")
    ws.keep(mine.read_bytes(), "01_one.ipynb", "before-update")  # the same bytes again: not saved twice
    assert len(list(ws.saved.glob("*.ipynb"))) == 2


def jupyter_save_in_place(path: Path, nb: dict) -> None:
    """A save from JupyterLab, through Jupyter's server's own code (jupyter_server.services.contents.fileio.
    atomic_writing, its default): the file is copied to `.~name`, written in place, and the copy removed.

    Where the file leaves its place between the server's check and its copy (a sync moving it aside), the server
    fails the save: JupyterLab says so and keeps the notebook unsaved in the browser, and its next save writes it.
    That second save is made here at once, so that a save Jupyter reports as failed is never counted as lost."""
    from jupyter_server.services.contents.fileio import atomic_writing

    text = as_saved(nb)
    deadline = time.monotonic() + 10  # a sync holds the file aside for milliseconds; on a busy machine, longer
    while True:
        try:
            with atomic_writing(str(path)) as f:
                f.write(text)
            return
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise AssertionError(f"Jupyter could not save {path} in 10 s") from None
            time.sleep(0.01)


def autosave_with_typed_cell(path: Path) -> None:
    nb = read(path)
    nb["cells"].append(
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "typed1",
            "metadata": {},
            "outputs": [],
            "source": "TYPED DURING SYNC",
        }
    )
    jupyter_save_in_place(path, nb)


def test_W14_an_autosave_between_syncs_read_and_its_write_is_merged(ws, monkeypatch):
    edited_and_changed(ws)
    mine = ws.root / "01_one.ipynb"
    fired = []

    def autosave(path: Path) -> None:
        if path == mine and not fired:
            fired.append(1)
            autosave_with_typed_cell(path)

    monkeypatch.setitem(workspace.HOOKS, "read", autosave)  # after sync read the copy, before it writes
    changes = ws.sync()
    assert fired and changes[0].action == "merged"
    assert "TYPED DURING SYNC" in all_text(mine)  # in the working copy itself
    assert src(read(mine), "c1") == MINE and FIX in all_text(mine) and notes(mine) == 1
    assert [c.action for c in ws.sync()] == ["unchanged"] * 3
    no_leftovers(ws)


def test_W14_a_save_that_makes_the_file_anew_is_read_once_written(ws, monkeypatch):
    """Where the copy was away when Jupyter's server looked (a sync had moved it aside), the server writes a new file
    with no `.~` copy beside it: a sync that finds it half-written reads it again once the save has written it, and
    merges it. (The save is written during that first read, so this does not time how long sync waits for it.)"""
    edited_and_changed(ws)
    mine = ws.root / "01_one.ipynb"
    nb = read(mine)
    nb["cells"].append({"cell_type": "markdown", "id": "typed1", "metadata": {}, "source": "TYPED INTO A NEW FILE"})
    mine.write_bytes(b"")  # the server has made the file: nothing written into it yet
    parsed = []

    def parse(raw: bytes, where: Path) -> dict:
        if where == mine:
            parsed.append(raw)
            if not raw:
                write(mine, nb)  # sync has read the file half-written: the server now finishes its save
        return real_parse(raw, where)

    real_parse = workspace.parse
    monkeypatch.setattr(workspace, "parse", parse)
    changes = ws.sync()
    assert parsed[0] == b"" and len(parsed) >= 2  # read half-written, then again once written
    assert changes[0].action == "merged", changes[0]
    assert "TYPED INTO A NEW FILE" in all_text(mine) and src(read(mine), "c1") == MINE and notes(mine) == 1
    no_leftovers(ws)


def test_W14_a_save_into_the_old_file_during_the_swap_is_kept(ws, monkeypatch):
    """A save that opened the copy just before sync moved it aside, and writes after sync's check."""
    edited_and_changed(ws)
    mine = ws.root / "01_one.ipynb"
    opened = {}

    def open_for_save(path: Path) -> None:
        if path == mine:
            opened["f"] = open(path, "r+b")  # the writer's handle, used in the next hook

    def write_late(path: Path) -> None:
        if "f" in opened:
            nb = read(ws.saved / next(p.name for p in ws.saved.glob("01_one.before-update-*")))
            nb["cells"].append(
                {"cell_type": "markdown", "id": "late1", "metadata": {}, "source": "WRITTEN DURING THE SWAP"}
            )
            f = opened.pop("f")
            f.seek(0)
            f.truncate()
            f.write((json.dumps(nb, indent=1, sort_keys=True) + "\n").encode())
            f.close()

    monkeypatch.setitem(workspace.HOOKS, "before-commit", open_for_save)
    monkeypatch.setitem(workspace.HOOKS, "after-commit", write_late)
    change = ws.sync()[0]
    assert "during the update is kept" in change.detail
    assert everywhere(ws, "WRITTEN DURING THE SWAP", "01_one.ipynb")
    assert FIX in all_text(mine)
    no_leftovers(ws)


def test_W14_a_save_that_replaces_the_file_during_the_swap_is_kept(ws, monkeypatch):
    """An editor that saves by writing a new file and renaming it over the copy (not JupyterLab, but vim does)."""
    edited_and_changed(ws)
    mine = ws.root / "01_one.ipynb"
    fired = []

    def replace_file(path: Path) -> None:
        if path == mine and not path.exists() and not fired:
            fired.append(1)
            nb = course_v1()
            nb["cells"][1]["source"] = MINE
            nb["cells"].append({"cell_type": "markdown", "id": "new1", "metadata": {}, "source": "SAVED BY RENAME"})
            write(path, nb)

    monkeypatch.setitem(workspace.HOOKS, "held", replace_file)  # the copy is moved aside: the path is free
    ws.sync()
    assert "SAVED BY RENAME" in all_text(mine) and FIX in all_text(mine) and notes(mine) == 1
    no_leftovers(ws)


def test_W14_autosaves_at_random_instants_are_never_lost(tmp_path):
    """The bounded random loop: a save from JupyterLab at a random instant of a sync, 15 times."""
    rng = random.Random(14)
    for trial in range(15):
        course, root = tmp_path / f"c{trial}", tmp_path / f"w{trial}"
        for name in LESSONS:
            write(course / name, course_v1(40))
        w = workspace.Workspace(root, course)
        w.sync()
        edited_and_changed(w, LESSONS)
        text = f"TYPED {trial}"
        target = root / rng.choice(LESSONS)

        delay = rng.uniform(0, 0.03)
        nb = read(target)  # the notebook open in JupyterLab: the learner types a cell into it during the sync
        nb["cells"].append({"cell_type": "markdown", "id": "typed1", "metadata": {}, "source": text})

        def save_later(delay=delay, target=target, nb=nb):
            time.sleep(delay)
            jupyter_save_in_place(target, nb)

        join = beside(save_later)
        w.sync()
        join()
        assert everywhere(w, text, target.name), f"trial {trial}: the save was lost"
        w.sync()
        for name in LESSONS:
            assert everywhere(w, MINE, name) and FIX in all_text(root / name)
        no_leftovers(w)


def test_W09_two_cells_with_the_same_id_both_stay_in_the_working_copy(ws):
    mine = ws.root / "01_one.ipynb"
    nb = read(mine)
    nb["cells"][1]["source"] = "MY WORK A"
    twin = json.loads(json.dumps(nb["cells"][1]))
    twin["source"] = "MY WORK B"
    nb["cells"].insert(2, twin)
    write(mine, nb)
    edit(ws.course / "01_one.ipynb", "c3", "x3 = 'course'")
    change = ws.sync()[0]
    text = all_text(mine)
    assert "MY WORK A" in text and "MY WORK B" in text and "x3 = 'course'" in text
    assert "c1-2" in change.detail  # said so
    order = [c["id"] for c in read(mine)["cells"]]
    assert order.index("c1-2") == order.index("c1") + 1 and len(set(order)) == len(order)
    assert [c.action for c in ws.sync()] == ["unchanged"] * 3


def test_W21_without_its_records_a_copy_is_kept_and_nothing_is_hidden(ws):
    import shutil

    mine = ws.root / "01_one.ipynb"
    edit(mine, "c1", MINE)
    before = mine.read_bytes()
    shutil.rmtree(ws.meta)
    changes = ws.sync()
    assert mine.read_bytes() == before  # untouched, in place
    assert changes[0].action == "kept as it is" and "reset 01" in changes[0].detail
    assert [c.action for c in changes[1:]] == ["unchanged", "unchanged"]
    assert not ws.saved.exists() or not list(ws.saved.glob("*"))  # no needless saved copies
    # from now on, the course's changes merge into it
    edit(ws.course / "01_one.ipynb", "c3", "x3 = 'course'")
    assert ws.sync()[0].action == "merged"
    assert src(read(mine), "c1") == MINE and src(read(mine), "c3") == "x3 = 'course'"


def test_W30_saved_copies_are_reachable_from_jupyterlab(ws):
    """Jupyter's own contents manager, with its default settings (hidden files refused), as JupyterLab reads the
    workspace: a saved copy opens, and it is listed."""
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from tornado.web import HTTPError

    edited_and_changed(ws)
    ws.sync()
    saved = next(ws.saved.glob("01_one.before-update-*.ipynb"))
    cm = FileContentsManager(root_dir=str(ws.root.parent))
    assert cm.allow_hidden is False
    got = cm.get(f"workspace/saved/{saved.name}")
    assert MINE in json.dumps(got["content"])
    listing = [e["name"] for e in cm.get("workspace", content=True)["content"]]
    assert "saved" in listing
    with pytest.raises(HTTPError):  # what the earlier place, workspace/.course/saved/, gave
        cm.get("workspace/.course/base/01_one.ipynb")


def test_W30_saved_copies_of_an_earlier_version_move_to_the_visible_folder(ws):
    old = ws.meta / "saved"
    old.mkdir()
    (old / "01_one.before-update-20261128-163445.ipynb").write_text(json.dumps(course_v1()))
    ws.sync()
    assert not list(old.glob("*")) and (ws.saved / "01_one.before-update-20261128-163445.ipynb").exists()


def test_W31_overwrite_from_an_open_tab_after_a_sync_brings_the_course_change_again(ws):
    mine = ws.root / "01_one.ipynb"
    edit(mine, "c1", MINE)
    on_screen = mine.read_bytes()  # what the open tab holds
    edit(ws.course / "01_one.ipynb", "c3", "x3 = 'course'")
    assert ws.sync()[0].action == "merged"
    mine.write_bytes(on_screen)  # JupyterLab: "File Changed" -> Overwrite
    status = str(ws.status()[0])
    assert "saved over the course's last update" in status and "run make update again" in status
    assert ws.sync()[0].action == "merged"
    assert src(read(mine), "c3") == "x3 = 'course'" and src(read(mine), "c1") == MINE


@pytest.mark.parametrize(
    ("trial", "damage", "says"),
    [
        ("W06", lambda raw: b"", "is empty"),
        ("W05", lambda raw: raw[: len(raw) // 5], "is not a complete notebook"),
        (
            "W07",
            lambda raw: json.dumps({"nbformat": 3, "worksheets": [{"cells": []}], "metadata": {}}).encode(),
            "format 3",
        ),
        ("W28", lambda raw: b"\xef\xbb\xbf" + raw, "byte-order mark"),
        (
            "W08",
            lambda raw: json.dumps(
                {
                    **json.loads(raw),
                    "cells": [{k: v for k, v in c.items() if k != "id"} for c in json.loads(raw)["cells"]],
                }
            ).encode(),
            "has no id",
        ),
    ],
)
def test_an_unreadable_copy_is_named_in_one_line_and_the_other_lessons_still_sync(ws, capsys, trial, damage, says):
    mine = ws.root / "01_one.ipynb"
    edit(ws.course / "01_one.ipynb", "c3", "x3 = 'course'")
    edit(ws.course / "03_three.ipynb", "c3", "x3 = 'course'")
    mine.write_bytes(damage(mine.read_bytes()))
    before = mine.read_bytes()
    for _ in range(3):  # retries add no saved copies
        assert workspace.main(["--root", str(ws.root), "--course", str(ws.course), "sync"]) == 0
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line]
    assert len(lines) == 3 and all(says in line and str(mine) in line and "reset 01" in line for line in lines)
    assert mine.read_bytes() == before
    assert src(read(ws.root / "03_three.ipynb"), "c3") == "x3 = 'course'"  # a later lesson got its fix
    assert not ws.saved.exists() or not list(ws.saved.glob("*"))
    assert "cannot be read" in str(ws.status()[0])
    no_leftovers(ws)


def test_W22_a_damaged_record_counts_as_a_missing_one(ws):
    mine = ws.root / "01_one.ipynb"
    edit(mine, "c1", MINE)
    nb = read(mine)
    del nb["metadata"][workspace.META_KEY]  # a copy of the earlier version of this tool: only the record
    write(mine, nb)
    record = ws.base / "01_one.ipynb"
    record.write_bytes(record.read_bytes()[:100])
    assert "no record" in str(ws.status()[0])
    change = ws.sync()[0]
    assert change.action == "kept as it is" and src(read(mine), "c1") == MINE


# --- interrupted and concurrent syncs ---------------------------------------------------------------------------


def cli(
    w: workspace.Workspace, *args: str, env: dict | None = None, base: dict | None = None, **kw
) -> subprocess.Popen:
    """The workspace command on `w`, in the tests' environment (or `base`) with `env` added."""
    cmd = [sys.executable, "-m", "utils.workspace", "--root", str(w.root), "--course", str(w.course), *args]
    return subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        env={**(os.environ if base is None else base), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def check_after_rerun(w: workspace.Workspace, names=LESSONS) -> None:
    """After an interrupted sync and a rerun: each lesson merged exactly once, nothing lost or left."""
    for name in names:
        mine = w.root / name
        assert notes(mine) == 1, f"{name}: {notes(mine)} 'Course update' notes"
        assert src(read(mine), "c1") == MINE and all_text(mine).count(FIX) == 1
        assert src(read(mine), "c3") == "x3 = 'course'"
    assert {c.action for c in w.sync()} == {"unchanged"}
    no_leftovers(w)


@pytest.mark.parametrize("point", ["read", "before-commit", "held", "after-commit"])
def test_W11_a_sync_killed_at_each_step_then_run_again_merges_once(ws, point):
    edited_and_changed(ws, LESSONS)
    p = cli(ws, "sync", env={"COURSE_WORKSPACE_KILL_AT": point})
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert (ws.root / "01_one.ipynb").exists() or point == "held"  # moved aside by the swap
    assert workspace.main(["--root", str(ws.root), "--course", str(ws.course), "sync"]) == 0
    check_after_rerun(ws)


BIG = [f"{i:02d}_lesson.ipynb" for i in range(6)]


def big_workspace(folder: Path) -> workspace.Workspace:
    """Six lessons of 300 cells, synced, then each edited and changed: a sync that takes most of a second."""
    for name in BIG:
        write(folder / "notebooks" / name, course_v1(300))
    w = workspace.Workspace(folder / "workspace", folder / "notebooks")
    w.sync()
    edited_and_changed(w, BIG)
    return w


#: The command as `make lab` and `make update` run it: Python keeps the course's modules compiled (__pycache__), where
#: the tests' own runs (PYTHONDONTWRITEBYTECODE=1) compile utils/workspace.py anew each time, before any line of it runs
#: and so before it can answer Ctrl-C: a window of the tests' making, several times its size on a loaded machine.
AS_RUN = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def seconds(cmd) -> float:
    start = time.monotonic()
    subprocess.run(cmd, cwd=REPO_ROOT, check=True, capture_output=True, timeout=120, env=AS_RUN)
    return time.monotonic() - start


@pytest.mark.parametrize(("trial", "sig"), [("W10", signal.SIGKILL), ("W27", signal.SIGINT)])
def test_W10_W27_syncs_killed_or_interrupted_at_random_instants(tmp_path, trial, sig):
    """The bounded random loop: 3 syncs stopped at a random instant of their work, each run again. The instants
    are drawn between the interpreter's start-up and the end of a whole sync, both measured here first, with the
    command run as `make lab` runs it (its modules compiled once, by the first of these runs)."""
    rng = random.Random(10)
    seconds([sys.executable, "-c", "import utils.workspace"])  # compiles the modules where they are not yet
    startup = seconds([sys.executable, "-c", "import utils.workspace"])
    w = big_workspace(tmp_path / "calibrate")
    whole = seconds([sys.executable, "-m", "utils.workspace", "--root", str(w.root), "--course", str(w.course), "sync"])
    for k in range(3):
        w = big_workspace(tmp_path / str(k))
        p = cli(w, "sync", base=AS_RUN)
        time.sleep(rng.uniform(startup, whole))
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        assert p.returncode in (0, 130, -sig), err
        assert "Traceback" not in err
        if p.returncode == 130:
            assert err.strip().splitlines()[-1] in (STARTING, WORKING), err
        w.sync()
        check_after_rerun(w, BIG)


CTRL_C_AT = """
import argparse, importlib.abc, os, runpy, signal, sys
def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
if sys.argv[1] == "imports":  # while the command imports urllib.request, one of its first imports
    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "urllib.request":
                ctrl_c()
    sys.meta_path.insert(0, Finder())
else:  # while it reads its arguments
    read = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = lambda self, *a, **kw: (ctrl_c(), read(self, *a, **kw))[1]
sys.argv = ["utils.workspace", *sys.argv[2:]]
runpy.run_module("utils.workspace", run_name="__main__", alter_sys=True)
"""
STARTING = "[workspace] interrupted while starting: nothing was changed; run it again"
WORKING = "[workspace] interrupted: each lesson is either updated or as it was; run sync again"


def _ctrl_c_at(when: str, course: Path, root: Path, **kw) -> subprocess.CompletedProcess:
    args = [when, "--root", str(root), "--course", str(course), "sync"]
    return subprocess.run(
        [sys.executable, "-c", CTRL_C_AT, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, **kw
    )


@pytest.mark.parametrize("when", ["imports", "arguments"])
def test_ctrl_c_while_the_command_starts_is_one_line_and_status_130_with_nothing_written(tmp_path, when):
    course = tmp_path / "notebooks"
    write(course / "01_one.ipynb", course_v1(3))
    done = _ctrl_c_at(when, course, tmp_path / "workspace")
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == [STARTING]
    assert not (tmp_path / "workspace").exists()


def test_ctrl_c_ignored_where_the_command_was_started_stays_ignored(tmp_path):
    """A shell script's background command starts with SIGINT ignored: the sync runs through."""
    course = tmp_path / "notebooks"
    write(course / "01_one.ipynb", course_v1(3))
    ignore = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
    done = _ctrl_c_at("imports", course, tmp_path / "workspace", preexec_fn=ignore)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "workspace" / "01_one.ipynb").exists()


def test_ctrl_c_during_the_work_is_answered_by_the_command_not_as_at_its_start(tmp_path):
    w = big_workspace(tmp_path)
    p = cli(w, "sync", env={"COURSE_WORKSPACE_INTERRUPT_AT": "before-commit"})
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert err.strip().splitlines() == [WORKING]
    w.sync()
    check_after_rerun(w, BIG)


def test_W13_two_syncs_at_once_merge_once(tmp_path):
    for k in range(2):
        w = big_workspace(tmp_path / str(k))
        a, b = cli(w, "sync"), cli(w, "sync")
        outs = [a.communicate(timeout=120), b.communicate(timeout=120)]
        assert a.returncode == 0 and b.returncode == 0, outs
        assert "Traceback" not in outs[0][1] + outs[1][1]
        check_after_rerun(w, BIG)


# --- a disk that is full or read-only, a wrong --root -----------------------------------------------------------


def test_W12_a_full_disk_leaves_nothing_cut_and_says_so_in_one_line(ws, monkeypatch, capsys):
    edited_and_changed(ws)
    mine = ws.root / "01_one.ipynb"
    before = mine.read_bytes()
    real_fsync = os.fsync
    calls = {"n": 0}

    def full(fd):
        calls["n"] += 1
        if calls["n"] >= 2:  # the first write goes through (the course version's record), then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(workspace.os, "fsync", full)
    assert workspace.main(["--root", str(ws.root), "--course", str(ws.course), "sync"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and "No space left on device" in err[0] and "01_one.ipynb" in err[0]
    assert mine.read_bytes() == before
    no_leftovers(ws)
    monkeypatch.setattr(workspace.os, "fsync", real_fsync)
    assert ws.sync()[0].action == "merged"
    no_leftovers(ws)


def test_W24_a_read_only_workspace_is_one_line(ws, monkeypatch, capsys):
    real_open = os.open

    def read_only(path, flags, *a, **kw):
        if str(path).startswith(str(ws.root)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(workspace.os, "open", read_only)
    assert workspace.main(["--root", str(ws.root), "--course", str(ws.course), "sync"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Read-only file system" in err[0] and ".course" in err[0]


@pytest.mark.parametrize("root", ["README.md", "/proc/no-such-workspace"])
def test_W26_a_wrong_root_is_one_line(root, capsys):
    assert workspace.main(["--root", str(REPO_ROOT / root) if not root.startswith("/") else root, "sync"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[workspace] ERROR:")


def test_W26_a_folder_without_lessons_is_one_line_and_makes_no_workspace(tmp_path, capsys):
    assert workspace.main(["--root", str(tmp_path / "workspace"), "--course", str(tmp_path / "notebooks"), "sync"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no lessons in" in err[0]
    assert not (tmp_path / "workspace").exists()


def test_an_update_to_a_lesson_open_in_jupyterlab_says_what_to_do(ws, monkeypatch):
    """The running server is asked for its sessions (one per open notebook), as JupyterLab's own REST API answers;
    here a stand-in server answers with the lesson's path."""
    import http.server

    class Sessions(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/api/sessions" and self.headers.get("Authorization") == "token secret"
            body = json.dumps([{"path": "workspace/01_one.ipynb", "type": "notebook"}] if ok else []).encode()
            self.send_response(200 if ok else 403)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Sessions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    info = {"url": f"http://127.0.0.1:{server.server_port}/", "token": "secret", "root_dir": str(ws.root.parent)}
    monkeypatch.setattr(workspace, "running_jupyter_servers", lambda: [info])
    try:
        edited_and_changed(ws, ["01_one.ipynb", "02_two.ipynb"])
        changes = ws.sync()
    finally:
        server.shutdown()
    assert workspace.OPEN_ADVICE in changes[0].detail and "Overwrite" in changes[0].detail
    assert workspace.OPEN_ADVICE not in changes[1].detail


# --- make update and make lab (the Makefile's recipes, in a small clone of a course) ------------------------------


def test_W29_make_update_merges_the_lessons_when_the_environment_cannot_be_updated(tmp_path):
    """`make update` where the course's update brings a pin that cannot be installed (the set-up fails, as pip does
    with no index): the lessons are merged all the same, it says so, and `make lab` still opens JupyterLab. The
    course's Makefile and workspace code run for real; the set-up and JupyterLab are stand-ins."""
    import shutil

    up, me = tmp_path / "course", tmp_path / "learner"
    (up / "utils").mkdir(parents=True)
    (up / "tools").mkdir()
    shutil.copy(REPO_ROOT / "Makefile", up / "Makefile")
    for f in ("__init__.py", "paths.py", "workspace.py"):
        shutil.copy(REPO_ROOT / "utils" / f, up / "utils" / f)
    (up / ".gitignore").write_text(".venv/\nworkspace/\n__pycache__/\n")
    (up / "tools" / "setup_env.sh").write_text(
        '[ -f "$(dirname "$0")/../requirements.txt" ] || exit 0\n'
        'echo "[setup] ERROR: pip could not install requirements.txt" >&2; exit 1\n'
    )
    write(up / "notebooks" / "00_start_here.ipynb", course_v1())
    ident = ["-c", "user.email=c@example.invalid", "-c", "user.name=c"]

    def git(cwd, *args):
        done = subprocess.run(["git", *ident, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done

    git(up, "init", "-q", "-b", "main")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "v1")
    git(tmp_path, "clone", "-q", str(up), str(me))
    (me / ".venv" / "bin").mkdir(parents=True)
    (me / ".venv" / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (me / ".venv" / "bin" / "jupyter").write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/../../lab-opened"\n')
    for f in ("python", "jupyter"):
        (me / ".venv" / "bin" / f).chmod(0o755)

    def make(target):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
        return subprocess.run(
            ["make", "--no-print-directory", target], cwd=me, capture_output=True, text=True, timeout=120, env=env
        )

    first = make("lab")
    assert first.returncode == 0, first.stderr
    assert (me / "lab-opened").exists() and (me / "workspace" / "00_start_here.ipynb").exists()
    edit(me / "workspace" / "00_start_here.ipynb", "c1", MINE)
    # the course's update: a lesson fix and a new pin
    edit(up / "notebooks" / "00_start_here.ipynb", "c3", "x3 = 'course'")
    (up / "requirements.txt").write_text("some-new-package==1.0\n")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "v2")
    (me / "lab-opened").unlink()

    update = make("update")
    assert update.returncode != 0
    assert "your lessons are merged" in update.stderr and "make lab still opens JupyterLab" in update.stderr
    mine = read(me / "workspace" / "00_start_here.ipynb")
    assert src(mine, "c3") == "x3 = 'course'" and src(mine, "c1") == MINE
    lab = make("lab")
    assert lab.returncode == 0, lab.stderr
    assert "JupyterLab opens on the one you have" in lab.stderr and (me / "lab-opened").exists()


def test_running_jupyter_servers_are_read_from_jupyters_runtime_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for pid in (os.getpid(), int(dead.stdout)):
        (tmp_path / f"jpserver-{pid}.json").write_text(
            json.dumps({"pid": pid, "url": "http://127.0.0.1:1/", "token": "t"})
        )
    (tmp_path / "jpserver-9.json").write_text("{cut")
    assert [s["pid"] for s in workspace.running_jupyter_servers()] == [os.getpid()]
    assert workspace.open_in_jupyter(timeout=0.5) == set()  # nothing answers at that address: nothing is open


# --- exercise files in the workspace ------------------------------------------------------------------------------

TODO_V1 = '"""An exercise."""\n\nimport os\n\nworkers = None  # TODO 1: how many workers\nprint(workers)\n'


def test_exercise_files_are_copied_into_the_workspace_and_merged_line_by_line(tmp_path):
    course, ex = tmp_path / "notebooks", tmp_path / "exercises"
    write(course / "01_one.ipynb", course_v1())
    ex.mkdir()
    (ex / "mwms_todo.py").write_text(TODO_V1)
    (ex / "mwms_solution.py").write_text("workers = 2\n")  # not an exercise file: not copied
    w = workspace.Workspace(tmp_path / "workspace", course, ex)
    assert [str(c) for c in w.sync()] == ["01_one.ipynb: added", "exercises/mwms_todo.py: added"]
    mine = w.root / "exercises" / "mwms_todo.py"
    assert mine.read_text() == TODO_V1 and not (w.root / "exercises" / "mwms_solution.py").exists()
    mine.write_text(TODO_V1.replace("workers = None", "workers = 2"))
    # the course fixes the docstring: merged into the learner's answer
    (ex / "mwms_todo.py").write_text(TODO_V1.replace("An exercise.", "An exercise (fixed)."))
    change = w.sync()[1]
    assert change.action == "merged" and "before the update" in change.detail
    assert mine.read_text() == TODO_V1.replace("An exercise.", "An exercise (fixed).").replace(
        "workers = None", "workers = 2"
    )
    assert w.sync()[1].action == "unchanged"
    # the course changes the very line the learner answered: the learner's copy stays, and the message says where
    (ex / "mwms_todo.py").write_text(
        (ex / "mwms_todo.py").read_text().replace("# TODO 1: how many workers", "# TODO 1: the number of workers")
    )
    before = mine.read_bytes()
    change = w.sync()[1]
    assert change.action == "kept as it is" and str(ex / "mwms_todo.py") in change.detail
    assert mine.read_bytes() == before and w.sync()[1].action == "unchanged"
    no_leftovers(w)


def test_the_command_line_copies_the_courses_exercise_files(tmp_path):
    root = tmp_path / "workspace"
    assert workspace.main(["--root", str(root), "sync"]) == 0
    names = sorted(p.name for p in (root / "exercises").glob("*.py"))
    assert names == sorted(p.name for p in workspace.EXERCISES.glob("*_todo.py")) and names


def test_W02_a_course_change_to_a_cell_the_learner_deleted_is_mentioned(ws):
    mine = ws.root / "01_one.ipynb"
    nb = read(mine)
    nb["cells"] = [c for c in nb["cells"] if c["id"] != "c2"]
    write(mine, nb)
    edit(ws.course / "01_one.ipynb", "c2", "x2 = 'course'")
    change = ws.sync()[0]
    assert change.action == "merged" and "changed 1 cell(s) you had deleted" in change.detail
    assert "c2" not in [c["id"] for c in read(mine)["cells"]]


def test_a_lesson_finds_the_learners_exercise_copy_or_else_the_courses(tmp_path):
    course = tmp_path / "exercises"
    course.mkdir()
    (course / "mwms_todo.py").write_text(TODO_V1)
    root = tmp_path / "workspace"
    assert workspace.exercise_file("mwms_todo.py", root, course) == course / "mwms_todo.py"  # no workspace (CI)
    workspace.Workspace(root, tmp_path / "none", course).sync_exercise("mwms_todo.py")
    assert workspace.exercise_file("mwms_todo.py", root, course) == root / "exercises" / "mwms_todo.py"


def test_W04_copies_of_lessons_the_course_renamed_or_removed_are_named_as_kept(tmp_path, capsys):
    for n, name in enumerate(LESSONS):  # each lesson's cells with ids of their own, as the course's have
        write(
            tmp_path / "notebooks" / name,
            notebook([(f"c{i}" if n == 0 else f"l{n}c{i}", f"x{i} = {i}") for i in range(6)]),
        )
    ws = workspace.Workspace(tmp_path / "workspace", tmp_path / "notebooks")
    ws.sync()
    edit(ws.root / "01_one.ipynb", "c1", MINE)
    edit(ws.root / "03_three.ipynb", "l2c2", "MY OTHER CELL")
    write(ws.root / "my_notes.ipynb", notebook([("n1", "my own notebook")]))
    before = {p.name: p.read_bytes() for p in ws.root.glob("*.ipynb")}
    # the course renames 01 (and changes it) and removes 03, as a `git pull` brings it
    renamed = read(ws.course / "01_one.ipynb")
    renamed["cells"][3]["source"] = "x3 = 'course'"
    write(ws.course / "01_first.ipynb", renamed)
    (ws.course / "01_one.ipynb").unlink()
    (ws.course / "03_three.ipynb").unlink()
    args = ["--root", str(ws.root), "--course", str(ws.course)]
    for command in ("sync", "status", "sync"):
        assert workspace.main([*args, command]) == 0
        out = capsys.readouterr().out.splitlines()
        for name in ("01_one.ipynb", "03_three.ipynb"):
            said = [line for line in out if f"{name}:" in line]
            assert len(said) == 1, out
            assert all(w in said[0] for w in ("kept", "untouched", "no longer", "updated")), said
            assert "not edited" not in said[0]  # both were edited
        assert "01_first.ipynb" in next(line for line in out if "01_one.ipynb:" in line)  # where the lesson went
        if command == "sync":
            assert any("2 lessons in" in line for line in out), out
        else:
            assert "not a lesson of the course" in next(line for line in out if "my_notes.ipynb" in line)
        for name, data in before.items():
            assert (ws.root / name).read_bytes() == data  # untouched
    gone = "no longer in the course"
    assert [(c.lesson, c.action) for c in ws.sync()] == [
        ("01_first.ipynb", "unchanged"),
        ("02_two.ipynb", "unchanged"),
        ("01_one.ipynb", gone),
        ("03_three.ipynb", gone),
    ]


def test_W25_a_copy_that_is_a_link_stays_a_link(ws, tmp_path, capsys):
    real = tmp_path / "elsewhere" / "my_lesson_01.ipynb"
    real.parent.mkdir()
    os.replace(ws.root / "01_one.ipynb", real)  # the learner moved their copy out and left a link in its place
    link = ws.root / "01_one.ipynb"
    link.symlink_to(real)
    edit(real, "c1", MINE)
    before = real.read_bytes()
    edit(ws.course / "01_one.ipynb", "c3", "x3 = 'course'")
    edit(ws.course / "02_two.ipynb", "c3", "x3 = 'course'")
    args = ["--root", str(ws.root), "--course", str(ws.course)]
    for _ in range(2):
        assert workspace.main([*args, "sync"]) == 0
        out = capsys.readouterr()
        assert link.is_symlink() and link.resolve() == real.resolve()
        assert real.read_bytes() == before  # nothing written through the link
        said = [line for line in (out.out + out.err).splitlines() if "01_one.ipynb:" in line]
        assert len(said) == 1 and "link" in said[0] and f"mv {real}" in said[0], said
        assert src(read(ws.root / "02_two.ipynb"), "c3") == "x3 = 'course'"  # the other lessons still sync
    status = str(ws.status()[0])
    assert "the course has changed it since" in status and "link" in status
    # as the line says: the file itself in place of the link, and the next sync merges the course's change
    os.replace(real, link)
    assert ws.sync()[0].action == "merged"
    assert src(read(link), "c1") == MINE and src(read(link), "c3") == "x3 = 'course'"
    no_leftovers(ws)


def test_W25_an_exercise_copy_that_is_a_link_stays_a_link(tmp_path):
    course, ex = tmp_path / "notebooks", tmp_path / "exercises"
    write(course / "01_one.ipynb", course_v1())
    ex.mkdir()
    (ex / "mwms_todo.py").write_text(TODO_V1)
    w = workspace.Workspace(tmp_path / "workspace", course, ex)
    w.sync()
    real, link = tmp_path / "mine.py", w.root / "exercises" / "mwms_todo.py"
    os.replace(link, real)
    link.symlink_to(real)
    real.write_text(TODO_V1.replace("workers = None", "workers = 2"))
    (ex / "mwms_todo.py").write_text(TODO_V1.replace("An exercise.", "An exercise (fixed)."))
    change = w.sync()[1]
    assert change.action == "left as it was" and "link" in change.detail
    assert link.is_symlink() and real.read_text() == TODO_V1.replace("workers = None", "workers = 2")
