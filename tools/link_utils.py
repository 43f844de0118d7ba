"""Make the course's `utils` package importable from the current Python environment.

Writes a `.pth` file into the environment's site-packages: its first line names the course folder, so notebooks,
tests and worker scripts can `import utils` from any working directory; its second installs, in processes started
with COURSE_LEAN_RANKS=1 (the ranks the course's launcher starts), the import hook of utils/rank_imports.py. A second
`.pth` file installs, in every process unless COURSE_STARTUP_REFUSALS=0, the hook of utils/startup_imports.py (copied
beside it, and written before it).
"""

from __future__ import annotations

import os
import py_compile
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: A `.pth` line that starts with `import` is run at every interpreter start: this one costs a dictionary lookup,
#: and runs the hook's file only where the variable asks for it. It runs the file by its path, not as
#: `utils.rank_imports`: importing the package then would fix `utils` to the course's before the rank's script
#: runs, where a script's own `utils.py` beside it must win, as it does everywhere else.
LEAN_RANKS_LINE = (
    'import os; os.environ.get("COURSE_LEAN_RANKS") == "1" and __import__("runpy").run_path('
    f'{str(REPO / "utils" / "rank_imports.py")!r}, run_name="course_rank_imports")["install"]()'
)
#: The startup hook is a module of site-packages (its bytecode cached there) under a name of its own, imported by a
#: `.pth` file of its own: were the module gone, only that file's line would fail, not the ranks' hook.
STARTUP_MODULE = "distributed_training_course_startup"
STARTUP_LINE = (
    f'import os; os.environ.get("COURSE_STARTUP_REFUSALS") != "0" and __import__("{STARTUP_MODULE}").install()'
)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` in one step: a Python starting meanwhile reads the old file or the new one, never a part."""
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(text)
    os.replace(part, path)


def main() -> None:
    """Write `distributed_training_course.pth`, and the startup hook's module and `.pth` file, into this interpreter's
    site-packages."""
    site = Path(sysconfig.get_paths()["purelib"])
    if sys.prefix == sys.base_prefix and "CONDA_PREFIX" not in os.environ:
        sys.exit(
            "This Python is not a virtual or conda environment; refusing to change it.\n"
            "Activate the course environment first (make lab creates .venv), then run this again."
        )
    pth = site / "distributed_training_course.pth"
    write_atomically(pth, str(REPO) + "\n" + LEAN_RANKS_LINE + "\n")
    startup = site / f"{STARTUP_MODULE}.py"  # before the line that imports it
    write_atomically(startup, (REPO / "utils" / "startup_imports.py").read_text())
    py_compile.compile(str(startup), doraise=True)
    write_atomically(site / f"{STARTUP_MODULE}.pth", STARTUP_LINE + "\n")
    print(f"utils importable from {REPO} (via {pth}); jsonschema's startup trimmed (via {startup})")


if __name__ == "__main__":
    main()
