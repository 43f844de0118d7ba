"""The `%%solution` cell magic: an exercise's solution runs only when the learner asks for it (or CI does)."""

from __future__ import annotations

import ast
import os
from typing import Any

#: The environment variable that makes every solution run (the notebook tests, the website build and the
#: timing tool set it to "run", so that every solution is still executed and checked).
ENV = "COURSE_SOLUTIONS"
_VALUES = ("run", "off")

#: What a solution cell prints when it did not run (one line).
NOT_RUN = (
    'Solution not run, so the exercise stays yours. Read it: click "•••" above. Run it: L.solutions(), then this cell.'
)

_requested = False


def from_environment() -> bool:
    """True when COURSE_SOLUTIONS=run; False when it is unset, empty or "off"; a clear error otherwise."""
    value = os.environ.get(ENV, "").strip().lower()
    if value not in ("", *_VALUES):
        raise ValueError(
            f"{ENV}={os.environ[ENV]!r} is not understood: set it to 'run' (every solution cell runs, as in the "
            f"tests) or 'off' (solutions wait until L.solutions() is called), or unset it."
        )
    return value == "run"


def request(run: bool = True) -> str:
    """Let solution cells run from now on in this kernel (run=False: stop them again); returns a line to show."""
    global _requested
    _requested = bool(run)
    if _requested:
        return "Solutions will run from now on: run a solution cell again to see its answer."
    return "Solutions will not run from now on (unless COURSE_SOLUTIONS=run is set)."


def wanted() -> bool:
    """Whether a solution cell runs now: the learner asked for it, or the environment says so."""
    return from_environment() or _requested


def run_source(source: str, namespace: dict[str, Any], filename: str = "<solution>") -> Any:
    """Execute a cell's source in `namespace` and return the value of its last line if that is an expression."""
    tree = ast.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), filename, "eval"), namespace)


def solution(line: str, cell: str) -> Any:
    """%%solution: print one line saying how to read and run the solution, or run the cell when asked."""
    if line.strip():
        raise ValueError(f"%%solution takes no arguments (got {line.strip()!r}); to run solutions call L.solutions()")
    if not wanted():
        print(NOT_RUN)
        return None
    from IPython import get_ipython

    shell = get_ipython()
    # IPython's own transformation (so !commands and %magics work) and its cache (so tracebacks show the lines).
    code = shell.transform_cell(cell)
    filename = shell.compile.cache(code, shell.execution_count, raw_code=cell)
    value = run_source(code, shell.user_ns, filename=filename)
    if cell.rstrip().endswith(";"):  # a trailing semicolon hides the value, as in any cell
        return None
    return value


def register(shell: Any) -> None:
    """Register %%solution with an IPython shell (idempotent)."""
    shell.register_magic_function(solution, magic_kind="cell", magic_name="solution")
