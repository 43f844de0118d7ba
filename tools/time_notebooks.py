"""Execute lesson notebooks and record their wall time in data/notebook_durations.csv.

    make durations                                        # every notebook, full and smoke mode
    python tools/time_notebooks.py --mode full            # every notebook, full mode
    python tools/time_notebooks.py --mode smoke 00_start_here.ipynb
    python tools/time_notebooks.py --mode full --save build/timed   # also keep the outputs to read
    python tools/time_notebooks.py --recount build/timed   # after editing only Markdown: recount from those copies
    python tools/time_notebooks.py --mode smoke --out /tmp/d.csv 00_start_here.ipynb   # record elsewhere
    python tools/time_notebooks.py --jupyterlab        # only measure a JupyterLab server's memory
    python tools/time_notebooks.py --mode smoke --record-references 04_horovod.ipynb   # on a quiet machine

The file records with each time the machine (CPU model, usable cores) and the TensorFlow version, so that
00_start_here can show the durations together with the hardware that produced them; a hash of the
notebook's code cells, so that the course map marks a time measured on an earlier version of a lesson;
the peak memory of the notebook's processes (its kernel and every worker the kernel starts, their
proportional set sizes summed), sampled twice a second; and the run time of the lesson's core path (its
code cells outside the sections marked "(deep dive)" and the exercises, from the cells' own timings) with the words
a learner reads on it (text, code and outputs).

With --recount FOLDER it runs nothing: for each lesson whose code is the same as in its full-mode copy saved in
FOLDER (by --save), it counts the core path's run time and words again, from that copy's outputs and cell timings
and the lesson's Markdown as it is now, and updates the lesson's full-mode row. That is for a lesson whose text
changed since it was timed, a section marked as a deep dive for instance; a lesson whose code changed must be
timed again.

With --jupyterlab it also starts a headless JupyterLab server of this environment, waits until it serves
the JupyterLab page, and records the memory (RSS) of its processes in data/jupyterlab_memory.csv: with the
lessons' peak, that is the memory the course needs (utils.course.memory_need).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat
import psutil

from utils import course, envinfo, execution, launch, rank_imports


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


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def jupyterlab_rss(settle: float = 5.0, timeout: float = 120.0) -> float:
    """Start a headless JupyterLab server of this environment, load its page, and return its RSS in MiB."""
    port, token = launch.free_ports(1)[0], secrets.token_hex(16)
    env = launch.worker_env(threads=1, extra={rank_imports.VAR: "0"})  # a server and its kernels, not ranks
    run_id = env[launch.RUN_MARKER]
    with tempfile.TemporaryDirectory() as root:
        command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1"]
        command += [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
        command += ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        server = psutil.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + timeout
            while True:
                try:
                    for page in ("/api/status", "/lab"):
                        urllib.request.urlopen(f"{base}{page}?token={token}", timeout=10).read()
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"JupyterLab did not answer on port {port} within {timeout:.0f} s") from None
                    time.sleep(1)
            time.sleep(settle)
            return _tree_rss(server) / 2**20
        finally:
            launch.kill_run(run_id, [server])


def measure_jupyterlab(path: Path) -> None:
    """Measure a JupyterLab server's memory and record it with its date in `path`."""
    rss = jupyterlab_rss()
    print(f"JupyterLab server (headless, page loaded): RSS {rss:,.0f} MiB", flush=True)
    course.record_jupyterlab_memory(
        {
            "rss_mib": f"{rss:.0f}",
            "jupyterlab": envinfo.package_version("jupyterlab") or "",
            "python": envinfo.versions()["Python"],
            "cpu_model": envinfo.cpu_info().model,
            "date": dt.date.today().isoformat(),
            "how": "jupyter lab --no-browser, /lab page loaded, RSS of the server and its children after 5 s",
        },
        path,
    )


def with_outputs_of(current: dict, executed: dict) -> dict:
    """`current` (a lesson as it is now) with the outputs and timings of `executed` (a saved run of the same code),
    its code cells matched in order."""
    merged = copy.deepcopy(current)
    ran = [c for c in executed["cells"] if c["cell_type"] == "code"]
    mine = [c for c in merged["cells"] if c["cell_type"] == "code"]
    if ["".join(c["source"]) for c in ran] != ["".join(c["source"]) for c in mine]:
        raise ValueError("the lesson's code differs from the saved copy's")
    for cell, done in zip(mine, ran, strict=True):
        cell["outputs"] = done.get("outputs", [])
        cell.setdefault("metadata", {})["execution"] = done.get("metadata", {}).get("execution", {})
    return merged


