"""The wheelhouse: every pinned package and the Horovod wheel in one folder, installed with no package index.

Quick tests run in `make test`; building a whole wheelhouse (about 1.3 GB) and a fresh environment from it
with the index disabled runs with `make test-setup` (COURSE_SETUP_TESTS=1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_PY = REPO / ".venv" / "bin" / "python"
SETUP_TESTS = pytest.mark.skipif(
    os.environ.get("COURSE_SETUP_TESTS") != "1", reason="downloads every package (GBs): `make test-setup`"
)


def offline_env(**extra: str) -> dict[str, str]:
    """This environment with pip's configuration files and local indexes switched off: nothing but the wheelhouse."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k not in ("COURSE_VENV", "WHEELHOUSE")}
    env.update(
        {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PYTHON": getattr(sys, "_base_executable", sys.executable)}
    )
    env.update(extra)
    return env


def test_an_incomplete_wheelhouse_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "wh").mkdir()
    out = subprocess.run(
        ["bash", str(REPO / "tools" / "setup_env.sh")],
        env=offline_env(WHEELHOUSE=str(tmp_path / "wh"), COURSE_VENV=str(tmp_path / "venv")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "make wheelhouse" in out.stderr
    assert not (tmp_path / "venv").exists()


def test_the_horovod_wheel_is_copied_into_a_wheelhouse_under_its_cache_key(tmp_path):
    out = subprocess.run(
        ["bash", str(REPO / "tools" / "build_horovod.sh"), str(VENV_PY), "--wheel-to", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "compiling Horovod" in out.stdout:
        pytest.skip("no cached Horovod wheel here for the current recipe (a build takes minutes)")
    assert out.returncode == 0, out.stderr
    wheels = list(tmp_path.glob("horovod/horovod-*-tf*-cp311-*-r*/horovod-*.whl"))
    assert len(wheels) == 1, out.stdout
    from utils import envinfo

    assert f"-tf{envinfo.versions()['TensorFlow']}-" in wheels[0].parent.name


@SETUP_TESTS
def test_a_fresh_environment_installs_from_the_wheelhouse_with_no_index(tmp_path):
    wheelhouse, venv = tmp_path / "wheelhouse", tmp_path / "venv"
    subprocess.run(["bash", str(REPO / "tools" / "wheelhouse.sh"), str(wheelhouse)], check=True, timeout=1800)
    assert (wheelhouse / "COMPLETE").exists() and list(wheelhouse.glob("tensorflow_cpu-*.whl"))
    env = offline_env(WHEELHOUSE=str(wheelhouse), COURSE_VENV=str(venv), COURSE_CACHE_DIR=str(tmp_path / "no-cache"))
    out = subprocess.run(
        ["bash", str(REPO / "tools" / "setup_env.sh")], env=env, capture_output=True, text=True, timeout=1800
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "using the wheelhouse's wheel" in out.stdout and "compiling Horovod" not in out.stdout
    check = "import tensorflow, horovod.tensorflow as hvd, sagemaker; assert hvd.gloo_built()"
    subprocess.run([str(venv / "bin" / "python"), "-c", check], env=env, check=True, timeout=300)
