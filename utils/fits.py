"""Curve fits for trends and measurements: power laws, exponential doubling, time linear in size."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _positive_array(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size < 2:
        raise ValueError(f"{name} must be a 1-D list of at least two numbers, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be positive and finite (they are fitted in log space), got {arr.tolist()}")
    return arr


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    total = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - fitted) ** 2)) / total if total > 0 else 1.0


@dataclass
class PowerLaw:
    """y = coefficient * x**exponent, fitted in log-log space; r2 is that of the log-log line."""

    coefficient: float
    exponent: float
    r2: float

    def predict(self, x) -> np.ndarray:
        """The fitted y at `x`."""
        return self.coefficient * np.asarray(x, dtype=float) ** self.exponent

    def factor_per_doubling(self) -> float:
        """By what y is multiplied when x doubles: 2**exponent."""
        return 2.0**self.exponent

    def x_factor_for(self, y_factor: float) -> float:
        """By what x must be multiplied to multiply y by `y_factor` (e.g. 0.5 halves the error)."""
        if y_factor <= 0:
            raise ValueError(f"y_factor must be positive, got {y_factor}")
        if self.exponent == 0:
            raise ValueError("a flat power law (exponent 0) cannot change y by changing x")
        return y_factor ** (1.0 / self.exponent)


def fit_power_law(x, y) -> PowerLaw:
    """Least-squares fit of log y = log c + b log x: y = c x^b (for error vs size, b = -alpha)."""
    lx, ly = np.log(_positive_array(x, "x")), np.log(_positive_array(y, "y"))
    if len(lx) != len(ly):
        raise ValueError(f"x has {len(lx)} values but y has {len(ly)}: give one y per x")
    if np.ptp(lx) == 0:
        raise ValueError("all x are equal: a power law needs at least two different sizes")
    slope, intercept = np.polyfit(lx, ly, 1)
    return PowerLaw(coefficient=float(np.exp(intercept)), exponent=float(slope), r2=_r2(ly, intercept + slope * lx))


@dataclass
class Exponential:
    """y = y0 * 2**((t - t0) / doubling): an exponential trend in time t (years)."""

    t0: float
    y0: float
    doubling_years: float
    r2: float

    @property
    def doubling_months(self) -> float:
        """Doubling time in months."""
        return 12.0 * self.doubling_years

    @property
    def factor_per_year(self) -> float:
        """By what y is multiplied each year."""
        return 2.0 ** (1.0 / self.doubling_years)

    def predict(self, t) -> np.ndarray:
        """The fitted y at times `t` (years)."""
        return self.y0 * 2.0 ** ((np.asarray(t, dtype=float) - self.t0) / self.doubling_years)


def fit_doubling_time(t, y) -> Exponential:
    """Least-squares fit of log2 y against t (years): the doubling time of an exponential trend."""
    t = np.asarray(t, dtype=float)
    ly = np.log2(_positive_array(y, "y"))
    if t.shape != ly.shape:
        raise ValueError(f"t has {t.size} values but y has {ly.size}: give one y per time")
    if np.ptp(t) == 0:
        raise ValueError("all times are equal: a trend needs at least two different dates")
    slope, intercept = np.polyfit(t, ly, 1)
    if slope <= 0:
        raise ValueError("y does not grow with time: there is no doubling time")
    t0 = float(t.min())
    return Exponential(
        t0=t0,
        y0=float(2.0 ** (intercept + slope * t0)),
        doubling_years=float(1.0 / slope),
        r2=_r2(ly, intercept + slope * t),
    )


def decimal_year(date: str) -> float:
    """'YYYY-MM' to a year with a fraction, at the middle of the month (2012-07 -> 2012.54)."""
    try:
        year, month = (int(p) for p in str(date).split("-")[:2])
    except ValueError as exc:
        raise ValueError(f"dates must look like 'YYYY-MM', got {date!r}") from exc
    if not 1 <= month <= 12:
        raise ValueError(f"month must be 1 to 12 in {date!r}")
    return year + (month - 0.5) / 12.0


@dataclass
class LinearTime:
    """seconds = overhead + per_sample * size: a job's wall time against its data size."""

    overhead: float
    per_sample: float
    r2: float

    def predict(self, size) -> np.ndarray:
        """Seconds for `size` samples."""
        return self.overhead + self.per_sample * np.asarray(size, dtype=float)

    def elasticity(self, size: float) -> float:
        """d log(time) / d log(size) at `size`: 1 means doubling the data doubles the time."""
        return float(self.per_sample * size / self.predict(size))


def fit_time_vs_size(sizes, seconds) -> LinearTime:
    """Least-squares fit of seconds = overhead + per_sample * size (overhead clipped at 0)."""
    x, t = _positive_array(sizes, "sizes"), _positive_array(seconds, "seconds")
    if x.shape != t.shape:
        raise ValueError(f"{x.size} sizes but {t.size} times: give one time per size")
    if np.ptp(x) == 0:
        raise ValueError("all sizes are equal: measure at least two different sizes")
    slope, intercept = np.polyfit(x, t, 1)
    if slope <= 0:
        raise ValueError("the times do not grow with the data size: measure larger sizes or more epochs")
    if intercept < 0:  # a negative overhead is noise: refit through the origin
        slope, intercept = float(np.dot(x, t) / np.dot(x, x)), 0.0
    return LinearTime(overhead=float(intercept), per_sample=float(slope), r2=_r2(t, intercept + slope * x))
