"""The course dataset loads as its provenance says; bad files get helpful errors; windows are right."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest

from utils import data


def test_course_file_matches_its_provenance():
    raw = data.DATASET.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == data.EXPECTED_SHA256
    assert data.EXPECTED_SHA256 in (data.DATASET.parent / "README.md").read_text()
    assert len(raw) < 5 * 1024 * 1024
    frame = data.load_series()
    assert len(frame) == data.EXPECTED_ROWS == 8760
    assert frame["filled"].sum() == 1
    assert frame["timestamp"].iloc[0].strftime("%Y-%m-%d %H:%M") == "2010-01-01 00:00"
    assert 30 < frame["temperature_f"].min() < frame["temperature_f"].max() < 90  # Seattle, in °F
    assert frame["timestamp"].diff().dropna().nunique() == 1


@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "series.csv"
    shutil.copy(data.DATASET, dst)
    return dst


def test_missing_file_says_how_to_restore(tmp_path, monkeypatch):
    with pytest.raises(data.DatasetError, match="does not exist"):
        data.load_series(tmp_path / "nope.csv")
    monkeypatch.setattr(data, "DATASET", tmp_path / data.DATASET.name)
    with pytest.raises(data.DatasetError, match="git checkout"):
        data.load_series()


def test_truncated_course_file_is_detected(tmp_path, monkeypatch):
    fake = tmp_path / data.DATASET.name
    lines = data.DATASET.read_text().splitlines(keepends=True)
    fake.write_text("".join(lines[:1000]))
    monkeypatch.setattr(data, "DATASET", fake)
    with pytest.raises(data.DatasetError, match="truncated"):
        data.load_series()


def test_changed_course_file_fails_its_checksum(tmp_path, monkeypatch):
    fake = tmp_path / data.DATASET.name
    fake.write_text(data.DATASET.read_text().replace("2010-01-01 00:00,39.4", "2010-01-01 00:00,39.5"))
    monkeypatch.setattr(data, "DATASET", fake)
    with pytest.raises(data.DatasetError, match="checksum"):
        data.load_series()


def test_file_cut_mid_line_is_reported(copy):
    text = copy.read_text()
    copy.write_text(text[: len(text) // 2].rsplit(",", 1)[0] + ",")  # last row lacks its value
    with pytest.raises(data.DatasetError):
        data.load_series(copy)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda t: t.replace("timestamp,temperature_f,filled", "time,temp,filled"), "columns"),
        (lambda t: t.replace("2010-01-01 05:00", "2010-01-01 5 o'clock"), "not `YYYY-MM-DD HH:MM`"),
        (lambda t: t.replace("2010-01-01 05:00", "2010-01-01 04:00", 1), "increase by exactly one hour"),
        (lambda t: t.replace("2010-01-01 00:00,39.4", "2010-01-01 00:00,warm"), "not a number"),
        (lambda t: t.replace("2010-01-01 00:00,39.4", "2010-01-01 00:00,"), "missing or not a number"),
        (lambda t: t.replace("2010-01-01 00:00,39.4,0", "2010-01-01 00:00,39.4,7"), "only 0 or 1"),
        (lambda t: "", "empty"),
        (lambda t: t.splitlines()[0] + "\n", "no rows"),
    ],
)
def test_malformed_files_get_specific_errors(copy, bad, message):
    copy.write_text(bad(copy.read_text()))
    with pytest.raises(data.DatasetError, match=message) as err:
        data.load_series(copy)
    assert "header" in str(err.value) or "Restore" in str(err.value)  # says what to do


def test_synthetic_series_is_deterministic_sized_and_like_the_real_one():
    a, b, c = (
        data.synthetic_series(5000, seed=1),
        data.synthetic_series(5000, seed=1),
        data.synthetic_series(5000, seed=2),
    )
    assert a.shape == (5000,) and np.array_equal(a, b) and not np.array_equal(a, c)
    assert data.synthetic_series(0).shape == (0,)
    assert data.synthetic_series(3 * 8760 + 7).shape == (3 * 8760 + 7,)
    real = data.load_series()["temperature_f"].to_numpy()
    fake = data.synthetic_series(len(real), seed=0)
    assert abs(fake.mean() - real.mean()) < 2.0
    assert 0.8 < fake.std() / real.std() < 1.25
    # the daily cycle: hour-of-day profiles agree closely
    prof = lambda s: s.reshape(-1, 24).mean(axis=0) - s.mean()
    assert np.corrcoef(prof(real), prof(fake))[0, 1] > 0.95
    # hour-to-hour changes are of the same size
    assert 0.6 < np.abs(np.diff(fake)).mean() / np.abs(np.diff(real)).mean() < 1.6
    with pytest.raises(ValueError, match="whole number"):
        data.synthetic_series(-1)


def test_windows_match_the_series_by_hand():
    series = np.arange(10, dtype=np.float32)
    x, y = data.make_windows(series, lookback=3, horizon=2)
    assert x.shape == (6, 3) and y.shape == (6, 2) and x.dtype == np.float32
    assert x[0].tolist() == [0, 1, 2] and y[0].tolist() == [3, 4]
    assert x[-1].tolist() == [5, 6, 7] and y[-1].tolist() == [8, 9]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lookback": 0, "horizon": 1}, "lookback"),
        ({"lookback": 3, "horizon": 0}, "horizon"),
        ({"lookback": 8, "horizon": 3}, "too short"),
    ],
)
def test_bad_window_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        data.make_windows(np.arange(10.0), **kwargs)


def test_prepare_normalises_with_training_statistics_only():
    values = np.concatenate([np.zeros(80) + np.arange(80) % 2, np.full(20, 100.0)])  # val part is wild
    splits = data.prepare(values, lookback=4, horizon=2, val_fraction=0.2)
    assert splits.scaler.mean == pytest.approx(0.5) and splits.scaler.std == pytest.approx(0.5)
    assert splits.x_val.max() == pytest.approx((100 - 0.5) / 0.5)
    assert splits.scaler.inverse(splits.scaler.transform(np.array([3.0]))) == pytest.approx([3.0])
    assert len(splits.x_train) == 80 - 4 - 2 + 1


def test_to_dataset_batches_and_shuffles_reproducibly():
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10, dtype=np.float32).reshape(10, 1)
    batches = list(data.to_dataset(x, y, batch_size=4))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    first = lambda: [float(v) for v in next(iter(data.to_dataset(x, y, 10, shuffle=True, seed=3)))[1].numpy().ravel()]
    assert first() == first() and sorted(first()) == list(range(10))
    with pytest.raises(ValueError, match="batch_size"):
        data.to_dataset(x, y, batch_size=0)


@pytest.mark.parametrize("n, size", [(10, 3), (3469 + 3468, 2), (8, 4), (5, 5)])
def test_shards_are_equal_disjoint_and_cover_all_but_the_remainder(n, size):
    x = np.arange(n)[:, None].astype(float)
    shards = [data.shard(x, x[:, 0], r, size) for r in range(size)]
    assert len({len(s[0]) for s in shards}) == 1  # same number of steps on every rank
    taken = np.concatenate([s[1] for s in shards])
    assert len(set(taken)) == len(taken) == n // size * size  # disjoint, nothing lost but the remainder
    assert all(np.array_equal(s[0][:, 0], s[1]) for s in shards)  # x and y stay paired


def test_shard_rejects_bad_arguments():
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="rank must be in"):
        data.shard(x, x, 2, 2)
    with pytest.raises(ValueError, match="cannot be shared among 5 ranks"):
        data.shard(x, x, 0, 5)


def test_write_files_splits_the_series_into_consecutive_hours(tmp_path):
    values = np.arange(10, dtype=float) * 1.5
    paths_ = data.write_files(values, tmp_path, 3)
    lines = [line.split(",") for p in paths_ for line in p.read_text().splitlines()]
    assert [p.name for p in paths_] == ["part-000.csv", "part-001.csv", "part-002.csv"]
    assert [len(p.read_text().splitlines()) for p in paths_] == [4, 3, 3]
    assert [int(i) for i, _ in lines] == list(range(10)) and float(lines[3][1]) == 4.5
    data.write_files(values, tmp_path, 1)  # rewriting the folder leaves no stale part behind
    assert len(list(tmp_path.glob("part-*.csv"))) == 1
    with pytest.raises(ValueError, match="from 1 to the 10 values"):
        data.write_files(values, tmp_path, 11)
