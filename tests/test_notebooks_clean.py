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
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "describe()" in code, f"{path.name} must print its run mode (utils.mode.describe())"
    assert "pip install" not in code, f"{path.name} must not pip install: pins live in requirements.txt"


def test_readme_lists_every_notebook():
    readme = (REPO / "README.md").read_text()
    for path in NOTEBOOKS:
        assert path.name in readme, f"README.md's course map does not list {path.name}"
