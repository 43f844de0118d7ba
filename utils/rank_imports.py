"""The ranks the course starts import Keras without the three packages it loads for helpers a rank never calls.

`import tensorflow` imports Keras 3, and Keras imports matplotlib (for `keras.visualization`'s plots), pandas (so
that `fit` accepts a DataFrame) and scikit-learn (for the estimators of `keras.wrappers`) whenever they are
installed, as they are in this course's environment. A training rank calls none of them, and they cost every rank
of every launch a third of its `import tensorflow` (on the 2-core machine that runs the course's checks, 7.7 CPU-s
with them and 5.1 without, mean of five imports each, 2026-11-26).

Where `COURSE_LEAN_RANKS=1` is set (the launcher sets it for the processes it starts, `launch.worker_env`, and the
network lab's sshd for the ranks mpirun starts through it), an import hook refuses those three packages *to Keras's
own modules only*: Keras was written for their absence (`try: import pandas except ImportError`) and goes on
without them. The rank's own code can still import any of
them; only Keras's DataFrame input, plotting helpers and scikit-learn wrappers are then missing in that rank.
`horovodrun` or `mpirun` typed in a terminal starts ranks without the variable, with Keras as installed. The hook is
installed at interpreter start-up by the course's `.pth` file (tools/link_utils.py), before the rank's first line.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

#: The environment variable that asks for the hook (set to "1").
VAR = "COURSE_LEAN_RANKS"
#: The packages refused to Keras's modules, by their top-level name.
LEFT_OUT = frozenset({"matplotlib", "pandas", "sklearn"})
_MACHINERY = ("importlib._bootstrap", "importlib._bootstrap_external", "importlib")


def _importer() -> str:
    """The module whose code is running the import being looked up (past the import machinery's frames)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name not in _MACHINERY and name != __name__:
            return name
        frame = frame.f_back
    return ""


class KerasExtrasLeftOut(importlib.abc.MetaPathFinder):
    """Refuses LEFT_OUT's packages when a Keras module imports them; every other import goes on as usual."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in LEFT_OUT and _importer().partition(".")[0] == "keras":
            raise ModuleNotFoundError(f"{fullname} is left out of Keras in this rank ({VAR}=1)", name=fullname)
        return None


def for_ranks() -> dict[str, str]:
    """The variable for a rank's environment: "1", unless this process's environment sets it (0 keeps Keras whole)."""
    return {VAR: os.environ.get(VAR, "1")}


def install() -> None:
    """Put the hook first among the import finders (once)."""
    if not any(isinstance(f, KerasExtrasLeftOut) for f in sys.meta_path):
        sys.meta_path.insert(0, KerasExtrasLeftOut())
