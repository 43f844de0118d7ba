"""Checkpoints: one per epoch, resumed from the last complete one, never half-written."""

from __future__ import annotations

import json
import os

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
