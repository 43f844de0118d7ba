"""What this machine and environment provide: versions, CPU features, GPUs, Horovod, AWS credentials."""

from __future__ import annotations

import importlib.metadata as metadata
import math
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# CPU flags (as Linux names them in /proc/cpuinfo) that matter for the course's speed figures. The last four are
# those TensorFlow tests before it gives float16 to oneDNN (see CpuInfo.onednn_float16); a kernel too old to know
# a flag does not list it, so "no" can also mean "not reported".
CPU_FEATURES = {
    "avx2": "AVX2 (256-bit vectors)",
    "avx512f": "AVX-512 (512-bit vectors)",
    "avx512_bf16": "AVX-512 BF16 (bfloat16 dot products)",
    "amx_bf16": "AMX-BF16 (bfloat16 matrix tiles)",
    "amx_tile": "AMX tiles",
    "avx512bw": "AVX-512 BW (byte and word operations)",
    "avx512_fp16": "AVX-512 FP16 (float16 arithmetic)",
    "amx_fp16": "AMX-FP16 (float16 matrix tiles)",
    "avx_ne_convert": "AVX-NE-CONVERT (16-bit to float32 conversions)",
}


@dataclass
class CpuInfo:
    """The CPU model, its logical cores, the cores this process may use, and its feature flags."""

    model: str
    logical_cores: int
    usable_cores: int
    flags: set[str] = field(default_factory=set)

    def has(self, flag: str) -> bool:
        """True when the CPU reports `flag` (a /proc/cpuinfo name such as 'amx_bf16')."""
        return flag in self.flags

    @property
    def bf16_hardware(self) -> bool:
        """True when the CPU has bfloat16 instructions (AVX-512 BF16 or AMX-BF16)."""
        return self.has("avx512_bf16") or self.has("amx_bf16")

    @property
    def onednn_float16(self) -> bool:
        """True when the flags pass TensorFlow's test for giving float16 to oneDNN: (AVX512BW and (AVX512-FP16 or
        AMX-FP16)) or AVX-NE-CONVERT (IsDataTypeSupportedByOneDNNOnThisCPU, tensorflow/core/util/util.cc)."""
        return (self.has("avx512bw") and (self.has("avx512_fp16") or self.has("amx_fp16"))) or self.has(
            "avx_ne_convert"
        )


def cpu_info() -> CpuInfo:
    """Read the CPU model and feature flags (Linux /proc/cpuinfo; macOS sysctl; else platform)."""
    model, flags = platform.processor() or platform.machine(), set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text(errors="replace")
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if m:
            model = m.group(1).strip()
        m = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
        if m:
            flags = set(m.group(1).split())
    elif sys.platform == "darwin":
        try:
            model = (
                subprocess.run(
                    ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
                ).stdout.strip()
                or model
            )
        except (OSError, subprocess.SubprocessError):
            pass
    logical = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    quota = cpu_quota()
    if quota is not None:
        usable = max(1, min(usable, math.ceil(quota)))
    return CpuInfo(model=model, logical_cores=logical, usable_cores=usable, flags=flags)


