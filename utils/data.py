"""The course dataset: loading and checking it, a generator of the same kind of series, and windowing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from utils.paths import REPO_ROOT

DATASET = REPO_ROOT / "data" / "seattle_hourly_temperature_2010.csv"
COLUMNS = ["timestamp", "temperature_f", "filled"]
EXPECTED_ROWS = 8760
EXPECTED_SHA256 = "520566412bdfba4e4c3fa127f9c516d8218296abd89bb665a7e6d4a701ef8f92"
HOURS_PER_DAY = 24
HOURS_PER_YEAR = 8760

# Constants of `synthetic_series`, fitted to the course dataset by least squares (mean, two
# harmonics of the yearly and of the daily cycle) and an AR(1) fit of what remains.
_MEAN = 52.027
_YEARLY = ((-4.223, -11.393), (2.201, -0.114))  # (sin, cos) coefficients of harmonics 1 and 2
_DAILY = ((-4.070, -3.227), (0.845, 0.562))
# The AR(1) noise of the generator (public: lesson 01 derives the forecast-error floor from it).
AR_PHI = 0.9515
AR_SIGMA = 0.5099


class DatasetError(ValueError):
    """The dataset file is missing, truncated or malformed; the message says what to do."""


def _restore_hint(path: Path) -> str:
    if path.resolve() == DATASET.resolve():
        return (
            f"Restore the course's copy with `git checkout -- data/{DATASET.name}` "
            "(or rebuild it with tools/make_course_dataset.py, see data/README.md)."
        )
    return (
        f"A series file needs the header `{','.join(COLUMNS)}`, one row per hour, timestamps "
        "`YYYY-MM-DD HH:MM` in increasing order, numeric temperatures and 0/1 in `filled`."
    )


def load_series(path: str | Path | None = None, verify_checksum: bool | None = None) -> pd.DataFrame:
    """Load and check the hourly temperature series (the course dataset unless `path` is given)."""
    path = Path(path) if path is not None else DATASET
    is_course_file = path.resolve() == DATASET.resolve()
    verify = is_course_file if verify_checksum is None else verify_checksum
    if not path.exists():
        raise DatasetError(f"The dataset file {path} does not exist. {_restore_hint(path)}")
    raw = path.read_bytes()
    if not raw.strip():
        raise DatasetError(f"The dataset file {path} is empty. {_restore_hint(path)}")
    try:
        frame = pd.read_csv(path, dtype={"timestamp": str})
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path} is not a readable CSV file ({exc}). {_restore_hint(path)}") from exc
    if list(frame.columns) != COLUMNS:
        raise DatasetError(f"{path} has the columns {list(frame.columns)}, expected {COLUMNS}. {_restore_hint(path)}")
    if len(frame) == 0:
        raise DatasetError(f"{path} has a header but no rows. {_restore_hint(path)}")
    stamps = pd.to_datetime(frame["timestamp"], format="%Y-%m-%d %H:%M", errors="coerce")
    if stamps.isna().any():
        row = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise DatasetError(
            f"{path}, data row {row + 1}: timestamp {frame['timestamp'].iloc[row]!r} is not "
            f"`YYYY-MM-DD HH:MM`. {_restore_hint(path)}"
        )
    steps = stamps.diff().dropna()
    if (steps != pd.Timedelta(hours=1)).any():
        row = int(np.flatnonzero((steps != pd.Timedelta(hours=1)).to_numpy())[0]) + 1
        raise DatasetError(
            f"{path}, data row {row + 1}: timestamps must increase by exactly one hour, but "
            f"{frame['timestamp'].iloc[row - 1]} is followed by {frame['timestamp'].iloc[row]}. "
            f"{_restore_hint(path)}"
        )
    values = pd.to_numeric(frame["temperature_f"], errors="coerce")
    if values.isna().any():
        row = int(np.flatnonzero(values.isna().to_numpy())[0])
        raise DatasetError(
            f"{path}, data row {row + 1}: temperature {frame['temperature_f'].iloc[row]!r} is "
            f"missing or not a number. {_restore_hint(path)}"
        )
    if not frame["filled"].isin([0, 1]).all():
        raise DatasetError(f"{path}: the `filled` column must hold only 0 or 1. {_restore_hint(path)}")
    if is_course_file and len(frame) != EXPECTED_ROWS:
        raise DatasetError(
            f"{path} has {len(frame)} rows, but the course dataset has {EXPECTED_ROWS}: "
            f"the file is truncated or changed. {_restore_hint(path)}"
        )
    if verify and hashlib.sha256(raw).hexdigest() != EXPECTED_SHA256:
        raise DatasetError(
            f"{path} does not have the checksum recorded in data/README.md: the file was changed. {_restore_hint(path)}"
        )
    return pd.DataFrame(
        {"timestamp": stamps, "temperature_f": values.astype("float64"), "filled": frame["filled"].astype(int)}
    )


def synthetic_series(n: int, seed: int = 0, start_hour: int = 0) -> np.ndarray:
    """`n` hourly temperatures (°F) of the same kind as the course dataset, deterministic for `seed`.

    Mean, yearly and daily cycles (two harmonics each) and AR(1) weather noise use constants fitted
    to the 2010 Seattle series; past one year the cycles repeat and the noise goes on.
    """
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a whole number of hours, at least 0; got {n!r}")
    t = np.arange(start_hour, start_hour + n, dtype=np.float64)
    value = np.full(n, _MEAN)
    for period, harmonics in ((HOURS_PER_YEAR, _YEARLY), (HOURS_PER_DAY, _DAILY)):
        for k, (a_sin, a_cos) in enumerate(harmonics, start=1):
            value += a_sin * np.sin(2 * np.pi * k * t / period) + a_cos * np.cos(2 * np.pi * k * t / period)
    rng = np.random.default_rng(seed)
    shocks = rng.normal(0.0, AR_SIGMA, size=n)
    noise = np.empty(n)
    level = rng.normal(0.0, AR_SIGMA / np.sqrt(1 - AR_PHI**2)) if n else 0.0  # stationary start
    for i in range(n):
        level = AR_PHI * level + shocks[i]
        noise[i] = level
    return value + noise


def make_windows(values: np.ndarray, lookback: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut a series into inputs of `lookback` steps and targets of the next `horizon` steps (float32)."""
    values = np.asarray(values, dtype=np.float32)
    if values.ndim != 1:
        raise ValueError(f"values must be a 1-D series, got shape {values.shape}")
    for name, v in (("lookback", lookback), ("horizon", horizon)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a whole number of steps, at least 1; got {v!r}")
    count = len(values) - lookback - horizon + 1
    if count < 1:
        raise ValueError(
            f"a series of {len(values)} steps is too short for one window of {lookback} + {horizon} "
            "steps: use a longer series or a smaller lookback/horizon"
        )
    idx = np.arange(count)[:, None]
    x = values[idx + np.arange(lookback)]
    y = values[idx + lookback + np.arange(horizon)]
    return x, y


@dataclass
class Scaler:
    """Mean and standard deviation of the training part, used to normalise and de-normalise."""

    mean: float
    std: float

    def transform(self, values: np.ndarray) -> np.ndarray:
        """Normalise: (values - mean) / std."""
        return ((np.asarray(values) - self.mean) / self.std).astype(np.float32)

    def inverse(self, values: np.ndarray) -> np.ndarray:
        """Back to the original unit."""
        return np.asarray(values) * self.std + self.mean


@dataclass
class Splits:
    """Windowed, normalised training and validation arrays, and the scaler that made them."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    scaler: Scaler


def prepare(values: np.ndarray, lookback: int = 48, horizon: int = 24, val_fraction: float = 0.2) -> Splits:
    """Split a series in time (validation = the last part), normalise with training statistics, window both."""
    values = np.asarray(values, dtype=np.float64)
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    cut = int(round(len(values) * (1 - val_fraction)))
    train, val = values[:cut], values[cut:]
    std = float(train.std()) if len(train) else 0.0
    if std == 0.0:
        raise ValueError("the training part is constant (or empty): use a longer or varying series")
    scaler = Scaler(mean=float(train.mean()), std=std)
    x_train, y_train = make_windows(scaler.transform(train), lookback, horizon)
    x_val, y_val = make_windows(scaler.transform(val), lookback, horizon)
    return Splits(x_train, y_train, x_val, y_val, scaler)


def to_dataset(
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    shuffle: bool = False,
    seed: int = 0,
    drop_remainder: bool = False,
    read_latency_s: float = 0.0,
):
    """A `tf.data.Dataset` of (x, y) batches, optionally shuffled with a fixed seed, prefetched.

    With `read_latency_s` > 0 it is lesson 01's naive pipeline instead: every window waits that long, as if read
    from remote storage, one window at a time, only when the training step asks for its batch (no map-and-batch
    fusion, no prefetch: the input-bound case)."""
    import tensorflow as tf

    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} windows but y has {len(y)}: they must match")
    if read_latency_s < 0:
        raise ValueError(f"read_latency_s must not be negative, got {read_latency_s!r}")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
    if read_latency_s > 0:
        from utils import input_pipeline

        def read(xw, yw):  # the wait of input_pipeline.slow_read, then the window itself
            waited = tf.py_function(lambda: input_pipeline.slow_wait(read_latency_s), [], tf.float32)
            waited.set_shape([])
            return xw + 0.0 * waited, yw

        naive = tf.data.Options()  # tf.data would otherwise fuse map and batch and read ahead on a thread
        naive.experimental_optimization.map_and_batch_fusion = False
        naive.experimental_optimization.inject_prefetch = False
        return ds.map(read).batch(batch_size, drop_remainder=drop_remainder).with_options(naive)
    return ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def shard(x: np.ndarray, y: np.ndarray, rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank `rank`'s share of the windows: every `size`-th one from `rank`, all shards of equal length.

    Equal lengths matter in synchronous training: a rank with one extra batch would wait forever in an
    allreduce that no other rank joins. The last `len(x) % size` windows are left out.
    """
    if not isinstance(size, (int, np.integer)) or size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank must be in 0..size-1 and size at least 1, got rank={rank}, size={size}")
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} windows but y has {len(y)}: they must match")
    usable = len(x) // size * size
    if usable == 0:
        raise ValueError(f"{len(x)} windows cannot be shared among {size} ranks: use more data or fewer ranks")
    return x[rank:usable:size], y[rank:usable:size]


def ar1_forecast_floor(phi: float, sigma: float, horizon: int) -> float:
    """The least mean squared error of forecasting 1..horizon steps of AR(1) noise: no model can do better."""
    if not -1 < phi < 1:
        raise ValueError(f"phi must lie strictly between -1 and 1 for a stationary AR(1), got {phi}")
    if sigma < 0 or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"sigma must be >= 0 and horizon a whole number >= 1, got {sigma}, {horizon!r}")
    h = np.arange(1, horizon + 1)
    return float(np.mean(sigma**2 * (1 - phi ** (2 * h)) / (1 - phi**2)))


def write_files(values: np.ndarray, folder: str | Path, files: int) -> list[Path]:
    """Write a series as `files` CSV files of consecutive hours, one `index,value` line per hour."""
    if not isinstance(files, (int, np.integer)) or not 1 <= files <= len(values):
        raise ValueError(f"files must be a whole number from 1 to the {len(values)} values, got {files!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("part-*.csv"):
        old.unlink()
    paths = []
    for k, chunk in enumerate(np.array_split(np.arange(len(values)), files)):
        path = folder / f"part-{k:03d}.csv"
        path.write_text("".join(f"{i},{values[i]:.2f}\n" for i in chunk))
        paths.append(path)
    return paths
