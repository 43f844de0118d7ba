"""The learner's workspace: a lesson run and edited there survives `git pull` of a course change, which then merges
into it cell by cell (utils/workspace.py), with real git and a real kernel."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from utils import execution, workspace
from utils.paths import REPO_ROOT


def git(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def lesson(*cells: tuple[str, str, str]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for cid, kind, src in cells:
        cell = nbformat.v4.new_code_cell(src) if kind == "code" else nbformat.v4.new_markdown_cell(src)
        cell.id = cid
        nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def save(nb, path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def sources(path) -> dict[str, str]:
    return {c["id"]: "".join(c["source"]) for c in json.loads(path.read_text())["cells"]}


COURSE_V1 = lesson(
    ("intro", "markdown", "# Lesson"),
    ("setup", "code", "x = 2"),
    ("exercise", "code", "answer = None  # your answer"),
    ("plot", "code", "print(x * 10)"),
)


@pytest.fixture
def course(tmp_path):
    """An upstream course repository and a learner's clone of it, with the course's .gitignore."""
    up, me = tmp_path / "course", tmp_path / "learner"
    up.mkdir()
    (up / ".gitignore").write_text((REPO_ROOT / ".gitignore").read_text())
    save(COURSE_V1, up / "notebooks" / "01_lesson.ipynb")
    for repo_cmd in (["init", "-q", "-b", "main"], ["add", "-A"]):
        assert git(up, *repo_cmd).returncode == 0
    ident = ["-c", "user.email=course@example.invalid", "-c", "user.name=course"]
    assert git(up, *ident, "commit", "-qm", "v1").returncode == 0
    assert git(tmp_path, "clone", "-q", str(up), str(me)).returncode == 0
    return up, me, ident


def test_the_gitignore_keeps_the_workspace_out_of_git():
    assert git(REPO_ROOT, "check-ignore", "-q", "workspace/03_allreduce_cost.ipynb").returncode == 0


def test_a_run_and_edited_lesson_survives_git_pull_and_takes_the_course_changes(course):
    up, me, ident = course
    ws = workspace.Workspace(me / "workspace", me / "notebooks")
    assert [c.action for c in ws.sync()] == ["added"]
    mine = me / "workspace" / "01_lesson.ipynb"

    # the learner runs the lesson (a real kernel) and edits it: an answer, and a cell of their own
    nb = nbformat.read(mine, as_version=4)
    NotebookClient(nb, timeout=60, kernel_name="python3", config=execution.kernel_config()).execute()
    nb.cells[2].source = "answer = 20"
    own = nbformat.v4.new_code_cell("print('my note')")
    own.id = "mine1"
    nb.cells.insert(3, own)
    nbformat.write(nb, mine)
    assert git(me, "status", "--porcelain").stdout == ""  # running and editing lessons leaves git clean

    # the course changes the lesson: the set-up, the exercise cell (also edited by the learner), a new cell
    v2 = lesson(
        ("intro", "markdown", "# Lesson"),
        ("setup", "code", "x = 3  # corrected"),
        ("exercise", "code", "answer = None  # your answer (an integer)"),
        ("plot", "code", "print(x * 10)"),
        ("more", "markdown", "A new section."),
    )
    save(v2, up / "notebooks" / "01_lesson.ipynb")
    assert git(up, *ident, "commit", "-qam", "v2").returncode == 0

    pulled = git(me, "pull", "--ff-only")
    assert pulled.returncode == 0, pulled.stderr
    changes = ws.sync()
    assert changes[0].action == "merged" and "Course update" in changes[0].detail

    merged = json.loads(mine.read_text())
    order = [c["id"] for c in merged["cells"]]
    src = sources(mine)
    assert src["setup"] == "x = 3  # corrected"  # the course's change, where the learner had not edited
    assert src["exercise"] == "answer = 20"  # the learner's answer kept
    assert src["mine1"] == "print('my note')"  # the learner's own cell kept in its place ...
    assert order.index("mine1") == order.index("plot") - 1  # ... before the cell it preceded
    assert "more" in src  # the course's new cell
    note = order.index("exercise") + 1
    assert workspace.UPDATE_NOTE in merged["cells"][note]["metadata"]["tags"]
    assert merged["cells"][note + 1]["source"] == "answer = None  # your answer (an integer)"
    plot = next(c for c in merged["cells"] if c["id"] == "plot")
    assert plot["outputs"] and "".join(plot["outputs"][0]["text"]) == "20\n"  # an unchanged cell keeps its output
    saved = list((me / "workspace" / "saved").glob("01_lesson.before-update-*.ipynb"))
    assert len(saved) == 1 and sources(saved[0])["exercise"] == "answer = 20"
    assert git(me, "status", "--porcelain").stdout == ""
    assert [c.action for c in ws.sync()] == ["unchanged"]  # a second sync has nothing to do


def test_an_unedited_copy_follows_the_course_and_deletions_are_respected(tmp_path):
    base = COURSE_V1
    mine = nbformat.from_dict(json.loads(json.dumps(base)))
    del mine.cells[3]  # the learner deleted the plot cell
    theirs = lesson(("intro", "markdown", "# Lesson, revised"), ("setup", "code", "x = 2"), ("plot", "code", "pass"))
    merged, both = workspace.merge(base, mine, theirs)
    assert both == 0
    assert [(c["id"], "".join(c["source"])) for c in merged["cells"]] == [
        ("intro", "# Lesson, revised"),  # the course's edit
        ("setup", "x = 2"),
    ]  # the course removed "exercise" (unedited, so it goes); the learner's deletion of "plot" holds


def test_a_cell_the_learner_edited_stays_when_the_course_removes_it():
    mine = nbformat.from_dict(json.loads(json.dumps(COURSE_V1)))
    mine.cells[2].source = "answer = 20"
    theirs = lesson(("intro", "markdown", "# Lesson"), ("setup", "code", "x = 2"), ("plot", "code", "print(x)"))
    merged, _ = workspace.merge(COURSE_V1, mine, theirs)
    assert [c["id"] for c in merged["cells"]] == ["intro", "setup", "exercise", "plot"]


def test_reset_saves_the_learners_copy_unless_discarded(tmp_path):
    course_dir = tmp_path / "notebooks"
    save(COURSE_V1, course_dir / "03_x.ipynb")
    ws = workspace.Workspace(tmp_path / "workspace", course_dir)
    ws.sync()
    mine = tmp_path / "workspace" / "03_x.ipynb"
    edited = json.loads(mine.read_text())
    edited["cells"][2]["source"] = ["answer = 20"]
    save(edited, mine)
    change = ws.reset("03")
    assert sources(mine)["exercise"] == "answer = None  # your answer"
    assert "saved as" in change.detail
    assert len(list((tmp_path / "workspace" / "saved").glob("03_x.reset-*.ipynb"))) == 1
    save(edited, mine)
    assert ws.reset("03", discard=True).detail == ""
    assert len(list((tmp_path / "workspace" / "saved").glob("*.ipynb"))) == 1
    with pytest.raises(workspace.WorkspaceError, match="give its number"):
        ws.reset("07")


def test_status_and_the_command_line(tmp_path):
    course_dir = tmp_path / "notebooks"
    save(COURSE_V1, course_dir / "01_lesson.ipynb")
    root = tmp_path / "workspace"
    cmd = [sys.executable, "-m", "utils.workspace", "--root", str(root)]
    out = subprocess.run([*cmd, "status"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0  # the real course's lessons, none copied yet into this empty folder
    assert "not copied yet" in out.stdout
    ws = workspace.Workspace(root, course_dir)
    ws.sync()
    assert [c.action for c in ws.status()] == ["as the course"]
    v2 = lesson(*[(c.id, c.cell_type, c.source) for c in COURSE_V1.cells], ("new", "markdown", "new"))
    save(v2, course_dir / "01_lesson.ipynb")
    assert "run sync" in str(ws.status()[0])


def test_a_cell_without_an_id_is_refused_with_what_to_do():
    old = json.loads(json.dumps(COURSE_V1))
    del old["cells"][1]["id"]
    with pytest.raises(workspace.LessonError, match="no id"):
        workspace.merge(old, COURSE_V1, COURSE_V1)