def cpu_quota(cgroup_root: str | Path = "/sys/fs/cgroup") -> float | None:
    """CPUs' worth of time a container's quota allows (cgroup v2 cpu.max, e.g. 2.0 for `docker run --cpus=2`), or
    None where there is no quota (cpu.max reads "max ...") or no cgroup v2 file (cgroup v1, macOS)."""
    try:
        quota, period = (Path(cgroup_root) / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max" or not (quota.isdigit() and period.isdigit()) or int(period) == 0:
        return None
    return int(quota) / int(period)


def cache_sizes(cpu: int = 0, root: str | Path = "/sys/devices/system/cpu") -> dict[str, int]:
    """Data and unified cache sizes of one CPU core in bytes, e.g. {'L1d': 49152, 'L2': 1048576} (Linux; {} elsewhere)."""
    sizes: dict[str, int] = {}
    for index in sorted((Path(root) / f"cpu{cpu}" / "cache").glob("index*")):
        try:
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
        sizes[f"L{level}" + ("d" if kind == "Data" else "")] = int(text.rstrip("KMG")) * scale
    return sizes


def total_memory(cgroup_root: str | Path = "/sys/fs/cgroup") -> int:
    """Bytes of memory this process may use: the machine's total, or a container's limit when lower."""
    import psutil

    total = psutil.virtual_memory().total
    for limit_file in (Path(cgroup_root) / "memory.max", Path(cgroup_root) / "memory" / "memory.limit_in_bytes"):
        try:
            text = limit_file.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            return int(text)
    return total


def package_version(*names: str) -> str | None:
    """The installed version of the first distribution in `names` that is installed, else None."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def versions() -> dict[str, str | None]:
    """Versions of Python and of the course's main packages (None where a package is missing)."""
    return {
        "Python": platform.python_version(),
        "TensorFlow": package_version("tensorflow-cpu", "tensorflow", "tensorflow-macos"),
        "Keras": package_version("keras"),
        "Horovod": package_version("horovod"),
        "SageMaker SDK": package_version("sagemaker"),
        "boto3": package_version("boto3"),
        "moto": package_version("moto"),
    }


#: The distribution that pins each package of `versions()` in requirements.txt.
PINNED_AS = {
    "TensorFlow": "tensorflow-cpu",
    "Keras": "keras",
    "Horovod": "horovod",
    "SageMaker SDK": "sagemaker",
    "boto3": "boto3",
    "moto": "moto",
}


def pins(requirements: Path | None = None) -> dict[str, str]:
    """The versions pinned in requirements.txt, Horovod's `#build:` line included."""
    from utils.paths import REPO_ROOT

    found = {}
    for line in (requirements or REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.removeprefix("#build:").strip()
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            found[name.split("[")[0].strip()] = version.strip()
    return found


def version_check(requirements: Path | None = None) -> list[dict[str, object]]:
    """Installed against pinned version of each main package; ok is False where they differ."""
    pinned = pins(requirements)
    rows = []
    for name, installed in versions().items():
        want = "3.11.x" if name == "Python" else pinned.get(PINNED_AS.get(name, ""), "")
        ok = bool(installed) and (installed.startswith("3.11.") if name == "Python" else installed == want)
        rows.append({"package": name, "installed": installed or "MISSING", "pinned": want, "ok": ok})
    return rows


def horovod_build() -> dict[str, object]:
    """Whether Horovod imports with TensorFlow support, and which controllers it was built with."""
    try:
        import horovod.tensorflow as hvd
    except Exception as exc:  # ImportError, or a library that fails to load
        return {"importable": False, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "importable": True,
        "gloo_built": bool(hvd.gloo_built()),
        "mpi_built": bool(hvd.mpi_built()),
        "nccl_built": bool(hvd.nccl_built()),
    }


def gpus() -> list[str]:
    """Names of the GPUs TensorFlow can see (empty on a CPU-only machine)."""
    import tensorflow as tf

    return [d.name for d in tf.config.list_physical_devices("GPU")]


def tensorflow_build() -> str | None:
    """The TensorFlow distribution installed: 'tensorflow-cpu' (the CPU build), 'tensorflow' (the GPU build on Linux;
    the CPU build on macOS), 'tensorflow-macos', or None."""
    return next((name for name in ("tensorflow-cpu", "tensorflow", "tensorflow-macos") if package_version(name)), None)


def _readable(raw: bytes, limit: int = 200) -> str:
    """Program output as one line a terminal shows as it is: escape sequences, control characters, NULs and invalid
    UTF-8 removed or replaced, at most `limit` characters."""
    text = re.sub(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07?|.)", "", raw.decode("utf-8", errors="replace"))
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def nvidia_gpus(timeout: float = 20) -> tuple[list[str], str]:
    """The NVIDIA GPUs that `nvidia-smi -L` lists (their names), and why none is listed ('' when one is): the same
    test as the set-up's (tools/portable.sh, nvidia_gpus), which chose the TensorFlow build from it. Bounded at
    `timeout` s even where nvidia-smi ignores SIGTERM or leaves a child holding its output (it writes to a file,
    not a pipe, and its process group is killed); what it said is quoted as one readable line."""
    import shutil
    import signal
    import tempfile

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], "no nvidia-smi"
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(
                [smi, "-L"], stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as exc:
            return [], f"nvidia-smi failed ({exc})"
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.wait()
            return [], f"nvidia-smi failed (no answer in {timeout:g} s)"
        out.seek(0)
        raw = out.read(1 << 20)
    lines = [_readable(line) for line in raw.splitlines()]
    names = [re.sub(r" \(UUID:.*", "", line.split(": ", 1)[-1]) for line in lines if line.startswith("GPU ")]
    if code == 0 and names:
        return names, ""
    said = next((line for line in lines if line), "") or "no output"
    verb = "lists no GPU" if code == 0 else "failed"
    return [], f"nvidia-smi {verb} (exit {code}: {said})"


def gpu_report(tf_gpus: list[str] | None = None) -> str:
    """What this machine's NVIDIA GPUs (nvidia-smi) and its TensorFlow build make of each other, and what to do where
    they disagree; `tf_gpus` is gpus() (asked of TensorFlow when None)."""
    found, problem = nvidia_gpus()
    build = tensorflow_build()
    again = (
        "run the set-up again in a terminal (`make env`; on a SageMaker notebook instance "
        "`bash tools/sagemaker_lifecycle/setup.sh`, or stop and start it), then restart this kernel"
    )
    if not found:
        if problem != "no nvidia-smi":
            return (
                f"{problem}: TensorFlow cannot use a GPU until the NVIDIA driver works, "
                f"and every lesson runs on the CPU. Once `nvidia-smi -L` lists the GPU, {again}."
            )
        if build == "tensorflow" and sys.platform.startswith("linux"):
            return (
                "TensorFlow's GPU build is installed but this machine has no NVIDIA GPU: it runs on the CPU. "
                "The CPU build is smaller and quieter: `make env TF_PACKAGE=tensorflow-cpu`."
            )
        return "No NVIDIA GPU here: every lesson runs on the CPU, and each says what changes on a GPU."
    counts = {name: found.count(name) for name in found}  # "4 x NVIDIA L4", as the set-up says it
    names = ", ".join(f"{n} x {name}" if n > 1 else name for name, n in counts.items())
    if build is None:
        return f"nvidia-smi lists {names}, but TensorFlow is not installed: {again}."
    if build != "tensorflow":
        return (
            f"nvidia-smi lists {names}, but TensorFlow's CPU build ({build}) is installed, so TensorFlow cannot use "
            f"it. For TensorFlow's GPU build, {again}. (Nothing to do if TF_PACKAGE=tensorflow-cpu was chosen on purpose.)"
        )
    tf_gpus = gpus() if tf_gpus is None else tf_gpus
    if not tf_gpus:
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = (
            f"CUDA_VISIBLE_DEVICES={hidden!r} in this kernel's environment hides it"
            if hidden is not None
            else 'its CUDA libraries did not load (in a terminal, `TF_CPP_MIN_LOG_LEVEL=0 python -c "import tensorflow '
            "as tf; print(tf.config.list_physical_devices('GPU'))\"` with the course's Python says why)"
        )
        return (
            f"nvidia-smi lists {names} and TensorFlow's GPU build is installed, but TensorFlow sees no GPU: {why}. "
            "Every lesson runs on the CPU."
        )
    return (
        f"nvidia-smi lists {names}, and TensorFlow's GPU build sees {len(tf_gpus)} GPU(s). TensorFlow in this notebook "
        "may use the GPU, taking GPU memory as it needs it (TF_FORCE_GPU_ALLOW_GROWTH); the worker processes that the "
        "lessons start run on the CPU (the launcher hides the GPU from them), as on a CPU-only machine."
    )


def machine_line() -> str:
    """One line naming the CPU, its usable cores and the GPUs (or none) that measured a lesson's figures."""
    cpu = cpu_info()
    found = gpus()
    return f"This run's figures are measured here: {cpu.model}, {cpu.usable_cores} usable cores, " + (
        f"GPUs: {', '.join(found)}" if found else "no GPU"
    )


def aws_credentials_present() -> bool:
    """True when boto3 finds AWS credentials (the SageMaker lab then offers online mode); never prints them, and asks
    the instance metadata service (the network) only on an AWS instance (utils.sagemaker_job.credentials_session)."""
    try:
        from utils.sagemaker_job import credentials_session

        credentials_session()
        return True
    except Exception:  # none found, or a broken config file: neither must break the environment check
        return False
