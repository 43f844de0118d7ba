"""The ranks the launcher starts import TensorFlow and Keras without the packages utils/rank_imports.py lists, and can
still import them themselves; every process of the environment imports jsonschema without the package
utils/startup_imports.py lists."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from utils import launch, rank_imports, startup_imports

PROBE = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf, keras
    with_keras = sorted(m for m in ("IPython", "jax", "matplotlib", "pandas", "scipy", "sklearn") if m in sys.modules)
    import pandas as pd
    frame = pd.DataFrame({"a": [1.0] * 8, "b": [2.0] * 8, "c": [3.0] * 8})
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    loss = model.fit(frame, np.ones((8, 1)), verbose=0).history["loss"][-1]  # Keras takes a DataFrame
    import jax, matplotlib.pyplot, sklearn  # the rank's own imports
    mine = {"sklearn": sklearn.__version__, "jax": jax.__version__}
    print("RESULT " + json.dumps({"with_keras": with_keras, "loss": float(loss), **mine}))
    """
)


def test_a_launched_rank_leaves_the_extras_out_and_a_rank_with_the_variable_at_0_does_not(tmp_path, monkeypatch):
    monkeypatch.delenv(rank_imports.VAR, raising=False)  # the launcher's default, whatever this shell says
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    lean = launch.worker_env(1)
    as_installed = {**lean, rank_imports.VAR: "0"}  # one run: both carry the same marker
    run = launch.run_workers(
        [[sys.executable, str(probe)]] * 2,
        [lean, as_installed],
        timeout=120,
        run_id=lean[launch.RUN_MARKER],
        stream=False,
    )
    lean_rank, full_rank = (w.output for w in run.workers)
    got = run.records()  # in worker order
    assert len(got) == 2, (lean_rank, full_rank)
    lean_result, full_result = got
    assert lean_result["with_keras"] == ["pandas"], lean_rank  # Keras keeps pandas: fit takes a DataFrame
    # TF and Keras as installed import all six: were that no longer so, the hook would have that much less to do.
    assert full_result["with_keras"] == ["IPython", "jax", "matplotlib", "pandas", "scipy", "sklearn"], full_rank
    assert (lean_result["sklearn"], lean_result["jax"]) == (full_result["sklearn"], full_result["jax"])  # its own
    assert all(math.isfinite(r["loss"]) for r in got), got  # Keras trained in both, on a DataFrame


def test_the_hook_refuses_each_package_only_to_the_modules_named_for_it(monkeypatch):
    finder = rank_imports.ExtrasLeftOut()

    def refused(importer: str, name: str, backend: str | None = "tensorflow") -> bool:
        monkeypatch.setattr(rank_imports, "_importer", lambda: importer)
        if backend is None:  # Keras's backend not chosen yet
            monkeypatch.delitem(sys.modules, "keras.src.backend.config", raising=False)
        else:
            monkeypatch.setitem(sys.modules, "keras.src.backend.config", SimpleNamespace(backend=lambda: backend))
        try:
            assert finder.find_spec(name) is None
        except ModuleNotFoundError as err:
            assert err.name == name and rank_imports.VAR in str(err)
            return True
        return False

    keras = "keras.src.trainers.data_adapters.array_slicing"
    for name in ("sklearn", "matplotlib", "matplotlib.pyplot"):
        assert refused(keras, name), f"{name} imported by Keras was not refused"
    assert not any(refused(keras, name) for name in ("pandas", "numpy", "scipy", "requests", "IPython", "jax"))
    assert refused("keras.src.saving.file_editor", "IPython")
    orbax = "keras.src.callbacks.orbax_checkpoint"
    assert refused(orbax, "jax") and refused(orbax, "jax.numpy")
    for backend in ("jax", "numpy", None):  # None: Keras's backend not chosen yet
        assert not refused(orbax, "jax", backend=backend), f"Keras on {backend} may need JAX"
    assert not refused("keras.src.utils.module_utils", "jax"), "keras.layers.JaxLayer's own import"
    assert refused("tensorflow.lite.python.util", "jax") and refused("tensorflow.python.keras.engine.x", "scipy")
    assert refused("tensorflow.lite.python.util", "jax", backend="jax")  # TF Lite's JAX converter is never a rank's
    for importer in ("tensorflow.python.ops.math_ops", "tensorflow.litex", "tensorflow.python.keras_x", "__main__"):
        assert not any(refused(importer, name) for name in ("jax", "scipy", "sklearn", "IPython")), importer


def test_the_courses_pth_installs_the_hook_at_start_up_only_where_the_variable_asks(tmp_path):
    code = "import sys; print([type(f).__name__ for f in sys.meta_path].count('ExtrasLeftOut'))"
    answers = {}
    for value in ("1", "0", None):
        env = {k: v for k, v in launch.worker_env(1).items() if k != rank_imports.VAR}
        if value is not None:
            env[rank_imports.VAR] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
        answers[value] = out.stdout.strip()
    assert answers == {"1": "1", "0": "0", None: "0"}, (
        f"hooks installed by variable: {answers}; an environment made before the hook needs `make env` (a conda "
        "environment: python tools/link_utils.py)"
    )


JSONSCHEMA_PROBE = textwrap.dedent(
    """
    import json, sys
    import jsonschema
    at_start = {"grammar": "rfc3987_syntax" in sys.modules, "iri": "iri" in jsonschema.FormatChecker().checkers}
    import rfc3987_syntax  # a learner's own import
    print(json.dumps({**at_start, "own": rfc3987_syntax.is_valid_syntax("iri", "https://example.com/ä")}))
    """
)


def test_jsonschema_starts_without_its_iri_grammar_anyone_else_imports_it_and_the_variable_at_0_keeps_it():
    """utils/startup_imports.py, installed by a .pth file of the course's in every process of the environment (an
    environment made before it: `make env` installs it). Were the GPL package `rfc3987` installed, jsonschema would
    check the formats with it instead: it is not in the course's pins."""

    def probe(**env: str) -> dict:
        base = {k: v for k, v in os.environ.items() if k not in (rank_imports.VAR, startup_imports.VAR)}
        run = subprocess.run(
            [sys.executable, "-c", JSONSCHEMA_PROBE], env=base | env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    assert probe() == {"grammar": False, "iri": False, "own": True}, "no startup hook here: run make env"
    assert probe(**{rank_imports.VAR: "1"}) == {"grammar": False, "iri": False, "own": True}  # a rank, the same
    assert probe(**{rank_imports.VAR: "0"}) == {"grammar": False, "iri": False, "own": True}  # that one is the ranks'
    assert probe(**{startup_imports.VAR: "0"}) == {"grammar": True, "iri": True, "own": True}


def test_the_environments_copy_of_the_startup_hook_is_this_checkouts():
    """tools/link_utils.py copies utils/startup_imports.py into site-packages (`make env` does it, every run): a copy
    older than the checkout would refuse what the checkout no longer does, or the reverse."""
    import distributed_training_course_startup as installed

    assert Path(installed.__file__).read_text() == Path(startup_imports.__file__).read_text(), "run make env"
