"""The environment's pins live in one place, and environment.yml follows them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import path_with_nvidia_smi

REPO = Path(__file__).resolve().parent.parent


def requirement_pins() -> dict[str, str]:
    """Package name -> full pin line, from requirements.txt (comments skipped)."""
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert "==" in line, f"requirements.txt: '{line}' is not pinned with =="
        name = re.split(r"[\[=]", line, maxsplit=1)[0].lower()
        assert name not in pins, f"requirements.txt pins {name} twice"
        pins[name] = line
    return pins


def test_every_requirement_is_pinned_exactly_once():
    pins = requirement_pins()
    for must in ("tensorflow-cpu", "keras", "sagemaker", "moto", "jupyterlab", "nbclient", "portpicker"):
        assert must in pins, f"{must} is missing from requirements.txt"


def test_horovod_build_pin_is_present():
    text = (REPO / "requirements.txt").read_text()
    assert re.search(r"^#build: horovod==\d+\.\d+\.\d+$", text, re.M), "the '#build: horovod==' line is missing"


def test_environment_yml_matches_requirements():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    conda_pins = [d for d in deps if isinstance(d, str) and not d.startswith("python=")]
    pins = requirement_pins()
    tools = {k: v for k, v in pins.items() if k in ("pip", "setuptools", "wheel")}
    others = {k: v for k, v in pins.items() if k not in tools}
    assert sorted(conda_pins) == sorted(tools.values()), (
        "environment.yml's pip/setuptools/wheel differ from requirements.txt"
    )
    assert sorted(pip_section) == sorted(others.values()), (
        "environment.yml's pip section differs from requirements.txt: "
        f"only in environment.yml {sorted(set(pip_section) - set(others.values()))}, "
        f"only in requirements.txt {sorted(set(others.values()) - set(pip_section))}"
    )


def test_environment_yml_and_build_script_agree_on_python():
    setup = (REPO / "tools" / "setup_env.sh").read_text()
    assert "(3, 11)" in setup
    assert "python=3.11" in (REPO / "environment.yml").read_text()


def print_tf_package(tmp_path: Path, nvidia_smi: str | None, **env: str) -> subprocess.CompletedProcess:
    """tools/setup_env.sh --print-tf-package (the package it would install; nothing installed) with a stand-in
    nvidia-smi (conftest.NVIDIA_SMI) or none."""
    drop = ("TF_PACKAGE", "WHEELHOUSE", "COURSE_PORTABLE_FALLBACK")
    full = {k: v for k, v in os.environ.items() if k not in drop}
    full |= {"PATH": path_with_nvidia_smi(tmp_path / "bin", nvidia_smi), **env}
    return subprocess.run(
        ["bash", str(REPO / "tools" / "setup_env.sh"), "--print-tf-package"],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "nvidia_smi, env, package",
    [
        ("a10g", {}, "tensorflow[and-cuda]"),  # a GPU: TensorFlow's GPU build
        ("no-driver", {}, "tensorflow-cpu"),  # nvidia-smi without a working driver: the CPU build
        (None, {}, "tensorflow-cpu"),  # no nvidia-smi: the CPU build
        ("a10g", {"TF_PACKAGE": "tensorflow-cpu"}, "tensorflow-cpu"),  # the learner's choice wins
    ],
)
def test_the_setup_installs_the_gpu_build_where_nvidia_smi_lists_a_gpu_at_the_pinned_version(
    tmp_path, nvidia_smi, env, package
):
    if package == "tensorflow-cpu" and os.uname().sysname == "Darwin" and os.uname().machine == "arm64":
        package = "tensorflow"  # tensorflow-cpu has no wheels there
    out = print_tf_package(tmp_path, nvidia_smi, **env)
    assert out.returncode == 0, out.stderr
    # One version for every build: tensorflow-cpu's pin in requirements.txt.
    assert out.stdout == f"{package}=={requirement_pins()['tensorflow-cpu'].split('==')[1]}\n"
    assert out.stderr.startswith("[setup] ") and package in out.stderr  # which build, and why, in words


def test_the_setup_refuses_an_unknown_tensorflow_package(tmp_path):
    out = print_tf_package(tmp_path, None, TF_PACKAGE="tensorflow-gpu")
    assert out.returncode == 1 and "TF_PACKAGE=tensorflow-gpu is not one of" in out.stderr and not out.stdout


def pip_to_uv(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [REPO / ".venv/bin/python", REPO / "tools/pip_to_uv.py"], env=env, capture_output=True, text=True, check=True
    )


def test_uv_is_told_the_package_sources_pip_is_configured_with(tmp_path):
    """tools/pip_to_uv.py asks pip's own `pip install` options (files and PIP_* variables, pip's precedence) and names
    the same sources to uv; a folder of links that does not exist is left out, as pip only warns about it."""
    (tmp_path / "wheels").mkdir()
    conf = tmp_path / "pip.conf"  # [install] over [global], as pip reads them for pip install
    conf.write_text(
        "[global]\nindex-url = https://global.example/simple\nfind-links = /nowhere\n"
        "[install]\nindex-url = https://install.example/simple\nextra-index-url = file:///srv/a\n  file:///srv/b\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": str(conf), "XDG_CONFIG_DIRS": str(tmp_path / "none")}  # not this machine's own files
    assert pip_to_uv(env).stdout.split() == [
        *("--no-config", "--index-url", "https://install.example/simple"),
        *("--extra-index-url", "file:///srv/a", "--extra-index-url", "file:///srv/b"),
        *("--index-strategy", "unsafe-best-match"),
    ]
    env |= {  # a variable over any file
        "PIP_INDEX_URL": "https://env.example/simple",
        "PIP_FIND_LINKS": f"{tmp_path / 'wheels'} /nowhere",
        "PIP_NO_INDEX": "yes",
        "PIP_CONSTRAINT": "/srv/constraints.txt",
        "PIP_TRUSTED_HOST": "mirror.example",
    }
    assert pip_to_uv(env).stdout.split() == [
        *("--no-config", "--no-index", "--index-url", "https://env.example/simple"),
        *("--extra-index-url", "file:///srv/a", "--extra-index-url", "file:///srv/b"),
        *("--find-links", str(tmp_path / "wheels"), "--constraint", "/srv/constraints.txt"),
        *("--allow-insecure-host", "mirror.example", "--index-strategy", "unsafe-best-match"),
    ]
    bare = {k: v for k, v in env.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    assert pip_to_uv(bare).stdout == "--no-config\n--index-url\nhttps://pypi.org/simple\n"  # no blank line


VENV_PY = REPO / ".venv" / "bin" / "python"


def horovod_script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO / "tools" / "build_horovod.sh"), str(VENV_PY), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        # A guard against a hang, not a speed check: loading Horovod imports TensorFlow, and beside CI's other work on
        # a slow 2-core machine one call took over 120 s (2026-11-30); pytest-timeout bounds the whole test at 300 s.
        timeout=240,
    )


def test_a_horovod_check_passed_for_the_same_environment_is_not_run_again_and_a_new_package_changes_that(tmp_path):
    """The 2-rank checks of tools/build_horovod.sh are noted under the cache by a hash of what they depend on: with
    that note there, the script loads Horovod in one process, says so and starts no rank; a package more in the
    environment is another hash."""
    has_horovod = subprocess.run(
        [str(VENV_PY), "-c", "import importlib.metadata as m; m.version('horovod')"], capture_output=True
    )
    if has_horovod.returncode:
        pytest.skip("Horovod is not installed in .venv")
    env = {k: v for k, v in os.environ.items() if k != "COURSE_RECHECK_HOROVOD"}
    env |= {"COURSE_CACHE_DIR": str(tmp_path / "cache"), "COURSE_CACHED_ONLY": "1"}  # never a build, whatever happens
    key = horovod_script("--proof-key", env=env).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{16}", key), key
    extra = tmp_path / "site"  # an environment with one package more (importlib.metadata reads it from sys.path)
    (extra / "newcomer-1.0.dist-info").mkdir(parents=True)
    (extra / "newcomer-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: newcomer\nVersion: 1.0\n")
    assert horovod_script("--proof-key", env=env | {"PYTHONPATH": str(extra)}).stdout.strip() != key
    (tmp_path / "cache" / "proved").mkdir(parents=True)
    (tmp_path / "cache" / "proved" / key).write_text("2026-11-30 08:00 UTC\n")
    done = horovod_script(env=env)
    assert done.returncode == 0, done.stderr
    assert "OK: Horovod loads" in done.stdout and "checks on 2026-11-30 08:00 UTC" in done.stdout, done.stdout
    assert "checking the build" not in done.stdout, done.stdout
