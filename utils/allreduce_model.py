"""The cost of one ring allreduce: Thakur et al.'s alpha-beta-gamma model, and its fit to measured times.

For N workers and a buffer of b bytes, the ring (reduce-scatter, then allgather) takes
(Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009)

    t(N, b) = overhead + 2(N-1) alpha + 2(N-1)/N * b / B + (N-1)/N * b * gamma

with alpha the latency of one ring step, B the bandwidth of one link, gamma the seconds to add one byte
(the reduction; on a GPU it is nearly free, on a CPU it is not) and `overhead` a framework's own cost per
call (Horovod's negotiation and the wait for its background cycle). For a fixed N the model is a line in
b: an intercept `overhead + 2(N-1) alpha` and a slope `(N-1)/N * (2/B + gamma)`. Times of allreduces
alone cannot tell B from gamma (both scale with b(N-1)/N): gamma is measured on its own, by timing an
addition, and the link bandwidth follows from the slope.

On a CPU the slope is smaller while a message's pieces fit in the core's caches: the measured line bends
where they outgrow them. `fit_line` then fits two regimes joined at a bend.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def ring_seconds(n, nbytes, alpha: float, bandwidth: float, gamma: float = 0.0, overhead: float = 0.0) -> np.ndarray:
    """Thakur et al.'s ring allreduce time: overhead + 2(n-1)alpha + 2(n-1)/n b/bandwidth + (n-1)/n b gamma."""
    n, b = np.asarray(n, dtype=float), np.asarray(nbytes, dtype=float)
    if np.any(n < 1) or bandwidth <= 0:
        raise ValueError(f"n must be at least 1 and the bandwidth positive, got n={n}, bandwidth={bandwidth}")
    return overhead + 2 * (n - 1) * alpha + (n - 1) / n * b * (2 / bandwidth + gamma)


@dataclass(frozen=True)
class LineFit:
    """t(b) = intercept + slope * b, with a second slope above `bend` bytes (continuous there) if bend is set."""

    intercept: float  # seconds: overhead + 2(N-1) alpha
    slope: float  # seconds per byte (below the bend)
    bend: float | None = None  # bytes where the slope changes; None: one regime
    slope_above: float | None = None  # seconds per byte above the bend

    def predict(self, nbytes) -> np.ndarray:
        """Predicted seconds for messages of `nbytes` bytes."""
        b = np.asarray(nbytes, dtype=float)
        t = self.intercept + self.slope * b
        if self.bend is not None:
            t = t + (self.slope_above - self.slope) * np.maximum(b - self.bend, 0.0)
        return t

    def relative_errors(self, nbytes, seconds) -> np.ndarray:
        """(predicted - measured) / measured for each measurement."""
        t = np.asarray(seconds, dtype=float)
        return (self.predict(nbytes) - t) / t


def _solve(columns: list[np.ndarray], t: np.ndarray, iterations: int = 200) -> np.ndarray:
    """Coefficients that minimise the largest relative error (Lawson's iteratively reweighted least squares)."""
    design = np.stack(columns, axis=1) / t[:, None]  # each row divided by t: relative residuals
    weights = np.full(t.size, 1.0 / t.size)
    for _ in range(iterations):
        root = np.sqrt(weights)
        coef, *_ = np.linalg.lstsq(design * root[:, None], root, rcond=None)
        residual = np.abs(design @ coef - 1.0)
        if residual.max() < 1e-12:
            break
        weights = weights * (residual + 1e-15)  # the worst-fitted sizes weigh more in the next round
        weights /= weights.sum()
    return coef


def _check(nbytes, seconds) -> tuple[np.ndarray, np.ndarray]:
    b, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if b.shape != t.shape or b.ndim != 1 or b.size < 2:
        raise ValueError("give at least two (bytes, seconds) measurements as two sequences of equal length")
    if np.any(t <= 0) or np.any(b < 0):
        raise ValueError("times must be positive and sizes non-negative")
    order = np.argsort(b)
    return b[order], t[order]


def fit_line(nbytes, seconds, goal: float | None = None) -> LineFit:
    """Fit t = intercept + slope*b, minimising the largest relative error; beyond `goal`, fit two regimes.

    The two-regime fit joins two lines at a bend placed at a measured size (at least two sizes at or
    below it, one above) or midway (geometrically) between two, the one with the smallest worst error.
    """
    b, t = _check(nbytes, seconds)
    intercept, slope = _solve([np.ones_like(b), b], t)
    if slope <= 0:
        raise ValueError("the measured times do not grow with size: no bandwidth can be fitted")
    one = LineFit(max(float(intercept), 0.0), float(slope))
    worst = float(np.max(np.abs(one.relative_errors(b, t))))
    if goal is None or worst <= goal or b.size < 4:
        return one
    best, best_worst = one, worst
    # Candidate bends: every measured size with two sizes at or below it and one above, and the geometric
    # midpoints between neighbouring sizes (a cache bend rarely falls on a power of 4).
    sizes = np.unique(b)
    mids = np.sqrt(sizes[1:-1] * sizes[2:]) if sizes.size > 3 else np.array([])
    for bend in np.unique(np.concatenate([sizes[1:-1], mids])):
        c0, c1, c2 = _solve([np.ones_like(b), b, np.maximum(b - bend, 0.0)], t)
        if c1 <= 0 or c1 + c2 <= 0:
            continue  # a regime whose time falls with size is no bandwidth
        fit = LineFit(max(float(c0), 0.0), float(c1), float(bend), float(c1 + c2))
        err = float(np.max(np.abs(fit.relative_errors(b, t))))
        if err < best_worst:
            best, best_worst = fit, err
    return best


