"""The shell scripts run on Linux and on a stock macOS: GNU-only tools are used only through tools/portable.sh,
whose fallbacks (Python, getconf) are checked here by forcing them."""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import path_with_nvidia_smi

REPO = Path(__file__).resolve().parent.parent
PORTABLE = REPO / "tools" / "portable.sh"
MODES = {"native": {}, "fallback": {"COURSE_PORTABLE_FALLBACK": "1"}}


def bash(script: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    import os

    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        ["bash", "-c", f'. "{PORTABLE}"\n{script}'], env=full_env, capture_output=True, text=True, timeout=60, **kw
    )


@pytest.mark.parametrize("mode", MODES)
def test_sha256_hex_matches_hashlib(mode):
    data = b"the course\n\x00\xff"
    out = subprocess.run(
        ["bash", "-c", f'. "{PORTABLE}"; sha256_hex'],
        input=data,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", **MODES[mode]},
        timeout=30,
    )
    assert out.stdout.decode().strip() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("mode", MODES)
def test_with_timeout_stops_a_command_and_returns_124(mode):
    start = time.monotonic()
    out = bash("with_timeout 1 sleep 30; echo rc=$?", MODES[mode])
    assert "rc=124" in out.stdout, out.stderr
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("mode", MODES)
def test_with_timeout_passes_the_exit_status_through(mode):
    out = bash("with_timeout 20 sh -c 'exit 3'; echo rc=$?", MODES[mode])
    assert "rc=3" in out.stdout, out.stderr


@pytest.mark.parametrize("mode", MODES)
def test_cpu_count_is_a_positive_number(mode):
    out = bash("cpu_count", MODES[mode])
    assert int(out.stdout.strip()) >= 1


def test_apple_silicon_gets_the_tensorflow_wheel(tmp_path):
    fake = tmp_path / "uname"
    fake.write_text('#!/bin/sh\ncase "$1" in -s) echo Darwin ;; -m) echo arm64 ;; esac\n')
    fake.chmod(0o755)
    import os

    mac = bash("default_tf_package", {"PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert mac.stdout.strip() == "tensorflow"
    here = bash("default_tf_package").stdout.strip()
    assert here == (
        "tensorflow" if os.uname().sysname == "Darwin" and os.uname().machine == "arm64" else "tensorflow-cpu"
    )
    reqs = tmp_path / "r.txt"
    reqs.write_text("keras==1\ntensorflow-cpu==2.21.0\n")
    assert bash(f"requirements_for tensorflow '{reqs}'").stdout == "keras==1\ntensorflow==2.21.0\n"


GNU_ONLY = {
    r"\bsha256sum\b": "sha256_hex",
    r"(^|[;&|(]\s*|\s)timeout\s": "with_timeout",
    r"\bnproc\b": "cpu_count",
    r"readlink -f": 'cd "$(dirname ...)" && pwd',
    r"\bsed -i(\s|$)": "sed -i.bak (or Python)",
    r"\bdate -d\b": "Python",
    r"\bgrep -P\b": "grep -E",
}


def test_scripts_use_no_gnu_only_tool_directly():
    scripts = [p for p in (*REPO.glob("tools/**/*.sh"), *REPO.glob("scripts/**/*.sh")) if p != PORTABLE]
    assert len(scripts) >= 5
    found = []
    for path in scripts:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
            for pattern, instead in GNU_ONLY.items():
                if re.search(pattern, code):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}  (use {instead})")
    assert not found, "GNU-only tools (missing on a stock macOS):\n" + "\n".join(found)


# --- Which TensorFlow build: nvidia-smi decides, TF_PACKAGE overrides (tools/portable.sh) -------------------------


def choose(tmp_path: Path, nvidia_smi: str | None, **env: str) -> tuple[str, str]:
    """Run the set-up's choice for real (choose_tf_package in bash) with a stand-in nvidia-smi; its package and why."""
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("keras==3.15.1\ntensorflow-cpu==2.21.0\n")
    out = bash(
        f"set -euo pipefail; choose_tf_package '{reqs}'; printf '%s\\n' \"$tf_package\" \"$tf_package_why\"",
        {"PATH": path_with_nvidia_smi(tmp_path / "bin", nvidia_smi), "TF_PACKAGE": "", "WHEELHOUSE": "", **env},
    )
    assert out.returncode == 0, out.stderr
    package, why = out.stdout.split("\n", 1)
    return package, why


@pytest.mark.parametrize("mode", MODES)
def test_a_gpu_listed_by_nvidia_smi_gets_tensorflows_gpu_build(tmp_path, mode):
    package, why = choose(tmp_path, "a10g", **MODES[mode])
    assert package == "tensorflow[and-cuda]"
    assert why.startswith("GPU found by nvidia-smi (NVIDIA A10G): TensorFlow's GPU build, tensorflow[and-cuda]==2.21.0")
    assert "TF_PACKAGE=tensorflow-cpu" in why  # how to keep the CPU build
    assert bash(f"requirements_for '{package}' '{tmp_path / 'requirements.txt'}'").stdout == (
        "keras==3.15.1\ntensorflow[and-cuda]==2.21.0\n"  # the same version: the pin is the one place it lives
    )


def test_several_gpus_are_counted(tmp_path):
    package, why = choose(tmp_path, "4xl4")
    assert package == "tensorflow[and-cuda]" and "(4 x NVIDIA L4)" in why


@pytest.mark.parametrize("mode", MODES)
def test_an_nvidia_smi_that_fails_means_the_cpu_build_and_says_why(tmp_path, mode):
    package, why = choose(tmp_path, "no-driver", **MODES[mode])
    assert package == "tensorflow-cpu"
    first = why.splitlines()[0]
    assert first.startswith("nvidia-smi is installed but failed (exit 9: NVIDIA-SMI has failed because it couldn't")
    assert "TensorFlow's CPU build, tensorflow-cpu==2.21.0" in why and "make env" in why


def test_an_nvidia_smi_that_lists_no_gpu_means_the_cpu_build(tmp_path):
    package, why = choose(tmp_path, "echo 'No devices were found'")
    assert package == "tensorflow-cpu" and "lists no GPU (exit 0: No devices were found)" in why


def test_a_hanging_nvidia_smi_is_given_up_on(tmp_path):
    start = time.monotonic()  # the set-up waits 20 s; the test, 1
    package, why = choose(tmp_path, "sleep 60", COURSE_NVIDIA_SMI_TIMEOUT="1")
    assert package == "tensorflow-cpu" and "failed (exit 124: no answer in 1 s)" in why
    assert time.monotonic() - start < 15


def test_no_nvidia_smi_means_the_cpu_build(tmp_path):
    package, why = choose(tmp_path, None)
    assert package == "tensorflow-cpu"
    assert why == "no NVIDIA GPU here (no nvidia-smi): TensorFlow's CPU build, tensorflow-cpu==2.21.0\n"


def test_tf_package_set_by_the_user_wins_over_a_gpu(tmp_path):
    package, why = choose(tmp_path, "a10g", TF_PACKAGE="tensorflow-cpu")
    assert package == "tensorflow-cpu"
    assert why.startswith("TensorFlow as tensorflow-cpu==2.21.0, as TF_PACKAGE says (nvidia-smi lists NVIDIA A10G)")
    package, _ = choose(tmp_path, None, TF_PACKAGE="tensorflow[and-cuda]")
    assert package == "tensorflow[and-cuda]"


def test_a_wheelhouse_keeps_its_tensorflow_wheel_and_says_what_a_gpu_needs(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "TF_PACKAGE").write_text("tensorflow-cpu\n")
    package, why = choose(tmp_path, "a10g", WHEELHOUSE=str(wheelhouse))
    assert package == "tensorflow-cpu"  # the GPU build's wheels are not in it, and the install is offline
    assert "nvidia-smi lists NVIDIA A10G" in why and "make wheelhouse TF_PACKAGE='tensorflow[and-cuda]'" in why


def fake_distribution(site: Path, name: str, requires: tuple[str, ...] = (), files: tuple[str, ...] = ()) -> None:
    """A distribution as pip installs one (metadata, and a RECORD of its files), with files of a few bytes."""
    info = site / f"{name.replace('-', '_')}-2.21.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 2.21.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    )
    (info / "INSTALLER").write_text("pip\n")
    for f in files:
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text("# stand-in\n")
    record = [*files, *(f"{info.name}/{n}" for n in ("METADATA", "INSTALLER", "RECORD"))]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in record))


