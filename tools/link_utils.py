"""Make the course's `utils` package importable from the current Python environment.

Writes a one-line `.pth` file into the environment's site-packages that names the course folder,
so notebooks, tests and worker scripts can `import utils` from any working directory.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    """Write `distributed_training_course.pth` into this interpreter's site-packages."""
    site = Path(sysconfig.get_paths()["purelib"])
    if sys.prefix == sys.base_prefix and "CONDA_PREFIX" not in __import__("os").environ:
        sys.exit(
            "This Python is not a virtual or conda environment; refusing to change it.\n"
            "Activate the course environment first (make lab creates .venv), then run this again."
        )
    pth = site / "distributed_training_course.pth"
    pth.write_text(str(REPO) + "\n")
    print(f"utils importable from {REPO} (via {pth})")


if __name__ == "__main__":
    main()
