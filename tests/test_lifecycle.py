"""The SageMaker notebook instance lifecycle scripts, run against a temporary home laid out like an instance's
(/home/ec2-user/SageMaker is $TMP/home/SageMaker; without conda, the course's own Python 3.11 stands in for
the Python that conda would make there).

The quick tests run in `make test`. The first and second start with a real environment (a full install,
minutes) run with `make test-setup` (COURSE_SETUP_TESTS=1): the first start builds everything under
~/SageMaker and takes the Horovod wheel from a cache seeded with this machine's cached wheel (no compile);
the second start, after the stop has erased everything outside ~/SageMaker, must reuse it all in seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from utils import processes

REPO = Path(__file__).resolve().parent.parent
LIFECYCLE = REPO / "tools" / "sagemaker_lifecycle"
SETUP_TESTS = pytest.mark.skipif(
    os.environ.get("COURSE_SETUP_TESTS") != "1", reason="a full environment install (minutes): `make test-setup`"
)
MARK = "COURSE_LIFECYCLE_TEST"


def instance_home(tmp_path: Path, with_course: bool = True) -> tuple[Path, dict[str, str]]:
    """A home like a notebook instance's, with the course in ~/SageMaker, and the environment to run the scripts in."""
    home = tmp_path / "home"
    (home / "SageMaker").mkdir(parents=True)
    if with_course:
        (home / "SageMaker" / "distributed-training-course").symlink_to(REPO)
    drop = ("JUPYTER_PATH", "JUPYTER_DATA_DIR", "XDG_CACHE_HOME", "XDG_DATA_HOME", "COURSE_VENV", "WHEELHOUSE")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("COURSE_CACHE")}
    env.update(
        {
            "HOME": str(home),
            "COURSE_NB_USER": os.environ.get("USER")
            or subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip(),
            "COURSE_SAGEMAKER_DIR": str(home / "SageMaker"),
            "COURSE_PYTHON": getattr(sys, "_base_executable", sys.executable),
            MARK: uuid.uuid4().hex,
        }
    )
    return home, env


def run_hook(name: str, env: dict[str, str]) -> float:
    """Run a lifecycle script as SageMaker does (bash, as root or the user here) and return its seconds."""
    start = time.monotonic()
    subprocess.run(["bash", str(LIFECYCLE / name)], env=env, check=True, timeout=300, capture_output=True)
    return time.monotonic() - start


def wait_for_status(state: Path, env: dict[str, str], limit: float) -> tuple[str, float]:
    """Wait for the background set-up to report ready or failed; return the status and the seconds waited."""
    start = time.monotonic()
    try:
        while time.monotonic() - start < limit:
            status = (state / "status").read_text().split()[0] if (state / "status").exists() else ""
            if status in ("ready", "failed"):
                return status, time.monotonic() - start
            time.sleep(0.5)
        return "timeout", time.monotonic() - start
    finally:
        processes.stop_marked(MARK, env[MARK])  # nothing of the set-up outlives the test, nor what it starts meanwhile


def test_the_scripts_fit_sagemakers_limit_and_name_the_log():
    for name in ("on-create.sh", "on-start.sh"):
        text = (LIFECYCLE / name).read_text()
        assert text.startswith("#!/bin/bash\n")
        assert len(text) <= 16384, f"{name} is longer than a lifecycle script may be (16384 characters)"
    assert "nohup" in (LIFECYCLE / "on-start.sh").read_text()


