"""The ranks the course starts import TensorFlow without five packages it loads for helpers a rank has no use for.

`import tensorflow` imports Keras 3 and TensorFlow's own older Keras (`tensorflow.python.keras`), and they import, when
they are installed, as they are in this course's environment:

| package | imported by | for |
|---|---|---|
| matplotlib | Keras (`keras.*`) | `keras.visualization`'s plots |
| scikit-learn | Keras (`keras.*`) | the estimators of `keras.wrappers` |
| IPython | `keras.src.saving.file_editor` | Keras's file editor, for notebooks |
| JAX | `keras.src.callbacks.orbax_checkpoint` | Keras's Orbax callback |
| JAX | TensorFlow Lite (`tensorflow.lite.*`) | `tf.lite`'s JAX converter |
| SciPy | TensorFlow's older Keras (`tensorflow.python.keras.*`) | sparse inputs to its training loops |

The course's ranks call none of them, and every rank of every launch pays for all of them. CPU time (user + system)
of `COURSE_LEAN_RANKS=... python -c "import tensorflow"`, on the 2-core AMD EPYC machine that runs the course's checks,
nothing else running, 2026-11-30, each set below in turn, six rounds (mean, and the range of the six):
- nothing refused (COURSE_LEAN_RANKS=0): 7.3 CPU-s (5.9 to 9.2);
- matplotlib and scikit-learn refused: 5.5 (5.0 to 6.6);
- and JAX: 4.8 (4.0 to 5.1);
- and IPython and SciPy (all five, as the ranks run): 4.5 (3.6 to 5.3).

Where `COURSE_LEAN_RANKS=1` is set (the launcher sets it for the processes it starts, `launch.worker_env`, and the
network lab's sshd for the ranks mpirun starts through it), an import hook refuses each package *to the modules named
in the table only*: each import there is written for the package's absence (`try: import sklearn except ImportError`)
and goes on without it. The rank's own code can still import any of them; only those helpers are then missing in that
rank (COURSE_LEAN_RANKS=0 in the launching process's environment keeps them). JAX is refused to Keras's Orbax callback
only where Keras's backend is TensorFlow: Keras on JAX (lesson 05's `train_keras_jax.py`) has imported it by then.
pandas, which Keras imports too, stays: without it `fit` would refuse a DataFrame, and the course's forecaster ranks
import it anyway. `requests`, which TensorFlow's preemption handler imports without a fallback, stays too.
`horovodrun` or `mpirun` typed in a terminal starts ranks without the variable, with everything imported as installed.
The hook is installed at interpreter start-up by the course's `.pth` file (tools/link_utils.py), before the rank's
first line.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

#: The environment variable that asks for the hook (set to "1").
VAR = "COURSE_LEAN_RANKS"
#: What is refused, by the importing module (or package, for its modules too): the top-level names refused to it.
#: JAX is refused to Keras's Orbax callback only where Keras's backend is TensorFlow (`_keras_on_tensorflow`).
REFUSED = {
    "keras": frozenset({"matplotlib", "sklearn"}),
    "keras.src.saving.file_editor": frozenset({"IPython"}),
    "keras.src.callbacks.orbax_checkpoint": frozenset({"jax"}),
    "tensorflow.lite": frozenset({"jax"}),
    "tensorflow.python.keras": frozenset({"scipy"}),
}
_MACHINERY = ("importlib._bootstrap", "importlib._bootstrap_external", "importlib")


def _keras_on_tensorflow() -> bool:
    """Whether Keras's backend is chosen, and is TensorFlow."""
    config = sys.modules.get("keras.src.backend.config")
    return config is not None and config.backend() == "tensorflow"


def _importer() -> str:
    """The module whose code is running the import being looked up (past the import machinery's frames)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name not in _MACHINERY and name != __name__:
            return name
        frame = frame.f_back
    return ""


class ExtrasLeftOut(importlib.abc.MetaPathFinder):
    """Refuses REFUSED's packages to the modules it names them for; every other import goes on as usual."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if not any(top in names for names in REFUSED.values()):  # the usual case: no frame walk
            return None
        importer = _importer()
        for package, names in REFUSED.items():
            if top not in names or not (importer == package or importer.startswith(package + ".")):
                continue
            if top == "jax" and package.startswith("keras") and not _keras_on_tensorflow():
                continue  # Keras on another backend: JAX's may need it
            raise ModuleNotFoundError(f"{fullname} is left out of {package} in this rank ({VAR}=1)", name=fullname)
        return None


def for_ranks() -> dict[str, str]:
    """The variable for a rank's environment: "1", unless this process's environment sets it (0 keeps Keras whole)."""
    return {VAR: os.environ.get(VAR, "1")}


def install() -> None:
    """Put the hook first among the import finders (once)."""
    # by name: site may run the .pth line twice (a venv's lib64 links to lib), each run with a class of its own
    if not any(type(f).__name__ == ExtrasLeftOut.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, ExtrasLeftOut())
