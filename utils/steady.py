"""Figures that hold still: a verdict-bearing figure measured over alternated rounds, the share of the machine
that other programs took meanwhile, and the recorded figure of a quiet machine to fall back on.

On a machine of two cores, a second busy program changes a scaling efficiency by a third: no averaging removes
that, because it is not noise but a different machine. So each figure is measured while `CpuWatch` counts the
CPU time of every process outside this one's tree (and the time the hypervisor gave to other machines), and
`Steady.value` is the median of the rounds only where the rounds agree and the machine was quiet enough;
otherwise it is the figure recorded on a quiet machine (`data/reference_figures.csv`, with its source), and the
lesson says so.

    with steady.CpuWatch() as watch:
        values = [measure() for _ in range(steady.rounds(3))]  # one in smoke mode
    fig = steady.Steady("04 scaling efficiency", values, watch.result, tolerance=0.10)
    print(fig.sentence("scaling efficiency at 2 ranks"))
    use = fig.value

Recording a reference: `tools/time_notebooks.py --record-references` executes lessons with
COURSE_RECORD_REFERENCES=1; each `Steady` that is trusted then writes its row. `rounds()` says how many rounds a
lesson measures: a smoke run measures one (its verdict uses the recorded figure), unless it records or tries them.
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from utils import envinfo, mode, paths

REFERENCES = paths.DATA / "reference_figures.csv"
FIELDS = [
    "figure",
    "mode",
    "value",
    "low",
    "high",
    "rounds",
    "others_share",
    "cpu_model",
    "usable_cores",
    "date",
    "source",
]
#: Above this share of the machine taken by other programs, a measurement is not trusted for a verdict.
MAX_OTHERS = 0.15
RECORD_ENV = "COURSE_RECORD_REFERENCES"
#: Set to 1 for a smoke run that measures every round of a verdict-bearing figure, as a full run does.
ALL_ROUNDS_ENV = "COURSE_ALL_ROUNDS"


def rounds(full: int = 3) -> int:
    """How many alternated rounds a verdict-bearing measurement takes: `full`, except in a smoke run, which measures
    one (one round cannot show its spread, so the verdict uses the recorded figure where there is one). A smoke run
    that records the references (COURSE_RECORD_REFERENCES=1) or tries their steadiness (COURSE_ALL_ROUNDS=1, set
    by tools/steadiness_trial.py) measures `full` rounds too."""
    if not mode.is_smoke() or os.environ.get(RECORD_ENV) == "1" or os.environ.get(ALL_ROUNDS_ENV) == "1":
        return full
    return 1


@dataclass(frozen=True)
class Contention:
    """How much of this machine other programs took during a measurement."""

    seconds: float  # wall-clock time watched
    cores: int  # cores usable by this process
    others_cpu_seconds: float  # CPU time of processes outside this process's tree
    steal_seconds: float  # CPU time the hypervisor gave to other machines (0 on bare metal)
    busiest: tuple[tuple[str, int, float], ...] = ()  # (name, pid, CPU seconds) of the busiest other processes

    @property
    def share(self) -> float:
        """The share of this machine's cores (0 to 1) that was not available to the measurement."""
        if self.seconds <= 0:
            return 0.0
        return min(1.0, (self.others_cpu_seconds + self.steal_seconds) / (self.seconds * self.cores))

    def line(self) -> str:
        busiest = [f"{name} (PID {pid}, {cpu:.0f} s)" for name, pid, cpu in self.busiest if cpu >= 0.05 * self.seconds]
        return (
            f"other programs took {self.share:.0%} of this machine's {self.cores} cores during the "
            f"{self.seconds:.0f} s of measurement" + (f", most of it {', '.join(busiest[:2])}" if busiest else "")
        )


def _key(proc: psutil.Process) -> tuple[int, float]:
    return proc.pid, proc.info["create_time"] or 0.0


