"""The ranks the course starts import Keras without two packages it loads for helpers a training rank has no use for.

`import tensorflow` imports Keras 3, and Keras imports matplotlib (for `keras.visualization`'s plots) and scikit-learn
(for the estimators of `keras.wrappers`) whenever they are installed, as they are in this course's environment. The
course's ranks call neither, and every rank of every launch pays for both: `import tensorflow` took 8.3 CPU-s with
them and 6.1 without them (user + system, mean of five of each, alternating, on the 2-core AMD EPYC machine that
runs the course's checks, nothing else running, 2026-11-26). Where `COURSE_LEAN_RANKS=1` is set (the launcher sets it
for the processes it starts, `launch.worker_env`, and the network lab's sshd for the ranks mpirun starts through it),
an import hook refuses those two packages *to Keras's own modules only*: Keras was written for their absence
(`try: import sklearn except ImportError`) and goes on without them. The rank's own code can still import either; only
Keras's plotting helpers and its scikit-learn wrappers are then missing in that rank (COURSE_LEAN_RANKS=0 in the
launching process's environment keeps Keras whole). pandas, which Keras imports too, stays: without it `fit` would
refuse a DataFrame, and the course's forecaster ranks import it anyway.
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
LEFT_OUT = frozenset({"matplotlib", "sklearn"})
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
    # by name: site may run the .pth line twice (a venv's lib64 links to lib), each run with a class of its own
    if not any(type(f).__name__ == KerasExtrasLeftOut.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, KerasExtrasLeftOut())
