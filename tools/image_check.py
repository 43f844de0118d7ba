"""`make image-check`: the Horovod build of docker/horovod/Dockerfile, replayed on this machine without Docker.

What the image builds is read from the Dockerfile itself (the Horovod version, the sdist's sha256, the patch program,
every NAME=VALUE flag of its `pip wheel` command, SETUPTOOLS_USE_DISTUTILS, the tools and modules its first RUN
requires, the frameworks its last RUN requires), so that the replay cannot drift from it. The image's Python
environment is stood in for by a Python 3.12 virtual environment with the versions of docker/horovod/image-lock.txt.
Done when `horovodrun --check-build` lists every framework the Dockerfile's last RUN requires (TensorFlow, MPI, Gloo,
NCCL) and a 2-rank CPU allreduce started by mpirun passes through that build.

The environment and the built wheel are cached outside the repository, keyed by the recipe (the Dockerfile, the lock
file, this program, the Python version; the wheel also by the compute capability):
    ${COURSE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/distributed-training-course}/image-replay/<key>
A warm run only installs the cached wheel and checks it. Every difference from the real image is listed in
docker/horovod/README.md ("The build, replayed without Docker").

Standard library only: it runs with the machine's Python 3.8 or newer (the course's environment is not needed).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "horovod" / "Dockerfile"
LOCK = REPO / "docker" / "horovod" / "image-lock.txt"
# One compute capability is enough to prove the CUDA kernels compile (the image builds six: see the Dockerfile's
# HOROVOD_BUILD_CUDA_CC_LIST). 90 is the H100's; CUDA 13, which the replay compiles with, has no sm_70.
DEFAULT_CC = "90"


def say(message: str) -> None:
    print(f"[image] {message}", flush=True)


class ReplayError(RuntimeError):
    """The replay cannot go on; the message says what to do."""


# ---- the recipe, read from the Dockerfile ----


def one(pattern: str, text: str, what: str, flags: int = 0) -> str:
    found = re.findall(pattern, text, flags)
    if len(found) != 1:
        raise ReplayError(f"expected exactly one {what} in {DOCKERFILE.name}, found {len(found)}")
    return found[0]


def instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, each with its continuation lines (a heredoc's body included)."""
    return re.findall(r"^[A-Z]+ .*?(?=^[A-Z]+ |\Z)", text, re.M | re.S)


def arg_default(text: str, name: str) -> str:
    return one(rf"^ARG {name}=(\S+)$", text, f"'ARG {name}=' line", re.M)


def build_env(text: str) -> dict[str, str]:
    """NAME=VALUE settings on the Dockerfile's `pip wheel` command (the Horovod build), values unquoted."""
    build = [i for i in instructions(text) if "pip wheel" in i]
    if len(build) != 1:
        raise ReplayError(f"expected one RUN that builds the Horovod wheel in {DOCKERFILE.name}, found {len(build)}")
    pairs = re.findall(r"(?<![\w$])([A-Z][A-Z0-9_]*)=(\"[^\"]*\"|\S+)", build[0])
    return {name: value.strip('"') for name, value in pairs}


def patches(text: str) -> list[tuple[str, str, str]]:
    """(file name, program, source file it patches) of every patch program the Dockerfile writes with a heredoc,
    in the order its build RUN applies them; each must be applied exactly once."""
    programs = dict(re.findall(r"^COPY <<'EOF' /tmp/(horovod-patch-[\w-]+\.py)\n(.*?)^EOF$", text, re.M | re.S))
    build = next((i for i in instructions(text) if "pip wheel" in i), "")
    applied = re.findall(r'"\$py" /tmp/(horovod-patch-[\w-]+\.py) "\$src/([^"]+)"', build)
    names = [name for name, _ in applied]
    if not programs or sorted(names) != sorted(programs):
        raise ReplayError(
            f"the Dockerfile writes the patch programs {sorted(programs)} and its build applies {names}: "
            "each should be applied once"
        )
    return [(name, programs[name], target) for name, target in applied]