class CpuWatch:
    """Count, twice a second, the CPU time used by every process that is not this one, one of its descendants
    or one of the programs that run it (the notebook server or executor: its own bookkeeping is part of the
    run); a process seen only between two samples is missed; a long-running busy program is what matters."""

    def __init__(self, every: float = 0.5):
        self.every = every
        self.result: Contention | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._last: dict[tuple[int, float], float] = {}
        self._others = 0.0
        self.by_process: dict[tuple[int, float], float] = {}  # CPU seconds of each other process, by (PID, start)
        self._names: dict[tuple[int, float], str] = {}

    def _sample(self) -> None:
        procs = [p for p in psutil.process_iter(["create_time", "cpu_times", "name", "ppid"]) if p.info["cpu_times"]]
        children: dict[int, list[int]] = {}
        for p in procs:
            children.setdefault(p.info["ppid"], []).append(p.pid)
        parent = {p.pid: p.info["ppid"] for p in procs}
        mine, up = set(), parent.get(os.getpid())
        while up and up not in mine:  # the programs that run this one (JupyterLab, the lesson executor)
            mine.add(up)
            up = parent.get(up)
        todo = [os.getpid()]  # this process and its descendants, from the same snapshot
        while todo:
            pid = todo.pop()
            if pid not in mine:
                mine.add(pid)
                todo.extend(children.get(pid, []))
        seen = {}
        for proc in procs:
            if proc.pid in mine:
                continue
            times = proc.info["cpu_times"]
            key = _key(proc)
            seen[key] = times.user + times.system
            if key in self._last:
                delta = max(0.0, seen[key] - self._last[key])
                self._others += delta
                self.by_process[key] = self.by_process.get(key, 0.0) + delta
                self._names[key] = proc.info["name"] or "?"
        self._last = seen

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> CpuWatch:
        self._start = time.perf_counter()
        self._steal0 = getattr(psutil.cpu_times(), "steal", 0.0)
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.result = Contention(
            seconds=time.perf_counter() - self._start,
            cores=envinfo.cpu_info().usable_cores,
            others_cpu_seconds=self._others,
            steal_seconds=max(0.0, getattr(psutil.cpu_times(), "steal", 0.0) - self._steal0),
            busiest=tuple(
                (self._names[k], k[0], cpu) for k, cpu in sorted(self.by_process.items(), key=lambda kv: -kv[1])[:3]
            ),
        )


@dataclass(frozen=True)
class Reference:
    """A figure recorded on a quiet machine, with where it came from."""

    value: float
    low: float
    high: float
    rounds: int
    cpu_model: str
    usable_cores: int
    date: str
    source: str

    def label(self) -> str:
        return (
            f"{self.value:.2f} (rounds {self.low:.2f} to {self.high:.2f}), recorded on {self.cpu_model} with "
            f"{self.usable_cores} cores on {self.date}: {self.source}"
        )


def reference(figure: str, mode_name: str | None = None, path: Path = REFERENCES) -> Reference | None:
    """The recorded reference of `figure` in this mode (smoke or full), or None if none was recorded."""
    mode_name = mode_name or ("smoke" if mode.is_smoke() else "full")
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["figure"] == figure and row["mode"] == mode_name:
                return Reference(
                    float(row["value"]),
                    float(row["low"]),
                    float(row["high"]),
                    int(row["rounds"]),
                    row["cpu_model"],
                    int(row["usable_cores"]),
                    row["date"],
                    row["source"],
                )
    return None


