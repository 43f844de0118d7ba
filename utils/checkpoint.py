"""Checkpoints that survive a crash at any moment: one per epoch, written atomically, resumed from the last.

A checkpoint folder holds `epoch-NNNN.keras` (the model with its optimizer state) and `state.json`
(`{"epoch": N, "model": "epoch-NNNN.keras", "history": [...]}`). Each file is written under a
temporary name and renamed, and `state.json` is replaced only after its model file is complete, so a
process killed at any instant leaves either the previous checkpoint or the new one, never a mix.

A write that fails (a full disk: ENOSPC) removes what it had written of the new checkpoint, leaves the previous
one as it was, and raises CheckpointError: one line with the folder and the space left there, which is all an
uncaught one prints as a script ends (no traceback).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
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


class CheckpointError(OSError):
    """A checkpoint that could not be written (its `errno` that of the failed write); its message is one line."""

    def __str__(self) -> str:
        return str(self.strerror)


def _size(n: int) -> str:
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _failed(err: OSError, folder: Path, epoch: int, previous: tuple[int, str] | None) -> CheckpointError:
    """The one-line error of a checkpoint write that failed, with the space left in `folder`."""
    try:
        free = f"{_size(shutil.disk_usage(folder).free)} free there"
    except OSError:
        free = "its free space unknown"
    why = err.strerror or (str(err).splitlines() or [type(err).__name__])[0]
    code = f" ({errno.errorcode[err.errno]})" if err.errno in errno.errorcode else ""
    kept = (
        f"the last good checkpoint, epoch {previous[0]} ({previous[1]}), stays, and a rerun resumes from it"
        if previous
        else "there is no earlier checkpoint, and a rerun starts from scratch"
    )
    return CheckpointError(
        err.errno,
        f"cannot write the checkpoint of epoch {epoch} in {folder}: {why}{code}, {free}; what was written of it "
        f"is removed; {kept}: free some space there, or checkpoint to another folder",
    )


def _hook_one_line() -> None:
    """An uncaught CheckpointError ends a script with its one line (`sys.tracebacklimit = 0` while the hooks
    print it); every other error, and every hook already set (tracking's marks its run FAILED), as before."""
    if getattr(sys.excepthook, "one_line_checkpoint_error", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        if not isinstance(value, CheckpointError):
            return previous(kind, value, tb)
        had, limit = hasattr(sys, "tracebacklimit"), getattr(sys, "tracebacklimit", None)
        sys.tracebacklimit = 0
        try:
            return previous(kind, value, tb)
        finally:
            if had:
                sys.tracebacklimit = limit
            else:
                del sys.tracebacklimit

    hook.one_line_checkpoint_error = True
    sys.excepthook = hook


def _named(folder: Path) -> tuple[int, str] | None:
    """The epoch and the model file that the folder's state.json names now, if it names them."""
    try:
        state = json.loads((folder / STATE).read_text())
        return int(state["epoch"]), str(state["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _scratch_folders() -> set[Path]:
    """The `tmp*` folders in the temporary folder now (Keras's saving makes one per save)."""
    try:
        return set(Path(tempfile.gettempdir()).glob("tmp*"))
    except OSError:
        return set()


def _remove_new_scratch(before: set[Path]) -> None:
    """Removes the `tmp*` folders a failed save left in the temporary folder (Keras's, holding only an empty
    `assets` folder when the disk was full): those that were not there before it and hold no file."""
    for folder in _scratch_folders() - before:
        try:
            if folder.is_dir() and not any(p.is_file() for p in folder.rglob("*")):
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


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
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as err:
                _hook_one_line()
                raise CheckpointError(
                    errno.ENOTDIR,
                    f"cannot keep checkpoints in {self.folder}: it, or a folder above it, is a file ({err.strerror}); "
                    "give a folder (a new one is made)",
                ) from None

    def on_epoch_end(self, epoch, logs=None):
        self.history.append({"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}})
        if not self.write:
            return
        name = f"epoch-{epoch + 1:04d}.keras"
        partial = self.folder / (name + ".tmp.keras")
        scratch = _scratch_folders()
        try:
            self.model.save(partial)
            os.replace(partial, self.folder / name)
            state = {"epoch": epoch + 1, "model": name, "history": self.history}
            _write_atomically(self.folder / STATE, json.dumps(state))
        except Exception as err:  # a full disk, mostly: what was written of this checkpoint goes, the last stays
            previous = _named(self.folder)
            partial.unlink(missing_ok=True)
            (self.folder / (STATE + ".tmp")).unlink(missing_ok=True)
            if previous is None or previous[1] != name:  # this epoch's model file, complete but named by no state
                (self.folder / name).unlink(missing_ok=True)
            _remove_new_scratch(scratch)
            if not isinstance(err, OSError):
                raise
            _hook_one_line()
            raise _failed(err, self.folder, epoch + 1, previous) from None
        for old in self.folder.glob("epoch-*.keras"):  # keep only the checkpoint state.json names
            if old.name != name:
                old.unlink(missing_ok=True)