def recipe(text: str) -> dict:
    """Everything the replay takes from the Dockerfile."""
    first = next((i for i in instructions(text) if "command -v" in i and "for tool in" in i), "")
    last = instructions(text)[-1]
    return {
        "version": arg_default(text, "HOROVOD_VERSION"),
        "sha256": arg_default(text, "HOROVOD_SDIST_SHA256"),
        "cc_list": arg_default(text, "HOROVOD_BUILD_CUDA_CC_LIST"),
        "distutils": one(r"^ENV SETUPTOOLS_USE_DISTUTILS=(\S+)$", text, "ENV SETUPTOOLS_USE_DISTUTILS", re.M),
        "patches": patches(text),
        "env": build_env(text),
        "tools": one(r"for tool in ([^;]+); do command -v", first, "`for tool in ...` list", re.S).split(),
        "imports": one(r"-c 'import ([\w., ]+)'", first, "import check", re.S).replace(" ", "").split(","),
        "mpirun_version": one(r"mpirun --version \| grep -q '([^']+)'", first, "mpirun version check", re.S),
        "frameworks": one(r"for what in ([\w ]+); do", last, "`for what in ...` list of the last RUN", re.S).split(),
    }


def replay_env(env: dict[str, str], *, nccl_home: str, cuda_home: str, cc_list: str, jobs: int) -> dict[str, str]:
    """The Dockerfile's build flags with the image's paths replaced by this replay's; any other shell value is
    refused, so that a new flag in the Dockerfile is looked at rather than passed on unexpanded."""
    out = {}
    for name, value in env.items():
        value = value.replace("$nccl_home", nccl_home).replace("${HOROVOD_BUILD_CUDA_CC_LIST}", cc_list)
        value = value.replace("$(nproc)", str(jobs))
        if value == "/usr/local/cuda":  # the image's CUDA_HOME (cuda-nvcc-12-9); here the wheels' toolkit
            value = cuda_home
        if "$" in value or "`" in value:
            raise ReplayError(
                f"the Dockerfile's build flag {name}={value} has a shell value this replay does not know; "
                "teach tools/image_check.py what it stands for here"
            )
        out[name] = value
    return out


# ---- running things ----


def run(
    cmd: list[str], *, env: dict | None = None, log: Path | None = None, timeout: float = 600, what: str = ""
) -> str:
    """Run a command; on failure raise with the tail of its output. With `log`, output goes there and a line
    every 30 s says it is still running."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") if log is None else open(log, "w+") as sink:
        # its own process group: on a timeout or an interrupt, everything it started (cmake, make, nvcc; mpirun's
        # ranks) is stopped with it, SIGTERM first so that mpirun can stop its ranks
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        stop = threading.Event()

        def beat() -> None:
            while log is not None and not stop.wait(30):
                say(f"  ... {what or cmd[0]}: {time.monotonic() - start:.0f} s (log: {log})")

        threading.Thread(target=beat, daemon=True).start()
        try:
            proc.wait(timeout=timeout)
        except BaseException as stopped:  # the timeout, or Ctrl-C
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
                    break
            if isinstance(stopped, subprocess.TimeoutExpired):
                where = f" (log: {log})" if log else ""
                raise ReplayError(f"{what or cmd[0]} took over {timeout:.0f} s and was stopped{where}") from None
            raise
        finally:
            stop.set()
        sink.seek(0)
        out = sink.read()
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-25:])
        raise ReplayError(f"{what or ' '.join(cmd[:3])} failed (exit {proc.returncode}):\n{tail}")
    return out


def find_python312() -> str:
    """The image's Python is 3.12: $IMAGE_PYTHON, python3.12 on PATH, or a pyenv 3.12 (the newest)."""
    given = os.environ.get("IMAGE_PYTHON", "")
    pyenv = glob.glob(os.path.expanduser("~/.pyenv/versions/3.12.*/bin/python3.12"))
    pyenv.sort(key=lambda p: [int(x) if x.isdigit() else -1 for x in Path(p).parents[1].name.split(".")], reverse=True)
    candidates = [given] if given else [shutil.which("python3.12") or "", *pyenv]
    for candidate in filter(None, candidates):
        try:
            version = subprocess.run(
                [candidate, "-c", "import sys, venv; print(*sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.split()
        except OSError:
            continue
        if version == ["3", "12"]:
            return candidate
    if given:
        raise ReplayError(f"IMAGE_PYTHON={given} is not a Python 3.12 with venv: the image's Python is 3.12")
    raise ReplayError(
        "the image's Python is 3.12 and none was found: install it (Debian 13/Ubuntu 24.04: "
        "sudo apt-get install -y python3.12-venv python3.12-dev; or `pyenv install 3.12`), or point IMAGE_PYTHON at one"
    )


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def cache_dir(python: str) -> Path:
    """The environment's folder, keyed by what it is made of: the lock file, the Python and the machine."""
    root = os.environ.get("COURSE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "distributed-training-course"
    )
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True)
    return Path(root) / "image-replay" / _key(LOCK.read_text(), version.stdout, platform.machine())


def wheel_key(rec: dict, cc: str, path: str) -> str:
    """The built wheel's key: the recipe read from the Dockerfile, the compute capability, and the versions of
    the compilers and the Open MPI it is built with."""
    env = {**os.environ, "PATH": path}
    tools = [run([tool, "--version"], env=env).splitlines()[0] for tool in ("gcc", "cmake", "nvcc", "mpirun")]
    return _key(json.dumps(rec, sort_keys=True), cc, *tools)


# ---- the steps ----


def make_venv(python: str, home: Path) -> Path:
    venv = home / "venv"
    stamp = home / "venv.ok"
    py = venv / "bin" / "python"
    if stamp.exists() and py.exists():
        say(f"the image's Python environment, cached: {venv}")
        return py
    shutil.rmtree(venv, ignore_errors=True)
    say(f"the image's Python environment (Python 3.12, docker/horovod/image-lock.txt) in {venv}")
    run([python, "-m", "venv", str(venv)], what="python3.12 -m venv")
    pins = [line.split("#")[0].strip() for line in LOCK.read_text().splitlines()]
    pip_pin = [p for p in pins if p.startswith("pip==")]
    run([str(py), "-m", "pip", "install", "--quiet", *pip_pin], what="pip install pip")
    run(
        [str(py), "-m", "pip", "install", "--quiet", "-r", str(LOCK)],
        what="pip install -r image-lock.txt",
        timeout=1800,
    )
    stamp.write_text("ok\n")
    return py


def site_packages(py: Path) -> Path:
    return Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip())


