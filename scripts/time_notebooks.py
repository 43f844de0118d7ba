"""Execute lesson notebooks and record their wall time in data/notebook_durations.csv.

    python scripts/time_notebooks.py --mode full            # every notebook, full mode
    python scripts/time_notebooks.py --mode smoke 00_start_here.ipynb
    python scripts/time_notebooks.py --mode full --save /tmp/executed   # also keep the outputs to read

The file records the machine (CPU model, usable cores) and the TensorFlow version with each time,
so that 00_start_here can show the durations together with the hardware that produced them.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from utils import course, envinfo  # noqa: E402


def main() -> None:
    """Time each named notebook (default: all) in the given mode and record the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["full", "smoke"], required=True)
    parser.add_argument("--cell-timeout", type=int, default=1800)
    parser.add_argument("--save", type=Path, help="folder to write the executed notebooks to (outputs kept)")
    parser.add_argument("notebooks", nargs="*", help="file names in notebooks/ (default: all)")
    args = parser.parse_args()
    os.environ["COURSE_SMOKE"] = "1" if args.mode == "smoke" else "0"
    names = args.notebooks or [lesson.notebook for lesson in course.lessons()]
    cpu = envinfo.cpu_info()
    for name in names:
        path = course.NOTEBOOKS / name
        if not path.exists():
            sys.exit(f"{path} does not exist; give a file name from notebooks/.")
        nb = nbformat.read(path, as_version=4)
        print(f"{name} ({args.mode}) ...", flush=True)
        start = time.perf_counter()
        NotebookClient(nb, timeout=args.cell_timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(course.NOTEBOOKS)}}).execute()
        seconds = time.perf_counter() - start
        print(f"{name} ({args.mode}): {seconds:.0f} s", flush=True)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, args.save / f"{path.stem}.{args.mode}.ipynb")
        course.record_duration({
            "notebook": name, "mode": args.mode, "seconds": f"{seconds:.1f}",
            "cpu_model": cpu.model, "usable_cores": str(cpu.usable_cores),
            "date": dt.date.today().isoformat(),
            "tensorflow": envinfo.versions()["TensorFlow"] or "",
        })


if __name__ == "__main__":
    main()
