"""The ranks the course starts import TensorFlow without three packages it loads for helpers a rank has no use for.

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

JAX is the third (it is in this environment for Keras 3 on JAX): `import tensorflow` imports it twice over, where it
is installed, for what a rank on TensorFlow never calls. TensorFlow Lite's `util` module imports `jax.jit` for
`tf.lite`'s JAX converter, and Keras's Orbax checkpoint callback imports JAX for its metrics (both `try: import jax
except ImportError`). The hook refuses JAX to `tensorflow.lite`'s modules, and to Keras's once Keras's backend is
TensorFlow (never where Keras runs on JAX, as lesson 05's `train_keras_jax.py` does). That import took 0.76 s of
`import tensorflow`'s 5.3 s (`python -X importtime`, with the two above left out, 2026-11-30).
"""

from __future__ import annotations

import importlib.abc
import os
import sys

#: The environment variable that asks for the hook (set to "1").
VAR = "COURSE_LEAN_RANKS"
#: The packages refused to Keras's modules, by their top-level name.
LEFT_OUT = frozenset({"matplotlib", "sklearn"})
#: What is refused, by the importing module's package: {package, or its dotted prefix: top-level names refused}.
#: JAX is refused to Keras only where Keras's backend is not JAX (`_keras_on_jax`).
REFUSED = {"keras": LEFT_OUT | {"jax"}, "tensorflow.lite": frozenset({"jax"})}
_MACHINERY = ("importlib._bootstrap", "importlib._bootstrap_external", "importlib")


def _keras_on_jax() -> bool:
    """Whether Keras runs, or may yet run, on JAX: its backend is not chosen yet, or is JAX."""
    config = sys.modules.get("keras.src.backend.config")
    return config is None or config.backend() == "jax"


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
    """Refuses REFUSED's packages to the modules that import them there (LEFT_OUT to Keras's, and JAX to Keras's
    on TensorFlow and to TensorFlow Lite's); every other import goes on as usual."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if not any(top in names for names in REFUSED.values()):  # the usual case: no frame walk
            return None
        importer = _importer()
        for package, names in REFUSED.items():
            if top not in names or not (importer == package or importer.startswith(package + ".")):
                continue
            if not (package == "keras" and top == "jax" and _keras_on_jax()):
                raise ModuleNotFoundError(f"{fullname} is left out of {package} in this rank ({VAR}=1)", name=fullname)
        return None


def for_ranks() -> dict[str, str]:
    """The variable for a rank's environment: "1", unless this process's environment sets it (0 keeps Keras whole)."""
    return {VAR: os.environ.get(VAR, "1")}


def install() -> None:
    """Put the hook first among the import finders (once)."""
    # by name: site may run the .pth line twice (a venv's lib64 links to lib), each run with a class of its own
    if not any(type(f).__name__ == KerasExtrasLeftOut.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, KerasExtrasLeftOut())
