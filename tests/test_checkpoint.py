"""Checkpoints: one per epoch, resumed from the last complete one, never half-written."""

from __future__ import annotations

import collections
import errno
import json
import os
import shutil
import sys

import keras
import numpy as np
import pytest

from utils import checkpoint
from utils import model as course_model


def _fit(folder, epochs, initial_epoch=0, net=None, history=None):
    x = np.random.default_rng(0).normal(size=(64, 48)).astype("float32")
    y = x[:, :24]
    if net is None:
        net = course_model.compile_forecaster(course_model.build_forecaster(width=8, depth=1, seed=0))
    net.fit(
        x,
        y,
        epochs=epochs,
        initial_epoch=initial_epoch,
        batch_size=32,
        verbose=0,
        callbacks=[checkpoint.EpochCheckpoint(folder, history=history)],
    )
    return net


def test_no_checkpoint_yet(tmp_path):
    assert checkpoint.latest(tmp_path / "none") is None


def test_every_epoch_is_recorded_and_only_the_last_model_kept(tmp_path):
    net = _fit(tmp_path, 3)
    resume = checkpoint.latest(tmp_path)
    assert resume.epoch == 3 and [h["epoch"] for h in resume.history] == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0003.keras", "state.json"]
    restored = keras.models.load_model(resume.model_path)
    assert all(np.array_equal(a, b) for a, b in zip(restored.get_weights(), net.get_weights()))


def test_resume_continues_the_history(tmp_path):
    _fit(tmp_path, 2)
    first = checkpoint.latest(tmp_path)
    net = keras.models.load_model(first.model_path)
    _fit(tmp_path, 4, initial_epoch=first.epoch, net=net, history=first.history)
    assert [h["epoch"] for h in checkpoint.latest(tmp_path).history] == [1, 2, 3, 4]


def test_a_crash_before_the_state_is_replaced_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    _fit(tmp_path, 1)
    real_replace = os.replace

    def crash_on_state(src, dst):  # the model file of epoch 2 is written, then the process dies
        if str(dst).endswith(checkpoint.STATE):
            raise KeyboardInterrupt("killed")
        return real_replace(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", crash_on_state)
    with pytest.raises(KeyboardInterrupt):
        _fit(
            tmp_path,
            2,
            initial_epoch=1,
            net=keras.models.load_model(checkpoint.latest(tmp_path).model_path),
            history=checkpoint.latest(tmp_path).history,
        )
    resume = checkpoint.latest(tmp_path)
    assert resume.epoch == 1 and resume.model_path.exists()
    keras.models.load_model(resume.model_path)  # complete and loadable


def test_a_damaged_state_file_says_what_to_do(tmp_path):
    (tmp_path / checkpoint.STATE).write_text("{not json")
    with pytest.raises(ValueError, match="delete the folder"):
        checkpoint.latest(tmp_path)
    (tmp_path / checkpoint.STATE).write_text(json.dumps({"epoch": 2, "model": "epoch-0002.keras", "history": []}))
    with pytest.raises(FileNotFoundError, match="missing"):
        checkpoint.latest(tmp_path)


def test_a_worker_that_does_not_write_keeps_the_same_history_in_memory(tmp_path):
    writer, reader = tmp_path / "writer", tmp_path / "reader"
    _fit(writer, 2)
    x = np.random.default_rng(0).normal(size=(64, 48)).astype("float32")
    net = course_model.compile_forecaster(course_model.build_forecaster(width=8, depth=1, seed=0))
    silent = checkpoint.EpochCheckpoint(reader, write=False, history=[{"epoch": 0, "loss": 1.0}])
    net.fit(x, x[:, :24], epochs=2, batch_size=32, verbose=0, callbacks=[silent])
    assert not reader.exists(), "a worker that does not write creates no folder and no file"
    assert [h["epoch"] for h in silent.history] == [0, 1, 2]
    assert set(silent.history[1]) == set(checkpoint.latest(writer).history[0]), "the same logs as the writer's"


def _a_full_disk(monkeypatch, free: int = 3_500_000) -> list:
    """shutil.disk_usage answering `free` bytes; the folders it was asked about."""
    asked, usage = [], collections.namedtuple("usage", "total used free")

    def disk_usage(path):
        asked.append(os.fspath(path))
        return usage(10**9, 10**9 - free, free)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    return asked


def test_a_full_disk_leaves_no_partial_file_says_where_and_how_much_is_free_and_keeps_the_last(
    tmp_path, monkeypatch, capsys
):
    """ENOSPC while the model is written (part of its file already there): the partial file is removed, the error
    is one line naming the folder and the space left there (a script ends with that line, no traceback), and
    the last good checkpoint is still the one to resume from."""
    net = _fit(tmp_path, 1)
    first = checkpoint.latest(tmp_path)

    def save_on_a_full_disk(path, *args, **kwargs):
        with open(path, "wb") as part:
            part.write(b"PK\x03\x04" + bytes(4096))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(net, "save", save_on_a_full_disk)
    asked = _a_full_disk(monkeypatch)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # put back after the test, whatever the callback hooks
    with pytest.raises(OSError) as caught:
        _fit(tmp_path, 2, initial_epoch=1, net=net, history=first.history)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001.keras", "state.json"], "a partial file is left"
    err, message = caught.value, str(caught.value)
    assert type(err).__name__ == "CheckpointError" and err.errno == errno.ENOSPC, f"{type(err).__name__}: {message}"
    assert "\n" not in message and str(tmp_path) in message and "3.5 MB free" in message, message
    assert "epoch 1" in message, message  # the checkpoint a rerun resumes from
    assert asked and all(os.path.samefile(folder, tmp_path) for folder in asked)
    capsys.readouterr()
    sys.excepthook(type(err), err, err.__traceback__)  # what a script that does not catch it ends with
    assert capsys.readouterr().err == f"utils.checkpoint.CheckpointError: {message}\n"
    resume = checkpoint.latest(tmp_path)
    assert resume.epoch == 1 and resume.model_path.name == "epoch-0001.keras" and resume.history == first.history
    keras.models.load_model(resume.model_path)  # complete and loadable


def test_a_full_disk_while_the_state_is_written_leaves_the_previous_checkpoint_alone(tmp_path, monkeypatch):
    """The model file of epoch 2 is complete and in place; state.json's new copy fails half-way: state.json still
    names epoch 1, whose file is kept; the new model file and the partial state copy are removed."""
    _fit(tmp_path, 1)
    first = checkpoint.latest(tmp_path)

    def write_on_a_full_disk(path, text):
        path.with_name(path.name + ".tmp").write_text(text[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "_write_atomically", write_on_a_full_disk)
    _a_full_disk(monkeypatch)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    with pytest.raises(OSError, match="3.5 MB free"):
        _fit(tmp_path, 2, initial_epoch=1, net=keras.models.load_model(first.model_path), history=first.history)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001.keras", "state.json"]
    assert checkpoint.latest(tmp_path).epoch == 1
    keras.models.load_model(checkpoint.latest(tmp_path).model_path)
