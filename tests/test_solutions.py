"""The %%solution cell magic: not run on "Run All" unless asked for; run, displayed and failing like any cell when it is."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from utils import solutions
from utils.paths import NOTEBOOKS

# What lesson.start() does for solutions, without its machine report (which imports TensorFlow).
FIRST_CELL = 'from utils import lesson\nlesson._register_magics()\nL = lesson.Lesson("00_start_here.ipynb")'


def _execute(cells: list[str], monkeypatch, env: str | None) -> nbformat.NotebookNode:
    """Execute code cells in a real kernel (as nbmake and the site build do) with COURSE_SOLUTIONS=env."""
    if env is None:
        monkeypatch.delenv(solutions.ENV, raising=False)
    else:
        monkeypatch.setenv(solutions.ENV, env)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def _text(cell) -> str:
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "execute_result":
            parts.append(out.data["text/plain"] + "\n")
    return "".join(parts)


def test_not_run_without_a_request_and_run_in_the_namespace_after_L_solutions(monkeypatch):
    solution = "%%solution\nanswer = 41\nanswer + 1"
    cells = [FIRST_CELL, solution, "print('answer' in globals())", "L.solutions()", solution, "print(answer)"]
    nb = _execute([*cells, "L.solutions(False)", "%%solution\nanswer = 0", "print(answer)"], monkeypatch, None)
    assert _text(nb.cells[1]) == solutions.NOT_RUN + "\n"
    assert "L.solutions()" in solutions.NOT_RUN and "\n" not in solutions.NOT_RUN
    assert _text(nb.cells[2]) == "False\n"
    assert _text(nb.cells[3]).startswith("Solutions will run from now on")
    assert _text(nb.cells[4]) == "42\n" and nb.cells[4].outputs[-1].output_type == "execute_result"
    assert _text(nb.cells[5]) == "41\n"
    assert _text(nb.cells[7]) == solutions.NOT_RUN + "\n" and _text(nb.cells[8]) == "41\n"


def test_with_COURSE_SOLUTIONS_run_a_failing_solution_fails_the_notebook(monkeypatch):
    ok = "%%solution\nimport math\nprint('printed')\nmath.sqrt(16)"
    nb = _execute([FIRST_CELL, ok], monkeypatch, "run")
    assert _text(nb.cells[1]) == "printed\n4.0\n"
    with pytest.raises(CellExecutionError, match="ZeroDivisionError"):
        _execute([FIRST_CELL, "%%solution\nshare = 1 / 0", "print('after')"], monkeypatch, "run")


def test_a_wrong_COURSE_SOLUTIONS_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(solutions.ENV, "yes")
    with pytest.raises(ValueError, match=r"COURSE_SOLUTIONS='yes' is not understood: set it to 'run'"):
        solutions.from_environment()
    for value, runs in (("run", True), ("RUN", True), ("off", False), ("", False)):
        monkeypatch.setenv(solutions.ENV, value)
        assert solutions.from_environment() is runs
    from utils import lesson

    monkeypatch.setenv(solutions.ENV, "1")
    with pytest.raises(ValueError, match="is not understood"):
        lesson.start("00_start_here.ipynb")  # in its first cell, before anything else runs


def test_the_body_is_run_as_ipython_runs_a_cell():
    """Magics and shell lines in a solution work, a trailing semicolon hides the value, arguments are refused."""
    from IPython.core.interactiveshell import InteractiveShell

    from utils import lesson

    shell = InteractiveShell.instance()
    lesson._register_magics()  # as lesson.start() does under IPython
    assert shell.find_cell_magic("solution") is solutions.solution
    solutions.request(True)
    try:
        result = shell.run_cell("%%solution\nfolder = %pwd\nlen(folder) > 0")
        assert result.success and result.result is True
        assert shell.run_cell("%%solution\n7 * 6;").result is None
        result = shell.run_cell("%%solution now\n1")
        assert isinstance(result.error_in_exec, ValueError) and "takes no arguments" in str(result.error_in_exec)
    finally:
        solutions.request(False)