def test_on_start_without_a_course_does_nothing_and_succeeds(tmp_path):
    home, env = instance_home(tmp_path, with_course=False)
    out = subprocess.run(["bash", str(LIFECYCLE / "on-start.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "no course found" in out.stdout
    assert not (home / "SageMaker" / ".course-env").exists()


def test_on_create_clones_the_course_into_sagemaker(tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "Makefile").write_text("all:\n")
    git = ["git", "-C", str(origin), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "Makefile"], ["commit", "-qm", "x"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    home, env = instance_home(tmp_path, with_course=False)
    run_hook("on-create.sh", {**env, "COURSE_REPO_URL": str(origin)})
    assert (home / "SageMaker" / "distributed-training-course" / "Makefile").exists()
    again = subprocess.run(
        ["bash", str(LIFECYCLE / "on-create.sh")],
        env={**env, "COURSE_REPO_URL": str(origin)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "already" in again.stdout  # a second run leaves the clone as it is


def test_on_start_returns_at_once_and_the_background_setup_reports_a_failure(tmp_path):
    home, env = instance_home(tmp_path)
    env["COURSE_PYTHON"] = str(tmp_path / "no-such-python3.11")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "conda").exists())
    seconds = run_hook("on-start.sh", env)
    assert seconds < 5, f"on-start.sh took {seconds:.1f} s: it must leave the long work to the background"
    state = home / "SageMaker" / ".course-env"
    status, _ = wait_for_status(state, env, 60)
    assert status == "failed"
    assert "set COURSE_PYTHON to a Python 3.11" in (state / "setup.log").read_text()


@pytest.mark.parametrize("chosen", ["tensorflow-cpu", ""])
def test_on_start_passes_the_tensorflow_build_on_to_the_background_setup(tmp_path, chosen):
    # The set-up runs through sudo on an instance, which passes no environment on: on-start.sh names TF_PACKAGE
    # itself (empty: the set-up asks nvidia-smi). A course whose setup.sh only records what it was given:
    home, env = instance_home(tmp_path, with_course=False)
    stub = home / "SageMaker" / "course" / "tools" / "sagemaker_lifecycle" / "setup.sh"
    stub.parent.mkdir(parents=True)
    stub.write_text('echo "TF_PACKAGE=[${TF_PACKAGE-unset}]" >>"$1/setup.log"; echo ready >"$1/status"\n')
    env = {k: v for k, v in env.items() if k != "TF_PACKAGE"} | ({"TF_PACKAGE": chosen} if chosen else {})
    if os.getuid() == 0 and subprocess.run(["id", "nobody"], capture_output=True).returncode == 0:
        # As root, the scripts run the set-up as the notebook user through sudo: a stand-in sudo that, like sudo's
        # env_reset, passes on no variable but PATH and HOME (and stays root, so that it needs no real user).
        fake = tmp_path / "bin" / "sudo"
        fake.parent.mkdir()
        fake.write_text(
            '#!/bin/sh\nwhile [ "$1" = -u ] || [ "$1" = -H ]; do [ "$1" = -u ] && shift; shift; done\n'
            'exec env -i PATH="$PATH" HOME="$HOME" "$@"\n'
        )
        fake.chmod(0o755)
        env |= {"COURSE_NB_USER": "nobody", "PATH": f"{fake.parent}{os.pathsep}{env['PATH']}"}
    run_hook("on-start.sh", env)
    state = home / "SageMaker" / ".course-env"
    status, _ = wait_for_status(state, env, 30)
    assert status == "ready"
    assert f"TF_PACKAGE=[{chosen}]" in (state / "setup.log").read_text()


@SETUP_TESTS
def test_first_start_builds_under_sagemaker_and_second_start_reuses_it_in_seconds(tmp_path):
    home, env = instance_home(tmp_path)
    state = home / "SageMaker" / ".course-env"
    # The wheel cache lives under ~/SageMaker: seed it with this machine's cached Horovod wheels (no compile).
    cached = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "distributed-training-course" / "wheels"
    if cached.is_dir():
        shutil.copytree(cached, state / "cache" / "wheels")
    assert run_hook("on-create.sh", env) < 5
    first_hook = run_hook("on-start.sh", env)
    status, first = wait_for_status(state, env, 1800)
    log = (state / "setup.log").read_text()
    assert status == "ready", log[-3000:]
    assert first_hook < 5 and "using the cached wheel" in log and "compiling Horovod" not in log
    kernel = json.loads((home / ".local/share/jupyter/kernels/distributed-training-course/kernel.json").read_text())
    assert kernel["argv"][0].startswith(str(state / "venv"))
    check = "import horovod.tensorflow as hvd; assert hvd.gloo_built(); import sagemaker"
    subprocess.run(
        [str(state / "venv/bin/python"), "-c", check], check=True, timeout=300, env={**env, "TF_CPP_MIN_LOG_LEVEL": "3"}
    )

    # A stop erases everything outside ~/SageMaker.
    for gone in (".local", ".cache"):
        shutil.rmtree(home / gone, ignore_errors=True)
    second_hook = run_hook("on-start.sh", env)
    status, second = wait_for_status(state, env, 300)
    assert status == "ready", (state / "setup.log").read_text()[-3000:]
    assert second < 30, f"the second start took {second:.0f} s"
    assert (home / ".local/share/jupyter/kernels/distributed-training-course/kernel.json").exists()
    print(
        f"\nfirst start: hook {first_hook:.1f} s, set-up {first:.0f} s; second start: hook {second_hook:.1f} s, set-up {second:.1f} s"
    )
