"""Shared test settings: tests that need Horovod skip where it could not be built, except in CI."""

from __future__ import annotations

import os

import pytest

from utils import launch

HOROVOD, WHY_NOT = launch.horovod_available()
#: CI (CI=true, as .ci/run sets) and COURSE_REQUIRE_HOROVOD=1 must have Horovod: its tests run there and fail.
HOROVOD_REQUIRED = os.environ.get("CI") == "true" or os.environ.get("COURSE_REQUIRE_HOROVOD") == "1"
needs_horovod = pytest.mark.skipif(not HOROVOD and not HOROVOD_REQUIRED, reason=WHY_NOT)


@pytest.fixture
def no_aws_credentials(monkeypatch, tmp_path):
    """No AWS credentials anywhere boto3 looks: variables, config files or an instance's metadata service."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


#: Stand-ins for NVIDIA's `nvidia-smi -L` (shell lines, printing what it prints, with its exit status): a g5 instance
#: (one A10G), a 4-GPU instance, and a machine whose NVIDIA driver is missing or broken.
NVIDIA_SMI = {
    "a10g": 'echo "GPU 0: NVIDIA A10G (UUID: GPU-5f3c2a1e-0b7d-4c1e-9a43-1f2e3d4c5b6a)"',
    "4xl4": 'for i in 0 1 2 3; do echo "GPU $i: NVIDIA L4 (UUID: GPU-0000000$i-aaaa-bbbb-cccc-dddddddddddd)"; done',
    "no-driver": (
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        'latest NVIDIA driver is installed and running."; exit 9'
    ),
}


def path_with_nvidia_smi(folder, nvidia_smi: str | None) -> str:
    """PATH with a stand-in nvidia-smi first (an executable in `folder` that runs the shell line `nvidia_smi`, a key of
    NVIDIA_SMI or a line of its own, when called with -L), or, for None, with no nvidia-smi at all (every folder
    holding a real one left out)."""
    from pathlib import Path

    rest = [p for p in os.environ["PATH"].split(os.pathsep) if p and not (Path(p) / "nvidia-smi").exists()]
    if nvidia_smi is None:
        return os.pathsep.join(rest)
    Path(folder).mkdir(parents=True, exist_ok=True)
    smi = Path(folder) / "nvidia-smi"
    line = NVIDIA_SMI.get(nvidia_smi, nvidia_smi)
    smi.write_text(f'#!/bin/sh\n[ "$1" = -L ] || {{ echo "expected -L, got $*" >&2; exit 2; }}\n{line}\n')
    smi.chmod(0o755)
    return os.pathsep.join([str(folder), *rest])


def _cpu_seconds() -> float:
    import resource

    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With COURSE_TEST_CPU=FILE, each test's CPU seconds (its own and those of the processes it started and
    waited for; setup and teardown included) are appended to FILE as `seconds<TAB>test id`: on a 2-core machine
    the CPU a test takes, not its wall time, decides how long the whole suite runs."""
    record = os.environ.get("COURSE_TEST_CPU")
    before = _cpu_seconds() if record else 0.0
    result = yield
    if record:
        with open(record, "a") as out:
            out.write(f"{_cpu_seconds() - before:.2f}\t{item.nodeid}\n")
    return result
