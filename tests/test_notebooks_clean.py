"""Notebooks are stored without outputs and follow the lesson scaffold of the course."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
SECTIONS = ("Objectives", "Duration", "Prerequisites", "Summary", "Exercises")


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path: Path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path.name} cell {i} has outputs: clear them before committing"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_kernel_and_name(path: Path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), "notebooks are named NN_topic.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_scaffold(path: Path):
    nb = json.loads(path.read_text())
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert md.lstrip().startswith("# "), f"{path.name} must open with a title"
    headings = re.findall(r"^#{2,3}\s+(.+?)\s*$", md, re.M)
    for section in SECTIONS:
        assert any(h.startswith(section) for h in headings), f"{path.name} lacks a '## {section}' section"
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    code = "\n".join(cells)
    assert f'lesson.start("{path.name}"' in cells[0], (
        f'{path.name}\'s first code cell must call lesson.start("{path.name}", ...): it prints the mode, '
        "the measured run time and the machine"
    )
    assert "pip install" not in code, f"{path.name} must not pip install: pins live in requirements.txt"


#: "About 25 lines" at most per code cell: heavy code belongs in utils or in a script the lesson shows.
MAX_CELL_LINES = 30


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_cells_are_short(path: Path):
    nb = json.loads(path.read_text())
    long = [
        (i, n)
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and (n := len("".join(c["source"]).splitlines())) > MAX_CELL_LINES
    ]
    assert not long, (
        f"{path.name}: cells (index, lines) {long} are longer than {MAX_CELL_LINES} lines; split them "
        "or move their logic into utils"
    )


def test_no_notebook_imports_a_file_by_path():
    for path in NOTEBOOKS:
        code = "\n".join(
            "".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"
        )
        assert "spec_from_file_location" not in code and "sys.path" not in code, f"{path.name} imports a file by path"


def test_readme_lists_every_notebook():
    readme = (REPO / "README.md").read_text()
    for path in NOTEBOOKS:
        assert path.name in readme, f"README.md's course map does not list {path.name}"
