"""Helpers shared by the course notebooks: data, models, launching workers, checks."""

import os
import sys

# Quiet TensorFlow's start-up chatter (C++ INFO and WARNING lines) in notebooks and their workers;
# errors still show. Set TF_CPP_MIN_LOG_LEVEL=0 before importing utils to see everything.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# With TensorFlow's GPU build (installed where nvidia-smi lists a GPU), each TensorFlow process would reserve nearly
# all of a GPU's memory at its first operation, and a second lesson's kernel would find none left. Memory as needed
# instead; the workers that the launcher starts run on the CPU anyway (utils/launch.py: CUDA_VISIBLE_DEVICES=-1).
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

#: Lines TensorFlow prints while it starts, whatever TF_CPP_MIN_LOG_LEVEL says (they come before its
#: logging is set up). The launcher hides them from workers' output; notebooks import TensorFlow quietly.
TF_STARTUP_NOISE = (
    "absl::InitializeLog",
    "cpu_feature_guard",
    "To enable the following instructions",
    "oneDNN custom operations",
    "TF_ENABLE_ONEDNN_OPTS",
    "Unable to register cu",
    "computation placer already registered",
    "could not find cuda drivers",
)


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow with its start-up lines hidden; any other line it prints (an error) still shows."""
    import tempfile  # here, not above: a command of the course (python -m utils.workspace) starts sooner

    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        for line in captured.read().decode(errors="replace").splitlines():
            if line.strip() and not any(noise in line for noise in TF_STARTUP_NOISE):
                print(line, file=sys.stderr)


# In a notebook (an IPython kernel), TensorFlow's start-up lines would appear under the first cell that
# imports it: import it now, quietly. Importing does not start its runtime, so devices can still be configured.
if "ipykernel" in sys.modules and "tensorflow" not in sys.modules:
    # The import takes seconds: say so, so that the lesson's first cell does not sit silent meanwhile.
    print("Loading TensorFlow ...", flush=True)
    from utils import heartbeat

    try:
        with heartbeat.stream(False, every=5.0, says=lambda s: f"  ... still loading TensorFlow ({s:.0f} s)"):
            _import_tensorflow_quietly()
    except ImportError:
        pass  # the lessons that need TensorFlow say so themselves

# In a notebook, every figure shown carries what it draws and the findings its title states (utils.figures), for
# the JupyterLab check to hold a title to its plot's data.
if "ipykernel" in sys.modules:
    from utils import figures as _figures

    _figures.install()