def toolkit(py: Path) -> tuple[Path, Path]:
    """(CUDA home, NCCL home) inside the environment, laid out as the build expects."""
    cuda = site_packages(py) / "nvidia" / "cu13"
    if not (cuda / "bin" / "nvcc").exists():
        raise ReplayError(f"no nvcc in {cuda}: the CUDA toolkit wheels of image-lock.txt did not install it")
    # nvcc.profile looks for libraries in lib64 and CMake's FindCUDAToolkit for an unversioned libcudart.so; the
    # wheels have lib/ and libcudart.so.13 (the image's cuda-cudart-devel package has both).
    if not (cuda / "lib64").exists():
        (cuda / "lib64").symlink_to("lib")
    runtime = sorted((cuda / "lib").glob("libcudart.so.*"))
    if not (cuda / "lib" / "libcudart.so").exists() and runtime:
        (cuda / "lib" / "libcudart.so").symlink_to(runtime[0].name)
    nccl = Path(run([str(py), "-c", "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"]).strip())
    for needed in (nccl / "include" / "nccl.h", nccl / "lib" / "libnccl.so.2"):  # the Dockerfile's tests
        if not needed.exists():
            raise ReplayError(
                f"{needed} is missing: the nvidia-nccl-cu12 wheel is not laid out as the Dockerfile expects"
            )
    if not (nccl / "lib" / "libnccl.so").exists():  # the Dockerfile's `ln -sf libnccl.so.2 .../libnccl.so`
        (nccl / "lib" / "libnccl.so").symlink_to("libnccl.so.2")
    return cuda, nccl


