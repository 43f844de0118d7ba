"""Outputs never reach git: tools/git_filter.sh makes nbstripout the clone's filter for notebooks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tools" / "git_filter.sh"
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _install(repo: Path) -> str:
    done = subprocess.run(["bash", str(SCRIPT), str(repo), sys.executable], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _executed_notebook() -> nbformat.NotebookNode:
    """A notebook as a learner's session leaves it: outputs, execution counts, the cell ids JupyterLab gave."""
    cell = nbformat.v4.new_code_cell("print(6 * 7)", id="1a2b3c4d", execution_count=3)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A lesson", id="0f0f0f0f"), cell])
    nb.metadata.kernelspec = {"display_name": "Python 3", "language": "python", "name": "python3"}
    return nb


def test_a_notebook_with_outputs_is_staged_without_them_and_does_not_show_as_modified(tmp_path):
    _git(tmp_path, "init", "-q")
    assert "git filter: notebooks are committed without outputs" in _install(tmp_path)
    nb = _executed_notebook()
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    _git(tmp_path, "add", "lesson.ipynb")
    staged = nbformat.reads(_git(tmp_path, "show", ":lesson.ipynb"), as_version=4)
    code = staged.cells[1]
    assert code.outputs == [] and code.execution_count is None
    assert [c.id for c in staged.cells] == ["0f0f0f0f", "1a2b3c4d"], "cell ids must be kept (--keep-id)"
    assert code.source == "print(6 * 7)"
    # The working copy keeps its outputs, and git sees no change in it: nothing to commit, nothing to pull over.
    assert nbformat.read(tmp_path / "lesson.ipynb", as_version=4).cells[1].outputs
    assert _git(tmp_path, "status", "--porcelain") == "A  lesson.ipynb\n"


def test_installing_twice_changes_nothing(tmp_path):
    _git(tmp_path, "init", "-q")
    _install(tmp_path)
    config, attributes = _git(tmp_path, "config", "--local", "--list"), (tmp_path / ".git/info/attributes").read_text()
    _install(tmp_path)
    assert _git(tmp_path, "config", "--local", "--list") == config
    assert (tmp_path / ".git/info/attributes").read_text() == attributes
    clean = _git(tmp_path, "config", "filter.nbstripout.clean").strip()
    assert clean.endswith("-m nbstripout --keep-id") and clean.count("--keep-id") == 1
    assert attributes.count("*.ipynb filter=nbstripout") == 1


def test_outside_a_git_work_tree_nothing_is_installed(tmp_path):
    assert "not the top of a git work tree" in _install(tmp_path)
    assert not (tmp_path / ".git").exists()


@pytest.fixture(scope="module")
def stripped() -> dict[str, bytes]:
    """Every lesson as the filter stores it: nbstripout reads, strips and writes each one in nbformat's layout, as
    it does for `git add` (its --textconv mode, one process for all of them, writes them one after the other), with
    the repository's own nbstripout settings (run from it)."""
    done = subprocess.run(
        [sys.executable, "-m", "nbstripout", "--keep-id", "--textconv", *map(str, NOTEBOOKS)],
        capture_output=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    texts = re.findall(rb"(?ms)^\{\n.*?^\}\n", done.stdout)  # each notebook: from "{" to "}" at the line's start
    assert b"".join(texts) == done.stdout and len(texts) == len(NOTEBOOKS), "nbstripout's output did not split"
    return {path.name: text for path, text in zip(NOTEBOOKS, texts, strict=True)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_filter_leaves_a_stored_lesson_unchanged(path: Path, stripped: dict[str, bytes]):
    """What git stores through the filter is the file itself, byte for byte: a fresh checkout is not 'modified' once
    the filter is installed, and JupyterLab (which writes what nbformat writes) saves the same bytes."""
    assert stripped[path.name] == path.read_bytes(), (
        f"{path.name} differs from what the git filter stores (outputs, or not in nbformat's layout): rewrite it with "
        f"`.venv/bin/python -m nbstripout --keep-id --textconv notebooks/{path.name} > stripped.ipynb && "
        f"mv stripped.ipynb notebooks/{path.name}` (`make format` rewrites only notebooks that had something to strip)"
    )
