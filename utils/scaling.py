"""Scaling arithmetic of lesson 01: power-law and exponential fits, and the time of a job on N workers."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from utils.commcost import ring_allreduce_seconds

HOUR = 3600.0
#: Productivity tiers of waiting for one training run: (upper bound in seconds, tier, what it does to work).
TIERS = (
    (HOUR, "minutes", "try an idea, see the result, try the next: fast and productive"),
    (24 * HOUR, "hours", "a few ideas a day; still productive"),
    (7 * 24 * HOUR, "days", "run several ideas side by side to keep moving"),
    (30 * 24 * HOUR, "weeks", "progress slows: few new ideas can be tried"),
    (math.inf, "months", "hardly worth starting"),
)


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
        return 2.0 ** self.exponent

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
    return PowerLaw(coefficient=float(np.exp(intercept)), exponent=float(slope),
                    r2=_r2(ly, intercept + slope * lx))


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
    return Exponential(t0=t0, y0=float(2.0 ** (intercept + slope * t0)), doubling_years=float(1.0 / slope),
                       r2=_r2(ly, intercept + slope * t))


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


def growth_factor(monthly_growth: float, months: float) -> float:
    """How much the data has grown after `months` at `monthly_growth` (0.05 = 5 % a month, compounded)."""
    if monthly_growth <= -1:
        raise ValueError(f"monthly_growth is a fraction (0.05 = 5 %) above -1, got {monthly_growth}")
    if months < 0:
        raise ValueError(f"months must be at least 0, got {months}")
    return (1.0 + monthly_growth) ** months


def speedup_needed(job_hours: float, deadline_hours: float = 1.0, data_growth: float = 1.0,
                   time_exponent: float = 1.0) -> float:
    """The speedup that brings a job of `job_hours` (today) under the deadline after the data grows by `data_growth`."""
    for name, v in (("job_hours", job_hours), ("deadline_hours", deadline_hours), ("data_growth", data_growth)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    return job_hours * data_growth ** time_exponent / deadline_hours


def job_seconds_on_workers(n, compute_seconds: float, steps: float, grad_bytes: float, link_bytes_per_s: float,
                           step_latency: float = 0.0, scale_batch: bool = False) -> np.ndarray:
    """T(N) = compute/N + steps(N) x ring allreduce(N): the wall time of a synchronous data-parallel job.

    With `scale_batch` False the global batch stays as on one worker: the same `steps`, each split N ways.
    With `scale_batch` True each worker keeps the single-worker batch: the global batch grows N times and
    the job takes steps/N steps (the learning rate must then be scaled, lesson 04).
    """
    n = np.asarray(n, dtype=float)
    if np.any(n < 1):
        raise ValueError("the number of workers must be at least 1")
    if compute_seconds < 0 or steps < 0 or grad_bytes < 0:
        raise ValueError("compute_seconds, steps and grad_bytes must not be negative")
    if link_bytes_per_s <= 0:
        raise ValueError(f"link_bytes_per_s must be positive, got {link_bytes_per_s} (commcost.gbit_to_bytes_per_s converts Gb/s)")
    steps_n = steps / n if scale_batch else steps
    return compute_seconds / n + steps_n * ring_allreduce_seconds(n, grad_bytes, link_bytes_per_s, step_latency)


def workers_needed(deadline_seconds: float, compute_seconds: float, steps: float, grad_bytes: float,
                   link_bytes_per_s: float, step_latency: float = 0.0, scale_batch: bool = False,
                   max_workers: int = 4096) -> int | None:
    """The fewest workers whose T(N) meets the deadline, or None if none up to `max_workers` does."""
    if deadline_seconds <= 0:
        raise ValueError(f"deadline_seconds must be positive, got {deadline_seconds}")
    n = np.arange(1, max_workers + 1)
    t = job_seconds_on_workers(n, compute_seconds, steps, grad_bytes, link_bytes_per_s, step_latency, scale_batch)
    ok = np.flatnonzero(t <= deadline_seconds)
    return int(n[ok[0]]) if ok.size else None


def communication_floor_seconds(steps: float, grad_bytes: float, link_bytes_per_s: float) -> float:
    """The least time the allreduces of a fixed-batch job take however many workers: steps x 2K/bandwidth."""
    if link_bytes_per_s <= 0:
        raise ValueError(f"link_bytes_per_s must be positive, got {link_bytes_per_s}")
    return steps * 2.0 * grad_bytes / link_bytes_per_s


def ar1_forecast_floor(phi: float, sigma: float, horizon: int) -> float:
    """The least mean squared error of forecasting 1..horizon steps of AR(1) noise: no model can do better."""
    if not -1 < phi < 1:
        raise ValueError(f"phi must lie strictly between -1 and 1 for a stationary AR(1), got {phi}")
    if sigma < 0 or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"sigma must be >= 0 and horizon a whole number >= 1, got {sigma}, {horizon!r}")
    h = np.arange(1, horizon + 1)
    return float(np.mean(sigma**2 * (1 - phi ** (2 * h)) / (1 - phi**2)))


@dataclass
class CurvePoint:
    """One point of a learning curve: the best validation loss at a training-set size, and its cost."""

    windows: int
    best_val_loss: float
    epochs: int
    epoch_seconds: list[float]
    wall_seconds: float

    @property
    def seconds_per_epoch(self) -> float:
        """Median training time of one pass over the data: validation passes and the first epoch (tracing) excluded."""
        steady = self.epoch_seconds[1:] or self.epoch_seconds
        return float(np.median(steady))


def learning_curve_point(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, *,
                         max_epochs: int, patience: int = 3, batch_size: int = 64, seed: int = 0) -> CurvePoint:
    """Train the course forecaster on (x_train, y_train) until the validation loss stops improving; time it."""
    import time  # noqa: PLC0415

    import keras  # noqa: PLC0415

    from utils.data import to_dataset  # noqa: PLC0415
    from utils.model import build_forecaster, compile_forecaster  # noqa: PLC0415

    if len(x_train) < 1 or len(x_train) != len(y_train):
        raise ValueError(f"give as many targets as windows, at least one: {len(x_train)} windows, {len(y_train)} targets")
    if not isinstance(max_epochs, int) or max_epochs < 1 or not isinstance(patience, int) or patience < 1:
        raise ValueError(f"max_epochs and patience must be whole numbers of at least 1, got {max_epochs!r}, {patience!r}")

    class TrainingTime(keras.callbacks.Callback):
        """Adds up the time of the training batches only (validation runs after them in each epoch)."""

        def on_train_begin(self, logs=None):
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.start = self.end = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.end = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(self.end - self.start)

    net = compile_forecaster(build_forecaster(lookback=x_train.shape[1], horizon=y_train.shape[1], seed=seed))
    timer = TrainingTime()
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=patience, restore_best_weights=True)
    start = time.perf_counter()
    history = net.fit(to_dataset(x_train, y_train, batch_size, shuffle=True, seed=seed),
                      validation_data=to_dataset(x_val, y_val, 1024), epochs=max_epochs, verbose=0,
                      callbacks=[timer, stop], shuffle=False)  # the dataset is shuffled already
    wall = time.perf_counter() - start
    losses = history.history["val_loss"]
    return CurvePoint(windows=len(x_train), best_val_loss=float(min(losses)), epochs=len(losses),
                      epoch_seconds=timer.seconds, wall_seconds=wall)


def productivity_tier(seconds: float) -> tuple[str, str]:
    """The tier (minutes, hours, days, weeks, months) of waiting `seconds` for a run, and what it means."""
    if not seconds >= 0:
        raise ValueError(f"seconds must be 0 or more, got {seconds}")
    for bound, tier, meaning in TIERS:
        if seconds < bound:
            return tier, meaning
    raise AssertionError("unreachable: the last tier has no bound")
