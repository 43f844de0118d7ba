"""Checkpoints that survive a crash at any moment: one per epoch, written atomically, resumed from the last.

A checkpoint folder holds `epoch-NNNN.keras` (the model with its optimizer state) and `state.json`
(`{"epoch": N, "model": "epoch-NNNN.keras", "history": [...]}`). Each file is written under a
temporary name and renamed, and `state.json` is replaced only after its model file is complete, so a
process killed at any instant leaves either the previous checkpoint or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import keras

STATE = "state.json"


@dataclass
class Resume:
    """The last complete checkpoint of a folder: epochs done, the model file, and every epoch's logs."""

    epoch: int
    model_path: Path
    history: list[dict]


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def latest(folder: str | Path) -> Resume | None:
    """The last complete checkpoint in `folder`, or None when there is none yet."""
    folder = Path(folder)
    state_file = folder / STATE
    if not state_file.exists():
        return None
    try:
        state = json.loads(state_file.read_text())
        resume = Resume(epoch=int(state["epoch"]), model_path=folder / state["model"], history=list(state["history"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{state_file} is not a checkpoint state written by utils.checkpoint ({exc}); "
            "delete the folder to start from scratch"
        ) from exc
    if not resume.model_path.exists():
        raise FileNotFoundError(
            f"{state_file} names {resume.model_path.name}, which is missing; delete the folder to start from scratch"
        )
    return resume


class EpochCheckpoint(keras.callbacks.Callback):
    """Save the model and the epoch's logs at the end of every epoch (only where `write` is true).

    `history` holds every epoch's logs, the resumed ones and this run's, on every worker (written or not).
    """

    def __init__(self, folder: str | Path, write: bool = True, history: list[dict] | None = None):
        super().__init__()
        self.folder, self.write = Path(folder), write
        self.history = list(history or [])
        if write:
            self.folder.mkdir(parents=True, exist_ok=True)

    def on_epoch_end(self, epoch, logs=None):
        self.history.append({"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}})
        if not self.write:
            return
        name = f"epoch-{epoch + 1:04d}.keras"
        self.model.save(self.folder / (name + ".tmp.keras"))
        os.replace(self.folder / (name + ".tmp.keras"), self.folder / name)
        _write_atomically(self.folder / STATE, json.dumps({"epoch": epoch + 1, "model": name, "history": self.history}))
        for old in self.folder.glob("epoch-*.keras"):  # keep only the checkpoint state.json names
            if old.name != name:
                old.unlink(missing_ok=True)