def check_base(py: Path, rec: dict, path: str) -> None:
    """The Dockerfile's first RUN checks what the base image provides; the same checks here."""
    missing = [tool for tool in rec["tools"] if not shutil.which(tool, path=path)]
    if missing:
        raise ReplayError(
            f"missing {', '.join(missing)}: the build needs "
            + "gcc, g++, make, cmake and Open MPI (Debian/Ubuntu: sudo apt-get install -y g++ make cmake openmpi-bin "
            "libopenmpi-dev, or run `make env` as root)"
        )
    if not os.access("/usr/sbin/sshd", os.X_OK):
        raise ReplayError("/usr/sbin/sshd is missing (Debian/Ubuntu: sudo apt-get install -y openssh-server)")
    run([str(py), "-c", "import " + ", ".join(rec["imports"])], what="the image's Python modules")
    version = run(["mpirun", "--version"], env={**os.environ, "PATH": path})
    if rec["mpirun_version"].replace("\\.", ".") not in version:  # grep's pattern: literal but for its "\\."
        raise ReplayError(
            f"the Dockerfile wants Open MPI matching {rec['mpirun_version']!r}; mpirun says {version[:80]!r}"
        )
    say(f"  the base image's tools and modules are here: {', '.join(rec['tools'])}; {version.splitlines()[0]}")