def implied_bandwidth(slope: float, n: int, gamma: float) -> float:
    """The link bandwidth B (bytes/s) that a fitted slope implies: slope = (n-1)/n (2/B + gamma)."""
    if n < 2:
        raise ValueError(f"one worker sends nothing: the slope says nothing about a link (n={n})")
    per_byte = slope * n / (n - 1) - gamma  # = 2 / B
    if per_byte <= 0:
        raise ValueError(
            f"the reduction alone (gamma = {gamma:.3g} s/byte) takes longer than the measured slope allows: "
            "measure gamma and the allreduce on the same machine, under the same load"
        )
    return 2 / per_byte


@dataclass(frozen=True)
class RingFit:
    """The model fitted across several N: per-call overhead, per-step alpha, link bandwidth, given gamma."""

    overhead: float
    alpha: float
    bandwidth: float
    gamma: float

    def predict(self, n, nbytes) -> np.ndarray:
        """Predicted seconds of an allreduce of `nbytes` bytes over `n` workers."""
        return ring_seconds(n, nbytes, self.alpha, self.bandwidth, self.gamma, self.overhead)


def fit_ring(n: Sequence[int], nbytes, seconds, gamma: float, minimax: bool = True) -> RingFit:
    """Fit overhead, alpha and B of `ring_seconds` to times measured at several N (gamma measured apart), minimising
    the largest relative error (or, with `minimax=False`, the sum of squared relative errors with overhead, alpha
    and 1/B kept at zero or above: with few sizes a free fit can trade a negative overhead for a larger alpha)."""
    n_, b, t = (np.asarray(v, dtype=float) for v in (n, nbytes, seconds))
    if not (n_.shape == b.shape == t.shape) or len(set(n_.tolist())) < 2:
        raise ValueError("give (n, bytes, seconds) rows of equal length for at least two values of n")
    if np.any(t <= 0) or np.any(n_ < 2):
        raise ValueError("times must be positive and every n at least 2")
    target = t - (n_ - 1) / n_ * b * gamma  # what is left for the links and latencies
    if np.any(target <= 0):
        raise ValueError("gamma is larger than the measured times allow: measure it on the same machine")
    columns = [np.ones_like(b), 2 * (n_ - 1), 2 * (n_ - 1) / n_ * b]
    if minimax:
        c0, c1, c2 = _solve(columns, target)
    else:  # least squares of the relative errors, none of the three costs below zero
        from scipy.optimize import lsq_linear

        design = np.stack(columns, axis=1) / target[:, None]
        c0, c1, c2 = lsq_linear(design, np.ones_like(target), bounds=(0.0, np.inf)).x
    if c2 <= 0:
        raise ValueError("the times do not grow with size: no bandwidth can be fitted")
    return RingFit(float(c0), float(c1), 1 / float(c2), gamma)


def measure_gamma(nbytes: int, repeats: int = 20) -> float:
    """Seconds per byte to add one float32 buffer of `nbytes` bytes into another on this core (best of repeats)."""
    if nbytes < 4 or repeats < 1:
        raise ValueError(f"nbytes must be at least 4 and repeats at least 1, got {nbytes}, {repeats}")
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.ones_like(a)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.add(a, b, out=a)
        best = min(best, time.perf_counter() - start)
    return best / a.nbytes


@dataclass(frozen=True)
class LinkFit:
    """The ring model fitted to allreduces over links of one set rate: the fit, and how it compares."""

    link: str
    set_bytes_per_s: float  # NaN on loopback, where no rate was set
    fit: RingFit
    worst_error: float  # largest |predicted / measured - 1| over the rows fitted

    @property
    def bandwidth_ratio(self) -> float:
        """Fitted link bandwidth over the set one (NaN on loopback)."""
        return self.fit.bandwidth / self.set_bytes_per_s


def fit_links(rows, gamma: float, min_bytes: int = 1 << 20) -> list[LinkFit]:
    """One `fit_ring` per link rate in measurement rows (utils.bench.measure_allreduce's, with `link` and
    `link_bps`), on the best times of messages of at least `min_bytes` bytes, by least squares of the relative
    errors (one call slowed by another program does not pull the fitted bandwidth as a minimax fit would)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    missing = {"np", "bytes", "best_seconds", "link", "link_bps"} - set(df.columns)
    if missing:
        raise ValueError(f"rows lack the columns {sorted(missing)}: measure them with utils.bench.measure_allreduce")
    out = []
    for link, group in df[df.bytes >= min_bytes].groupby("link", sort=False):
        fit = fit_ring(group.np, group.bytes, group.best_seconds, gamma=gamma, minimax=False)
        worst = float(np.max(np.abs(fit.predict(group.np, group.bytes) / group.best_seconds - 1)))
        out.append(LinkFit(str(link), float(group.link_bps.iloc[0]) / 8, fit, worst))
    return out