def recount(folder: Path, names: list[str], out: Path) -> None:
    """Update each lesson's full-mode row with its core path's run time and words, counted from its copy saved in
    `folder` and its Markdown as it is now; a lesson without a copy, or whose code changed, is named and left."""
    rows = {r["notebook"]: r for r in course.read_durations(out) if r["mode"] == "full"}
    stale = []
    for name in names:
        saved = folder / f"{Path(name).stem}.full.ipynb"
        if name not in rows or not saved.exists():
            stale.append(f"{name}: no full-mode row or no saved copy ({saved})")
            continue
        current = json.loads((course.NOTEBOOKS / name).read_text())
        try:
            merged = with_outputs_of(current, json.loads(saved.read_text()))
        except ValueError as err:
            stale.append(f"{name}: {err}")
            continue
        if rows[name].get("code_hash") != course.code_hash(course.NOTEBOOKS / name):
            stale.append(f"{name}: its full-mode row was measured on other code than the saved copy's")
            continue
        row = dict(rows[name])
        before = row.get("reading_words", "")
        core = course.core_seconds(merged)
        row["core_seconds"] = "" if core is None else f"{core:.1f}"
        row["reading_words"] = str(course.reading_words(merged))
        course.record_duration(row, out)
        print(f"{name}: core path {row['core_seconds']} s, {row['reading_words']} words (were {before})")
    if stale:
        sys.exit("not recounted, time these again with --mode full --save:\n  " + "\n  ".join(stale))


def main() -> None:
    """Time each named notebook (default: all) in the given mode and record the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["full", "smoke"])
    parser.add_argument("--cell-timeout", type=int, default=1800)
    parser.add_argument("--save", type=Path, help="folder to write the executed notebooks to (outputs kept)")
    parser.add_argument("--out", type=Path, default=course.DURATIONS, help="durations file to record into")
    parser.add_argument("--jupyterlab", action="store_true", help="measure a JupyterLab server's memory")
    parser.add_argument("--jupyterlab-out", type=Path, default=course.JUPYTERLAB_MEMORY)
    parser.add_argument(
        "--record-references",
        action="store_true",
        help="also record each lesson's verdict-bearing figures in data/reference_figures.csv where they were "
        "steady (utils.steady): run it on a quiet machine",
    )
    parser.add_argument("notebooks", nargs="*", help="file names in notebooks/ (default: all)")
    parser.add_argument(
        "--recount",
        type=Path,
        metavar="FOLDER",
        help="recount the core path's run time and words from the full-mode copies saved in FOLDER, with the "
        "lessons' Markdown as it is now (no lesson runs)",
    )
    args = parser.parse_args()
    if args.recount:
        recount(args.recount, args.notebooks or [lesson.notebook for lesson in course.lessons()], args.out)
        return
    if args.jupyterlab:
        measure_jupyterlab(args.jupyterlab_out)
        if not args.mode:
            return
    if not args.mode:
        parser.error("--mode full or --mode smoke is needed to time notebooks")
    os.environ["COURSE_SMOKE"] = "1" if args.mode == "smoke" else "0"
    os.environ["COURSE_SOLUTIONS"] = "run"  # every solution cell runs and is checked, as in the tests
    names = args.notebooks or [lesson.notebook for lesson in course.lessons()]
    cpu = envinfo.cpu_info()
    for name in names:
        path = course.NOTEBOOKS / name
        if not path.exists():
            sys.exit(f"{path} does not exist; give a file name from notebooks/.")
        nb = nbformat.read(path, as_version=4)
        print(f"{name} ({args.mode}) ...", flush=True)
        if args.record_references:
            os.environ["COURSE_RECORD_REFERENCES"] = "1"
            os.environ["COURSE_RECORD_SOURCE"] = (
                f"{name} in {args.mode} mode, executed by `python tools/time_notebooks.py --mode {args.mode} "
                f"--record-references {name}`"
            )
        start = time.perf_counter()
        with PeakMemory() as memory:
            execution.recording_client()(  # each cell's first output and longest silence noted, as in make test
                nb,
                timeout=args.cell_timeout,
                kernel_name="python3",
                resources={"metadata": {"path": str(course.NOTEBOOKS)}},
                config=execution.kernel_config(),
            ).execute()
        seconds = time.perf_counter() - start
        print(f"{name} ({args.mode}): {seconds:.0f} s, peak memory {memory.peak / 2**20:,.0f} MiB", flush=True)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, args.save / f"{path.stem}.{args.mode}.ipynb")
        core = course.core_seconds(nb)
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
                "core_seconds": "" if core is None else f"{core:.1f}",
                "reading_words": str(course.reading_words(nb)),  # text, code and outputs of the core path
            },
            args.out,
        )


if __name__ == "__main__":
    main()
