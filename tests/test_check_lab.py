"""tools/check_lab.py in JupyterLab and Chromium: a notebook executed here, opened as a learner opens it, fails
on Markdown that math rendering garbles, on an error output and on stray stderr, and passes what is fine."""

from __future__ import annotations

import shutil
import sys
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

TOOLS = Path(__file__).resolve().parent.parent / "tools"
REPO = TOOLS.parent
VERDICT = "B meets the hour at $3,945 a day on demand; at $2.00 a worker-hour the answer changes."
CELLS = [
    new_markdown_cell("Math stays math: $2\\frac{N-1}{N}$ and $1003 = 7 \\cdot 143 + 2$; a worker-hour at \\$2.00."),
    new_code_cell(f"from IPython.display import Markdown, display\ndisplay(Markdown({VERDICT!r}))"),
    new_code_cell(f"from utils import prose\ndisplay(prose.markdown({VERDICT!r}))"),
    # a backslash is not enough in JupyterLab 4 (jupyterlab/jupyterlab#8645)
    new_code_cell(f"display(Markdown({VERDICT.replace('$', chr(92) + '$')!r}))"),
    new_code_cell("import sys\nprint('a library says something', file=sys.stderr)"),
    new_code_cell("{}['missing']"),
    new_code_cell("print('fine')"),
    # one check's line twice: the learner cannot tell which case each line is about
    new_code_cell("from utils import checks\nchecks.report('rate', 2, 2)\nchecks.report('rate', 2, 2)"),
    new_code_cell("checks.report('rate at step 50', 2, 2)\nchecks.report('rate at step 100', 2, 2)"),
]


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    if not any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no Chromium here (sudo apt-get install -y chromium)")
    sys.path.insert(0, str(TOOLS))
    import check_lab

    root = tmp_path_factory.mktemp("lab")
    nb = new_notebook(cells=CELLS)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute(cwd=str(REPO))
    nbformat.write(nb, root / "lesson.ipynb")
    problems, outside = check_lab.check({"lesson.ipynb": root / "lesson.ipynb"}, root=root, out=root / "out")
    by_cell = defaultdict(list)
    for problem in problems:
        by_cell[problem.cell].append(problem)
    return by_cell, outside, root / "out"


def test_amounts_typeset_as_math_fail_and_escaped_ones_pass(checked):
    problems, outside, _ = checked
    garbled = problems[1][0].what
    assert garbled.startswith("$3,945 in a Markdown output is typeset as a formula by MathJax")
    assert "adayondemand" in garbled  # the words MathJax ran together
    assert 0 not in problems and 2 not in problems  # real math, and utils.prose's amounts shown as "$3,945"
    backslashed = [p.what for p in problems[3]]
    assert backslashed[0].startswith("words in a Markdown output are typeset as a formula by MathJax")
    assert "the escaped amount \\$3,945 does not show as $3,945" in backslashed
    assert outside == []


def test_error_outputs_and_stderr_fail_and_each_failing_cell_has_a_screenshot(checked):
    problems, _, out = checked
    assert [p.what for p in problems[5]] == ["an error output: KeyError: 'missing'"]
    assert "'a library says something'" in problems[4][0].what
    assert sorted(problems) == [1, 3, 4, 5, 7]
    shots = sorted(p.name for p in out.glob("*.png"))
    assert shots == [f"lesson.cell{i:03d}.png" for i in (2, 4, 5, 6, 8)]
    assert all(p.screenshot.stat().st_size > 1000 for cell in problems.values() for p in cell)


def test_an_exercise_check_that_prints_the_same_line_twice_fails(checked):
    problems, _, _ = checked
    assert [p.what for p in problems[7]] == [
        "an exercise check prints the same line 2 times ('[rate] correct: 2'): a learner cannot tell the cases "
        "apart; give each its own label"
    ]
    assert 8 not in problems  # two checks with labels of their own
