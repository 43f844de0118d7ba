"""Execute lesson notebooks and record their wall time in data/notebook_durations.csv.

    make durations                                        # every notebook, full and smoke mode
    python tools/time_notebooks.py --mode full            # every notebook, full mode
    python tools/time_notebooks.py --mode smoke 00_start_here.ipynb
    python tools/time_notebooks.py --mode full --save /tmp/executed   # also keep the outputs to read

The file records with each time the machine (CPU model, usable cores) and the TensorFlow version, so that
00_start_here can show the durations together with the hardware that produced them; a hash of the
notebook's code cells, so that the course map marks a time measured on an earlier version of a lesson;
and the peak memory of the notebook's processes (its kernel and every worker the kernel starts, their
proportional set sizes summed), sampled twice a second.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat
import psutil
from nbclient import NotebookClient

from utils import course, envinfo


def _memory_of(proc: psutil.Process) -> int:
    """A process's share of memory: PSS where the system reports it (Linux: shared pages, such as
    TensorFlow's libraries in every worker, are divided among the processes that share them), else RSS."""
    try:
        return proc.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):
        return proc.memory_info().rss


class PeakMemory:
    """Sample the memory of this process's descendants (kernel and workers) until stopped."""

    def __init__(self, every: float = 0.5):
        self.peak, self.every, self._stop = 0, every, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for proc in me.children(recursive=True):
                try:
                    total += _memory_of(proc)
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(self.every)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


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
        with PeakMemory() as memory:
            NotebookClient(
                nb,
                timeout=args.cell_timeout,
                kernel_name="python3",
                resources={"metadata": {"path": str(course.NOTEBOOKS)}},
            ).execute()
        seconds = time.perf_counter() - start
        print(f"{name} ({args.mode}): {seconds:.0f} s, peak memory {memory.peak / 2**20:,.0f} MiB", flush=True)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, args.save / f"{path.stem}.{args.mode}.ipynb")
        course.record_duration(
            {
                "notebook": name,
                "mode": args.mode,
                "seconds": f"{seconds:.1f}",
                "peak_memory_mib": f"{memory.peak / 2**20:.0f}",
                "cpu_model": cpu.model,
                "usable_cores": str(cpu.usable_cores),
                "date": dt.date.today().isoformat(),
                "tensorflow": envinfo.versions()["TensorFlow"] or "",
                "code_hash": course.code_hash(path),
            }
        )


if __name__ == "__main__":
    main()
