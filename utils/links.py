"""Which network rate a decision uses: AWS's sustained (baseline) rate, or its "up to" burst labelled as such.

AWS publishes small GPU instances' bandwidth as "up to" a figure: a burst paid for with network I/O credits, which
a transfer that runs for an hour spends in minutes, after which the instance falls back to its baseline. A job that
allreduces every step is such a transfer, so every lesson that sizes a cluster from an instance's network rate
takes it from :func:`decision_rate`: the baseline where AWS gives one, the one published figure where AWS gives no
burst, and the burst only where no baseline is known (then ``kind == "burst"`` says so in every label).
The rates and their sources are in ``data/network_rates.csv`` (one row per instance type the course uses).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from utils import paths

#: The one data file every network-rate decision reads.
RATES_CSV = paths.DATA / "network_rates.csv"


@dataclass(frozen=True)
class Rate:
    """A network rate of one instance type and what kind of rate it is."""

    instance: str  #: EC2 type without SageMaker's "ml." prefix
    gbps: float  #: the rate, Gbit/s
    kind: str  #: "sustained" (AWS gives one figure), "baseline" (below an "up to" burst), "burst" (the "up to" figure)
    published_gbps: float  #: AWS's headline figure ("up to" for burst types)
    source: str  #: where the figures are published

    @property
    def bytes_per_s(self) -> float:
        """The rate in bytes per second."""
        return self.gbps * 1e9 / 8

    @property
    def label(self) -> str:
        """Short label for a table row or a plot legend, naming the kind of rate."""
        if self.kind == "baseline":
            return f"{self.instance}, {self.gbps:g} Gb/s baseline (bursts to {self.published_gbps:g})"
        if self.kind == "burst":
            return f"{self.instance}, {self.gbps:g} Gb/s burst (not sustained)"
        return f"{self.instance}, {self.gbps:g} Gb/s"


def _key(instance: str) -> str:
    return instance.removeprefix("ml.")


@lru_cache(maxsize=1)
def _table() -> pd.DataFrame:
    return pd.read_csv(RATES_CSV).set_index("instance")


def rates() -> pd.DataFrame:
    """The data file as a table, with the rate a decision uses (`decision_gbps`) and its kind added."""
    table = _table().copy()
    table["decision_gbps"] = [decision_rate(i).gbps for i in table.index]
    table["kind"] = [decision_rate(i).kind for i in table.index]
    return table


def _row(instance: str) -> pd.Series:
    table = _table()
    key = _key(instance)
    if key not in table.index:
        raise KeyError(
            f"no network rate for {instance!r} in {RATES_CSV.name}: add a row with its source "
            f"(known: {', '.join(table.index)})"
        )
    return table.loc[key]


def decision_rate(instance: str) -> Rate:
    """The rate a sustained transfer (a training job's allreduces) gets on `instance` ("ml." prefix allowed)."""
    row = _row(instance)
    published = float(row.published_gbps)
    if row.published_as == "up to":
        if pd.notna(row.baseline_gbps):
            return Rate(_key(instance), float(row.baseline_gbps), "baseline", published, row.source)
        return Rate(_key(instance), published, "burst", published, row.source)
    return Rate(_key(instance), published, "sustained", published, row.source)


def burst_rate(instance: str) -> Rate | None:
    """The "up to" burst of `instance` as its own labelled rate, or None if AWS publishes no burst for it."""
    row = _row(instance)
    if row.published_as != "up to":
        return None
    return Rate(_key(instance), float(row.published_gbps), "burst", float(row.published_gbps), row.source)


def rates_for(instances, with_burst: bool = True) -> list[Rate]:
    """Decision rates of `instances`, each followed by its burst (labelled) when `with_burst` and AWS gives one."""
    out = []
    for instance in instances:
        out.append(decision_rate(instance))
        burst = burst_rate(instance) if with_burst else None
        if burst is not None and burst.gbps != out[-1].gbps:
            out.append(burst)
    return out