def build_wheel(py: Path, rec: dict, home: Path, cuda: Path, nccl: Path, cc: str, path: str) -> Path:
    dist = home / f"wheel-{wheel_key(rec, cc, path)}"
    wheels = sorted(dist.glob("horovod-*.whl"))
    if wheels:
        say(f"the built wheel, cached: {wheels[0]}")
        return wheels[0]
    with tempfile.TemporaryDirectory(prefix="image-replay-") as tmp:
        work = Path(tmp)
        version = rec["version"]
        run(
            [str(py), "-m", "pip", "download", "--quiet", "--no-cache-dir", "--no-deps", "--no-binary", ":all:"]
            + [f"horovod=={version}", "-d", str(work)],
            what="pip download horovod (source)",
        )
        sdist = work / f"horovod-{version}.tar.gz"
        got = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if got != rec["sha256"]:
            raise ReplayError(
                f"{sdist.name} has sha256 {got}, the Dockerfile's HOROVOD_SDIST_SHA256 is {rec['sha256']}"
            )
        with tarfile.open(sdist) as archive:
            archive.extractall(work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        src = work / f"horovod-{version}"
        for name, program, target in rec["patches"]:
            (work / name).write_text(program)
            run([str(py), str(work / name), str(src / target)], what=f"the patch {name}")
            say(f"  applied {name} to {target}")
        jobs = os.cpu_count() or 1
        flags = replay_env(rec["env"], nccl_home=str(nccl), cuda_home=str(cuda), cc_list=cc, jobs=jobs)
        env = {**os.environ, **flags, "PATH": path, "SETUPTOOLS_USE_DISTUTILS": rec["distutils"]}
        say("compiling Horovod with the Dockerfile's flags (compute capability " + cc + "; several minutes):")
        for name, value in flags.items():
            say(f"    {name}={value}")
        log = home / "build.log"
        start = time.monotonic()
        run(
            [str(py), "-m", "pip", "wheel", "-v", "--no-cache-dir", "--no-build-isolation", "--no-deps"]
            + ["-w", str(work / "dist"), str(src)],
            env=env,
            log=log,
            timeout=3600,
            what="the Horovod build",
        )
        say(f"  built in {time.monotonic() - start:.0f} s")
        dist.mkdir(parents=True, exist_ok=True)
        for wheel in (work / "dist").glob("horovod-*.whl"):
            # whole or not at all: a later run trusts any wheel it finds here
            shutil.copy2(wheel, dist / f".{wheel.name}.part")
            os.replace(dist / f".{wheel.name}.part", dist / wheel.name)
    return sorted(dist.glob("horovod-*.whl"))[0]


ALLREDUCE = """
import sys
import horovod.tensorflow as hvd, tensorflow as tf
hvd.init()
assert hvd.mpi_enabled(), "not started through MPI"
s = hvd.allreduce(tf.constant([float(hvd.rank() + 1)] * 4), op=hvd.Sum)
built = f"nccl_built={bool(hvd.nccl_built())} cuda_built={hvd.cuda_built()} gpus={len(tf.config.list_physical_devices('GPU'))}"
sys.stdout.write(f"replay-allreduce rank {hvd.rank()} of {hvd.size()} sum {s.numpy().tolist()} {built}\\n")
sys.stdout.flush()
"""


def check(py: Path, wheel: Path, rec: dict, path: str, nccl: Path) -> None:
    run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel)], what="pip install")
    # The base image puts libnccl.so.2 on LD_LIBRARY_PATH (it copies it into /usr/local/cuda/lib64).
    env = {
        **os.environ,
        "PATH": path,
        "LD_LIBRARY_PATH": f"{nccl / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":"),
        "SETUPTOOLS_USE_DISTUTILS": rec["distutils"],
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "CUDA_VISIBLE_DEVICES": "",
    }
    report = run([str(py.parent / "horovodrun"), "--check-build"], env=env, what="horovodrun --check-build")
    for line in report.splitlines():  # the report, without the log lines TensorFlow prints as it loads
        if re.match(r"(Horovod v|Available |\s+\[[ X]\] )", line):
            say(f"  {line.rstrip()}")
    absent = [what for what in rec["frameworks"] if f"[X] {what}" not in report]
    if absent:
        raise ReplayError(f"horovodrun --check-build does not list {', '.join(absent)}: the build lacks them")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    out = run(
        ["mpirun", *root, "--oversubscribe", "--tag-output", "-np", "2"]
        + [
            "-x",
            "LD_LIBRARY_PATH",
            "-x",
            "TF_CPP_MIN_LOG_LEVEL",
            "-x",
            "CUDA_VISIBLE_DEVICES",
            "-x",
            "OMP_NUM_THREADS=1",
        ]
        + [str(py), "-c", ALLREDUCE],
        env=env,
        timeout=300,
        what="the 2-rank allreduce under mpirun",
    )
    lines = [line for line in out.splitlines() if "replay-allreduce" in line]
    for line in lines:
        say(f"  {line}")
    good = [line for line in lines if "sum [3.0, 3.0, 3.0, 3.0]" in line and "nccl_built=True" in line]
    if len(good) != 2:
        raise ReplayError(
            "the 2-rank allreduce through the replayed build did not give 3.0 on both ranks:\n" + out[-2000:]
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", default=DEFAULT_CC, help=f"compute capability to compile for (default {DEFAULT_CC})")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        if not re.fullmatch(r"\d{2,3}", args.cc):
            raise ReplayError(f"--cc {args.cc!r}: give one compute capability as digits, e.g. 90 (H100) or 86 (A10G)")
        if platform.system() != "Linux" or platform.machine() != "x86_64":
            raise ReplayError(
                f"the image is built for Linux x86_64 only; this is {platform.system()} {platform.machine()}"
            )
        rec = recipe(DOCKERFILE.read_text())
        python = find_python312()
        home = cache_dir(python)
        home.mkdir(parents=True, exist_ok=True)
        say(f"replaying docker/horovod/Dockerfile's Horovod {rec['version']} build (cache: {home})")
        step = time.monotonic()
        py = make_venv(python, home)
        say(f"  ready in {time.monotonic() - step:.0f} s")
        cuda, nccl = toolkit(py)
        path = f"{py.parent}:{cuda / 'bin'}:{os.environ.get('PATH', '')}"
        archs = run([str(cuda / "bin" / "nvcc"), "--list-gpu-arch"], what="nvcc --list-gpu-arch").split()
        if f"compute_{args.cc}" not in archs:
            raise ReplayError(
                f"--cc {args.cc}: the replay's nvcc (CUDA 13) compiles for {', '.join(a[8:] for a in archs)} only "
                "(CUDA 13 dropped Volta's 70, which the image's CUDA 12.9 still has); pick one of those"
            )
        check_base(py, rec, path)
        wheel = build_wheel(py, rec, home, cuda, nccl, args.cc, path)
        step = time.monotonic()
        check(py, wheel, rec, path, nccl)
        say(f"  installed and checked in {time.monotonic() - step:.0f} s")
        stale = [p for p in home.parent.iterdir() if p != home] + [p for p in home.glob("wheel-*") if p != wheel.parent]
        for old in stale:  # what earlier recipes left (an environment is about 3 GB)
            shutil.rmtree(old, ignore_errors=True)
        if stale:
            say(f"  removed {len(stale)} cached build(s) of earlier recipes")
    except (ReplayError, OSError) as error:
        print(f"[image] ERROR: {error}", file=sys.stderr)
        return 1
    say(
        f"OK: the image's Horovod build, replayed, lists {', '.join(rec['frameworks'])} and passes a 2-rank CPU "
        f"allreduce under mpirun ({time.monotonic() - start:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