def test_switching_builds_removes_the_other_build_first(tmp_path):
    # A real virtual environment (with pip), holding stand-ins of the two builds' distributions: no download.
    import sys

    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )

    def installed() -> set[str]:
        got = subprocess.check_output(
            [py, "-c", "import importlib.metadata as m; print(*(d.metadata['Name'] for d in m.distributions()))"],
            text=True,
        )
        return set(got.split()) - {"pip", "setuptools"}

    fake_distribution(site, "tensorflow-cpu", files=("tensorflow/__init__.py",))
    same = bash(f"switch_tf_build '{py}' tensorflow-cpu")
    assert same.returncode == 0 and same.stdout == "" and installed() == {"tensorflow-cpu"}  # nothing to switch

    to_gpu = bash(f"switch_tf_build '{py}' 'tensorflow[and-cuda]'")
    assert to_gpu.returncode == 0, to_gpu.stderr
    assert "switching TensorFlow builds to tensorflow[and-cuda]: removing tensorflow-cpu first" in to_gpu.stdout
    assert installed() == set() and not (site / "tensorflow" / "__init__.py").exists()

    cuda = ("nvidia-cublas-cu12", "nvidia-cudnn-cu12")
    fake_distribution(
        site,
        "tensorflow",
        requires=(*(f'{n}==9.0; extra == "and-cuda"' for n in (*cuda, "nvidia-nccl-cu12")), "numpy>=1.26"),
        files=("tensorflow/__init__.py",),
    )
    for name in cuda:  # nvidia-nccl-cu12 is not installed: it is left out of the uninstall
        fake_distribution(site, name, files=(f"nvidia/{name}.txt",))
    fake_distribution(site, "numpy")
    to_cpu = bash(f"switch_tf_build '{py}' tensorflow-cpu")
    assert to_cpu.returncode == 0, to_cpu.stderr
    assert "removing tensorflow nvidia-cublas-cu12 nvidia-cudnn-cu12 first" in to_cpu.stdout
    assert installed() == {"numpy"}  # the GPU build and its CUDA libraries are gone; other packages stay