def record(figure: str, fig: Steady, source: str, path: Path = REFERENCES) -> None:
    """Write (or replace) the reference row of `figure` in this mode from a trusted measurement."""
    if not fig.trusted:
        raise ValueError(f"{figure}: not recorded, the measurement is not trusted ({fig.why_not()})")
    mode_name = "smoke" if mode.is_smoke() else "full"
    rows = []
    if path.is_file():
        with path.open(newline="") as f:
            rows = [r for r in csv.DictReader(f) if (r["figure"], r["mode"]) != (figure, mode_name)]
    cpu = envinfo.cpu_info()
    rows.append(
        {
            "figure": figure,
            "mode": mode_name,
            "value": f"{fig.measured:.4f}",
            "low": f"{min(fig.values):.4f}",
            "high": f"{max(fig.values):.4f}",
            "rounds": len(fig.values),
            "others_share": f"{fig.contention.share:.3f}",
            "cpu_model": cpu.model,
            "usable_cores": cpu.usable_cores,
            "date": dt.date.today().isoformat(),
            "source": source,
        }
    )
    rows.sort(key=lambda r: (r["figure"], r["mode"]))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


@dataclass
class Steady:
    """A figure measured over alternated rounds; its value for a verdict, and a sentence that says which it is.

    Trusted when at least two rounds agree within `tolerance` (largest minus smallest) and other programs took at
    most MAX_OTHERS of the machine; then `value` is the median of the rounds. Otherwise `value` is the reference
    recorded on a quiet machine where there is one (labelled in `sentence`), else still the median, flagged."""

    figure: str
    values: Sequence[float]
    contention: Contention
    tolerance: float
    ref: Reference | None = field(default=None)

    def __post_init__(self) -> None:
        self.values = [float(v) for v in self.values]
        if not self.values:
            raise ValueError(f"{self.figure}: no rounds were measured")
        if self.ref is None:
            self.ref = reference(self.figure)
        if self.trusted and os.environ.get(RECORD_ENV) == "1":
            record(self.figure, self, os.environ.get("COURSE_RECORD_SOURCE", "the lesson's own measurement"))

    @property
    def measured(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        return max(self.values) - min(self.values)

    @property
    def trusted(self) -> bool:
        return len(self.values) >= 2 and self.spread <= self.tolerance and self.contention.share <= MAX_OTHERS

    def why_not(self) -> str:
        reasons = []
        if len(self.values) < 2:
            reasons.append("one round cannot show its own spread")
        elif self.spread > self.tolerance:
            reasons.append(
                f"the rounds differ by {self.spread:.2f}, more than the {self.tolerance:.2f} that matters here"
            )
        if self.contention.share > MAX_OTHERS:
            reasons.append(f"{self.contention.line()} (more than {MAX_OTHERS:.0%})")
        return "; ".join(reasons)

    @property
    def uses_reference(self) -> bool:
        return not self.trusted and self.ref is not None

    @property
    def value(self) -> float:
        return self.ref.value if self.uses_reference else self.measured

    def sentence(self, what: str, fmt: str = "{:.2f}", perfect: float | None = None) -> str:
        """One generated line: the measured median and spread, and which figure the verdict uses and why; where
        the median is above `perfect` (1 for a scaling efficiency), why that is no gain."""
        f = fmt.format
        return self._sentence(what, f) + (
            f" A measured value above {f(perfect)} (perfect scaling) is not a gain: the baseline runs were slowed "
            "more than the others (by other programs or the CPU's clock)."
            if perfect is not None and self.measured > perfect
            else ""
        )

    def _sentence(self, what: str, f) -> str:
        rounds = ", ".join(f(v) for v in self.values)
        measured = f"median of {len(self.values)} alternated rounds ({rounds})" if len(self.values) > 1 else "one round"
        head = f"{what}: {f(self.measured)}, {measured}; {self.contention.line()}"
        if self.trusted:
            return f"{head}. The rounds agree and the machine was quiet enough: the verdict uses {f(self.measured)}."
        if self.ref is not None:
            return (
                f"{head}. Not steady enough for a verdict ({self.why_not()}): the verdict uses the figure recorded "
                f"on a quiet machine, {self.ref.label()}."
            )
        return f"{head}. Not steady enough for a verdict ({self.why_not()}), and no quiet-machine figure is recorded."
