"""A real MPI_Allreduce on a simulated cluster: SimGrid's SMPI runs scripts/simgrid/allreduce.c on a described
platform and reports the *simulated* time, for clusters no one can rent (256 GPUs on this laptop).

    plat = two_level_platform(32, 8, intra_bytes_per_s=300e9, intra_latency_s=1e-6,
                              net_bytes_per_s=50e9, net_latency_s=10e-6)
    result = allreduce(plat, ranks=256, nbytes=100_000_000, algorithm="smp_rsag")
    print(result.seconds, result.command)

How it works: `smpicc` builds the C program against SMPI (once, cached under runs/simgrid/), and `smpirun`
runs every MPI rank as an actor of one process (a user-level context, SimGrid's default `contexts/factory:raw`,
not an OS thread); SimGrid decides when each message arrives from the platform
(a <cluster>: every host has one link to a switch) and the network model, and MPI_Wtime reads that simulated
clock. Message contents are real but shared (SMPI_SHARED_MALLOC), and the time this machine spends adding
floats is left out (smpi/simulate-computation:no): the result is communication time only.

Network models (SimGrid's `network/model`), always stated in the command:
- CM02 (the default here): no corrections; a message of b bytes on a path of latency L whose slowest link has
  bandwidth B takes L + b/B, and flows sharing a link split it max-min, each flow's share in inverse proportion
  to its route's latency (network_cm02.cpp: a flow's sharing penalty is its latency; equal latencies, equal
  shares): the alpha-beta arithmetic;
- LV08: CM02 with TCP corrections fitted by Velho & Legrand (2009): latency x 13.01, bandwidth x 0.97, weight-S
  20537, cross-traffic on and the 4 MiB TCP window (SimGrid's default for its own simulators). What this module
  calls "LV08's two factors" (`STUDY`) applies its latency and bandwidth factors only, not its window or its
  cross-traffic;
- SMPI: smpirun's own default, factors by message size fitted on a real cluster (smpi/lat-factor and
  smpi/bw-factor; from 64 KiB up: latency x 11.64, bandwidth x 0.94).
Two more settings are stated too: network/crosstraffic (off here: on, every transfer also loads its reverse path
at 5 %, as TCP acknowledgements do, so a ring runs about 5 % slower) and network/TCP-gamma (0 here: no TCP
window; with a window W, no flow goes faster than W / (2 x path latency)).

Routing in a <cluster> without a backbone (what `Platform.xml` writes unless `backbone_bandwidth` is set): a
message from host i to host j crosses i's link up and j's link down (SPLITDUPLEX: each direction its own
bandwidth, as the lab's tbf shapes each direction), so its latency is twice a link's and its bandwidth one
link's. Ranks on the same host use the host's loopback link if there is one; it is a FATPIPE (every flow gets
its full bandwidth, nothing is shared). Without one, they go out to the switch and back, sharing the
host's link like everything else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from utils import netlab, processes
from utils.paths import RUNS, SCRIPTS

#: The MPI program that is simulated (argv: bytes, repeats; rank 0 prints a RESULT line).
SOURCE = SCRIPTS / "simgrid" / "allreduce.c"
#: Where the compiled program is kept (named by the sha256 of SOURCE and of smpicc).
CACHE = RUNS / "simgrid"
#: What to do where SimGrid is missing.
INSTALL_HINT = (
    "install SimGrid's SMPI: `sudo apt-get install -y libsimgrid-dev` on Debian or Ubuntu; without root or apt-get "
    "(a SageMaker notebook instance), `make env` builds it from its source release on PyPI into the environment, once "
    "per machine (tools/build_simgrid.sh; on a notebook instance the first start does it last, and "
    "~/SageMaker/.course-env/setup.log says when it is done); or see "
    "https://simgrid.org/doc/latest/Installing_SimGrid.html"
)
#: MPI_Allreduce algorithms of SimGrid 3.32's SMPI (`--cfg=smpi/allreduce:NAME`), each checked to run here.
#: SMP-aware ones ("smp_*", "mvapich2_two_level") group the ranks by host, so they need ranks that fill whole
#: hosts. "automatic" (benchmarks every algorithm in turn) is left out.
ALGORITHMS: dict[str, str] = {
    "lr": "logical ring: ring reduce-scatter, then ring allgather (the bandwidth-optimal ring)",
    "rdb": "recursive doubling: log2(N) exchanges of the whole buffer",
    "rab1": "Rabenseifner variant: reduce-scatter then allgather (a power of two ranks only)",
    "rab2": "Rabenseifner variant: alltoall then allgather",
    "rab_rdb": "Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling allgather",
    "rab": "Rabenseifner's reference implementation",
    "redbcast": "reduce to one rank, then broadcast",
    "smp_binomial": "SMP-aware: binomial reduce in each host, binomial reduce and broadcast across hosts, "
    "binomial broadcast in each host",
    "smp_binomial_pipeline": "smp_binomial with the buffer pipelined in 4096-byte pieces",
    "smp_rdb": "SMP-aware: binomial reduce in each host, recursive doubling across hosts, broadcast in each host",
    "smp_rsag": "SMP-aware: binomial reduce in each host, ring reduce-scatter and allgather across hosts "
    "(one rank per host), binomial broadcast in each host",
    "smp_rsag_lr": "smp_rsag with logical-ring reduce-scatter and allgather across hosts",
    "smp_rsag_rab": "smp_rsag with Rabenseifner's reduce-scatter and allgather across hosts (a power of two ranks)",
    "ompi_ring_segmented": "Open MPI's segmented ring",
    "mvapich2_rs": "MVAPICH2: recursive doubling for small messages, reduce-scatter then allgather otherwise",
    "mvapich2_two_level": "MVAPICH2's SMP-aware algorithm: MPICH's in each host, recursive doubling across hosts",
    "ompi": "Open MPI's choice by message size and rank count",
    "mpich": "MPICH's choice by message size and rank count",
    "mvapich2": "MVAPICH2's choice by message size and rank count",
    "impi": "Intel MPI's choice by message size and rank count",
    "default": "SMPI's default: reduce to rank 0, then broadcast",
}
#: Network models (`--cfg=network/model:NAME`) and what they do.
NETWORK_MODELS: dict[str, str] = {
    "CM02": "no corrections: latency + bytes / bandwidth, max-min sharing of each link, a flow's share in inverse "
    "proportion to its route's latency (the alpha-beta arithmetic)",
    "LV08": "TCP corrections: latency x 13.01, bandwidth x 0.97, weight-S 20537, cross-traffic and the 4 MiB window",
    "SMPI": "smpirun's default: factors by message size (from 64 KiB up: latency x 11.64, bandwidth x 0.94)",
}
#: (latency factor, bandwidth factor) of each model that takes them (SMPI has its own, by message size).
MODEL_FACTORS: dict[str, tuple[float, float]] = {"CM02": (1.0, 1.0), "LV08": (13.01, 0.97)}
#: Seconds a stopped run gets between SIGTERM and SIGKILL.
GRACE = 3.0
#: Lines of a failed run's output shown in the error.
TAIL_LINES = 15
#: Algorithms that SimGrid refuses unless the number of ranks is a power of two.
POWER_OF_TWO = frozenset({"rab1", "smp_rsag_rab"})
#: Lines of a C++ backtrace in SimGrid's output (noise in an error message).
_BACKTRACE = re.compile(r"\s*->\s*\d+#|.*Current backtrace:")


class SimGridError(RuntimeError):
    """SimGrid is missing, or a build or simulation failed; the message says why and what to do."""


def available() -> str:
    """'' when smpicc and smpirun are usable here, else a one-line reason and what to install."""
    hidden = netlab.not_on_path(["smpicc", "smpirun"])  # built into the environment, but this kernel's PATH lacks it
    if hidden:
        return f"SimGrid's {hidden}"
    missing = [tool for tool in ("smpicc", "smpirun") if shutil.which(tool) is None]
    if missing:
        return f"SimGrid is not installed ({' and '.join(missing)} not found on PATH): {INSTALL_HINT}"
    if shutil.which("cc") is None:  # smpicc compiles with the system's C compiler (only recommended by the package)
        return (
            "smpicc has no C compiler (cc not found on PATH): `sudo apt-get install -y gcc` on Debian or Ubuntu, "
            "`sudo dnf install -y gcc` on Amazon Linux"
        )
    return ""


def _positive(name: str, value: float | None, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of bytes per second above 0, got {value!r}: {hint}")


def _non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds, 0 or more, got {value!r} (e.g. 10e-6)")


def _count(name: str, value: int, hint: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number, at least 1, got {value!r}: {hint}")


def _num(x: float) -> str:
    """A number as SimGrid reads it: the shortest text that gives back the same float."""
    return repr(float(x))


@dataclass(frozen=True)
class Platform:
    """A cluster: `hosts` hosts of `ranks_per_host` MPI slots, each host with one link to a switch.

    Bandwidths in bytes per second, latencies in seconds. `bandwidth`/`latency` are one host link's (each
    direction has the full bandwidth); a message between two hosts crosses two links (the sender's and the
    receiver's), so its latency is 2 x `latency`. `loopback_*`: the link between ranks of the same host (an
    NVLink-like FATPIPE: each flow gets the whole bandwidth); None: they go out to the switch and back.
    `backbone_*`: one link every message between hosts also crosses, shared by all of them; None: a
    non-blocking switch.
    """

    hosts: int
    ranks_per_host: int
    bandwidth: float
    latency: float
    loopback_bandwidth: float | None = None
    loopback_latency: float = 0.0
    backbone_bandwidth: float | None = None
    backbone_latency: float = 0.0

    def __post_init__(self) -> None:
        _count("hosts", self.hosts, "pass the number of hosts (machines) of the cluster, e.g. hosts=4")
        _count("ranks_per_host", self.ranks_per_host, "pass the MPI ranks (GPUs) each host runs, e.g. 8")
        _positive("bandwidth", self.bandwidth, "pass each host link's rate, e.g. 12.5e9 for 100 Gbit/s")
        _non_negative("latency", self.latency)
        if self.loopback_bandwidth is not None:
            _positive("loopback_bandwidth", self.loopback_bandwidth, "pass the intra-host rate, or None for none")
        _non_negative("loopback_latency", self.loopback_latency)
        if self.loopback_bandwidth is None and self.loopback_latency:
            raise ValueError("loopback_latency needs a loopback_bandwidth (or leave both unset: no loopback link)")
        if self.backbone_bandwidth is not None:
            _positive("backbone_bandwidth", self.backbone_bandwidth, "pass the backbone's rate, or None for none")
        _non_negative("backbone_latency", self.backbone_latency)
        if self.backbone_bandwidth is None and self.backbone_latency:
            raise ValueError("backbone_latency needs a backbone_bandwidth (or leave both unset: no backbone)")

    @property
    def slots(self) -> int:
        """How many MPI ranks the platform holds: hosts x ranks_per_host."""
        return self.hosts * self.ranks_per_host

    def host_name(self, index: int) -> str:
        """The name of host `index` (0-based) in the platform and the hostfile."""
        return f"host-{index}"

    def xml(self) -> str:
        """The platform as SimGrid reads it (a <cluster> in the version 4.1 format)."""
        attrs = {
            "id": "cluster",
            "prefix": "host-",
            "suffix": "",
            "radical": f"0-{self.hosts - 1}",
            "speed": "1Gf",  # unused: the computation is not simulated
            "core": str(self.ranks_per_host),
            "bw": f"{_num(self.bandwidth)}Bps",
            "lat": f"{_num(self.latency)}s",
            "sharing_policy": "SPLITDUPLEX",
        }
        if self.loopback_bandwidth is not None:
            attrs["loopback_bw"] = f"{_num(self.loopback_bandwidth)}Bps"
            attrs["loopback_lat"] = f"{_num(self.loopback_latency)}s"
        if self.backbone_bandwidth is not None:
            attrs["bb_bw"] = f"{_num(self.backbone_bandwidth)}Bps"
            attrs["bb_lat"] = f"{_num(self.backbone_latency)}s"
            attrs["bb_sharing_policy"] = "SHARED"
        cluster = "\n".join(f'           {k}="{v}"' for k, v in attrs.items())
        return (
            "<?xml version='1.0'?>\n"
            '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">\n'
            '<platform version="4.1">\n'
            f"  <!-- {self.hosts} hosts of {self.ranks_per_host} slots; each host has one link to a switch -->\n"
            f"  <cluster\n{cluster}/>\n"
            "</platform>\n"
        )

    def hostfile(self, ranks: int) -> str:
        """An MPI hostfile for `ranks` ranks, one line per rank, filling each host's slots in turn."""
        self.check_ranks(ranks)
        return "".join(f"{self.host_name(r // self.ranks_per_host)}\n" for r in range(ranks))

    def check_ranks(self, ranks: int) -> None:
        """Raise ValueError unless 1 <= ranks <= slots."""
        _count("ranks", ranks, "pass the number of MPI ranks, e.g. 8")
        if ranks > self.slots:
            raise ValueError(
                f"{ranks} ranks do not fit: the platform has {self.slots} slots ({self.hosts} hosts x "
                f"{self.ranks_per_host} ranks per host); pass at most {self.slots} ranks or a bigger platform"
            )


def lab_platform(hosts: int, rate_bits_per_s: float | str, latency_s: float = 20e-6) -> Platform:
    """The network lab (utils.netlab) as a SimGrid platform: one rank per host, each host one full-duplex link
    to a switch.

    `rate_bits_per_s` as the lab takes it ('200mbit' or bits per second); `latency_s` is the one-way latency
    between two hosts (split over their two links; 20 µs, the per-step latency lesson 03 assumes).
    """
    rate = netlab.parse_bandwidth(rate_bits_per_s)
    if rate is None:
        raise ValueError("the simulated lab needs a rate, like '200mbit': an unshaped link has no bandwidth to model")
    _non_negative("latency_s", latency_s)
    return Platform(hosts=hosts, ranks_per_host=1, bandwidth=rate / 8, latency=latency_s / 2)


def two_level_platform(
    instances: int,
    gpus_per_instance: int,
    intra_bytes_per_s: float,
    intra_latency_s: float,
    net_bytes_per_s: float,
    net_latency_s: float,
) -> Platform:
    """GPU instances on one network: GPUs of an instance talk over a loopback (NVLink) of `intra_bytes_per_s`
    per flow; every instance has one NIC of `net_bytes_per_s` (shared by all its GPUs) to a non-blocking switch.

    `net_latency_s` is the one-way latency between two instances (split over their two links).
    """
    _positive("intra_bytes_per_s", intra_bytes_per_s, "pass the GPU-to-GPU rate, e.g. 300e9 (NVLink on a p4d)")
    _positive("net_bytes_per_s", net_bytes_per_s, "pass the instance's network rate, e.g. 50e9 (400 Gbit/s)")
    _non_negative("net_latency_s", net_latency_s)
    return Platform(
        hosts=instances,
        ranks_per_host=gpus_per_instance,
        bandwidth=net_bytes_per_s,
        latency=net_latency_s / 2,
        loopback_bandwidth=intra_bytes_per_s,
        loopback_latency=intra_latency_s,
    )


@dataclass(frozen=True)
class SimResult:
    """One simulated allreduce: simulated seconds (best and mean over the repeats), and how it was obtained."""

    seconds: float  # simulated: the fastest repeat, from the last rank's call to the last rank's result
    mean: float  # simulated: mean over the repeats
    ranks: int
    nbytes: int
    algorithm: str
    network_model: str
    wall_seconds: float  # real time the simulation took on this machine (build excluded)
    command: str  # the smpirun command (its platform and hostfile were in a temporary folder)
    times: tuple[float, ...] = ()  # simulated seconds of each repeat
    warnings: tuple[str, ...] = ()  # SimGrid's warnings, e.g. an algorithm falling back to another


def _run(cmd: list[str], timeout: float | None, cwd: Path, env: dict[str, str], what: str) -> str:
    """Run `cmd` in a session of its own; on a timeout, Ctrl-C or any error stop its whole process group."""
    out_path, err_path = cwd / f"{what}.out", cwd / f"{what}.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
        )
    handle = psutil.Process(proc.pid)  # taken before anyone can collect it: names this very process
    try:
        proc.wait(timeout=timeout)
    except BaseException as stopped:  # the timeout, KeyboardInterrupt, or anything else
        _stop_group(proc, handle)
        if isinstance(stopped, subprocess.TimeoutExpired):
            raise SimGridError(
                f"{what} took over {timeout:g} s and was stopped; pass a larger timeout, or simulate fewer ranks "
                f"or a smaller message\n{_tail(err_path)}"
            ) from None
        raise
    output = out_path.read_text(errors="replace")
    if proc.returncode != 0:
        raise SimGridError(
            f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{_tail(err_path)}{_tail_text(output)}"
        )
    return output


def _group(pgid: int) -> list[psutil.Process]:
    """The running processes (zombies excluded) of process group `pgid`, its leader excluded."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != pgid and os.getpgid(proc.pid) == pgid and processes.alive(proc):
                found.append(proc)
        except (OSError, psutil.Error):  # ended meanwhile
            continue
    return found


def _stop_group(proc: subprocess.Popen, leader: psutil.Process) -> None:
    """SIGTERM smpirun's whole process group (SIGCONT too, for a stopped one), SIGKILL it after GRACE s.

    smpirun (the group's leader, our child) is collected last: until then its PID still names the group, so
    no signal can reach another process that was given a reused PID.
    """
    pgid = proc.pid

    def running() -> bool:
        return processes.alive(leader) or bool(_group(pgid))

    for signals in ((signal.SIGTERM, signal.SIGCONT), (signal.SIGKILL,)):
        for sig in signals:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + GRACE
        while running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not running():
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(GRACE)
    left = _group(pgid)
    if left:
        raise SimGridError(f"could not stop SimGrid's processes {sorted(p.pid for p in left)}: stop them by hand")


def _tail_text(text: str, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of `text` that say something (blank lines and C++ backtrace frames left out)."""
    kept = [line for line in text.splitlines() if line.strip() and not _BACKTRACE.match(line)][-lines:]
    return "\n".join(kept)


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    tail = _tail_text(text, lines)
    return tail + "\n" if tail else ""


def build() -> Path:
    """The SMPI build of SOURCE (compiled with `smpicc -O2` once per version of it and of SimGrid, then reused)."""
    reason = available()
    if reason:
        raise SimGridError(reason)
    smpicc = Path(shutil.which("smpicc") or "smpicc")
    # keyed on the program and on smpicc (a script that names SimGrid's version): a new SimGrid rebuilds it
    digest = hashlib.sha256(SOURCE.read_bytes() + smpicc.read_bytes()).hexdigest()[:16]
    binary = CACHE / f"allreduce-{digest}"
    if binary.exists():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="simgrid-build-") as tmp:
        built = Path(tmp) / binary.name
        _run(["smpicc", "-O2", str(SOURCE), "-o", str(built)], 300, Path(tmp), dict(os.environ), "smpicc")
        staging = CACHE / f".{binary.name}.{os.getpid()}"
        shutil.copy2(built, staging)
        os.replace(staging, binary)  # atomic: parallel tests may build it at the same time
    for old in CACHE.glob("allreduce-*"):  # builds of earlier versions of SOURCE
        if old != binary:
            old.unlink(missing_ok=True)
    return binary


def allreduce(
    platform: Platform,
    ranks: int,
    nbytes: int,
    algorithm: str = "lr",
    repeats: int = 3,
    network_model: str = "CM02",
    latency_factor: float | None = None,
    bandwidth_factor: float | None = None,
    crosstraffic: bool = False,
    tcp_window: float | None = None,
    timeout: float | None = 600.0,
) -> SimResult:
    """Simulate `repeats` MPI_Allreduce(MPI_SUM) of `nbytes` bytes (float32) over `ranks` ranks of `platform`.

    Ranks fill the hosts in order (ranks 0..7 on the first host of 8 slots). `latency_factor` and
    `bandwidth_factor` override the model's (CM02: 1 and 1; LV08: 13.01 and 0.97; SMPI takes none);
    `crosstraffic` and `tcp_window` (bytes) are described in the module's docstring. Raises ValueError for
    bad arguments, SimGridError where SimGrid is missing or the run fails or passes `timeout` seconds.
    """
    platform.check_ranks(ranks)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4 or nbytes % 4:
        raise ValueError(
            f"nbytes must be a whole number of float32 values (a multiple of 4, at least 4), got {nbytes!r}"
        )
    if nbytes // 4 > 2**31 - 1:
        raise ValueError(f"nbytes={nbytes} is over MPI's count limit (2**31 - 1 floats, about 8.6 GB): pass less")
    _count("repeats", repeats, "pass how many allreduces to time, e.g. 3")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown allreduce algorithm {algorithm!r}; SimGrid 3.32 has: {', '.join(ALGORITHMS)}")
    if algorithm in POWER_OF_TWO and ranks & (ranks - 1):
        raise ValueError(f"SimGrid's {algorithm!r} needs a power of two ranks, got {ranks}: pick another algorithm")
    if network_model not in NETWORK_MODELS:
        raise ValueError(f"unknown network model {network_model!r}; pass one of: {', '.join(NETWORK_MODELS)}")
    cfg = {
        "smpi/allreduce": algorithm,
        "smpi/simulate-computation": "no",
        "network/model": network_model,
    }
    if network_model in MODEL_FACTORS:
        lat_default, bw_default = MODEL_FACTORS[network_model]
        lat = lat_default if latency_factor is None else latency_factor
        bw = bw_default if bandwidth_factor is None else bandwidth_factor
        for name, value in (("latency_factor", lat), ("bandwidth_factor", bw)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < math.inf):
                raise ValueError(f"{name} must be a finite number above 0, got {value!r}")
        cfg["network/latency-factor"] = _num(lat)
        cfg["network/bandwidth-factor"] = _num(bw)
    elif latency_factor is not None or bandwidth_factor is not None:
        raise ValueError(
            f"the {network_model} model applies its own factors by message size (smpi/lat-factor, smpi/bw-factor): "
            "pass network_model='CM02' or 'LV08' to set latency_factor or bandwidth_factor"
        )
    if tcp_window is not None and (isinstance(tcp_window, bool) or not (0 < tcp_window < math.inf)):
        raise ValueError(f"tcp_window must be a number of bytes above 0, or None for no window; got {tcp_window!r}")
    cfg["network/crosstraffic"] = "yes" if crosstraffic else "no"
    cfg["network/TCP-gamma"] = _num(tcp_window or 0)

    binary = build()
    with tempfile.TemporaryDirectory(prefix="simgrid-run-") as tmp:
        folder = Path(tmp)
        (folder / "platform.xml").write_text(platform.xml())
        (folder / "hostfile").write_text(platform.hostfile(ranks))
        cmd = [
            "smpirun",
            "-np",
            str(ranks),
            "-platform",
            "platform.xml",
            "-hostfile",
            "hostfile",
            *(f"--cfg={key}:{value}" for key, value in cfg.items()),
            "--log=root.thres:warning",  # SimGrid's warnings and errors, not its info lines
            str(binary),
            str(nbytes),
            str(repeats),
        ]
        # smpirun copies the program once per rank into $TMPDIR (SMPI's privatization): keep them in this folder
        env = {**os.environ, "TMPDIR": tmp}
        start = time.monotonic()
        output = _run(cmd, timeout, folder, env, "smpirun")
        wall = time.monotonic() - start
        warnings = tuple(
            line.strip() for line in (folder / "smpirun.err").read_text(errors="replace").splitlines() if line.strip()
        )
    record = next((line for line in output.splitlines() if line.startswith("RESULT ")), None)
    if record is None:
        raise SimGridError(f"the simulation printed no RESULT line: {shlex.join(cmd)}\n{_tail_text(output)}")
    data = json.loads(record[len("RESULT ") :])
    return SimResult(
        seconds=float(data["seconds"]),
        mean=float(data["mean"]),
        ranks=ranks,
        nbytes=nbytes,
        algorithm=algorithm,
        network_model=network_model,
        wall_seconds=wall,
        command=shlex.join(cmd),
        times=tuple(float(t) for t in data["times"]),
        warnings=warnings,
    )


# --- Lesson 03's two uses: against the lab, and clusters the lab cannot build ------------------------------------


def against_lab(lab_rows, link_checks, own_seconds) -> tuple:
    """Simulate each allreduce the lab measured (utils.bench rows: link, link_bps, np, bytes, best_seconds) on a
    platform of the lab's hosts, at the share of the set rate its links carried and half their median round trip
    (`link_checks`: netlab's LinkMeasurements), with `own_seconds(n, nbytes)` of this machine's part added.
    Returns (a table of lab, simulated and error per allreduce, {rate: share}, the last SimResult)."""
    import pandas as pd

    rows, shares, sim = [], {}, None
    table = pd.DataFrame(lab_rows)
    for bps, measured in table.groupby("link_bps", sort=False):
        carried = [m for m in link_checks if m.set_bps == bps]
        if not carried:
            raise ValueError(f"no link check at {netlab.describe_rate(bps)}: measure the links first (Lab.measure)")
        share = shares[measured.link.iloc[0]] = float(sum(m.ratio for m in carried) / len(carried))
        one_way = 1e-6 * statistics.median(m.rtt_us for m in carried) / 2
        for _, r in measured.iterrows():
            n, size = int(r.np), int(r.bytes)
            plat = lab_platform(n, bps, latency_s=one_way)
            sim = allreduce(plat, n, size, repeats=1, bandwidth_factor=share)
            own = own_seconds(n, size)
            rows.append(
                {
                    "link": r.link,
                    "N": n,
                    "MiB": size / 2**20,
                    "lab (ms)": 1e3 * r.best_seconds,
                    "simulated network (ms)": 1e3 * sim.seconds,
                    "+ this machine's part (ms)": 1e3 * own,
                    "error": (sim.seconds + own) / r.best_seconds - 1,
                }
            )
    return pd.DataFrame(rows), shares, sim


#: What each run of `cluster_study` changes, beside the CM02 ring on the instances' platform.
STUDY = (
    "simulated ring (lr)",
    "simulated two-level (smp_rsag)",
    "simulated Rabenseifner (rab_rdb)",
    "simulated ring, LV08's two factors on the network",
    "simulated ring, backbone 4:1",
)


def cluster_study(instance_type: str, gpus: list[int], nbytes: int, progress: bool = True):
    """For each GPU count (whole instances of `instance_type`, from data/gpu_instances.csv): the formula's ring and
    tree (utils.allreduce_model) and the STUDY runs, in ms: the ring, two-level and Rabenseifner algorithms on CM02,
    the ring with LV08's TCP factors (latency x13.01, bandwidth x0.97) on the links between instances only, and the
    ring under a backbone that carries a quarter of the instances' network. With `progress`, a line as each count
    starts and as each run ends, and one every PROGRESS_EVERY seconds while a run goes on."""
    import dataclasses

    import pandas as pd

    from utils import allreduce_model

    one = allreduce_model.topology_of(instance_type, 1)
    rows = []
    for n_gpus in gpus:
        if n_gpus % one.gpus:
            raise ValueError(f"{n_gpus} GPUs are not whole {instance_type} instances of {one.gpus} GPUs")
        m = n_gpus // one.gpus
        topo = allreduce_model.topology_of(instance_type, m)
        plat = two_level_platform(
            m, one.gpus, one.inside.bytes_per_s, one.inside.latency, one.network.bytes_per_s, one.network.latency
        )
        tcp = dataclasses.replace(plat, latency=13.01 * plat.latency, bandwidth=0.97 * plat.bandwidth)
        core = dataclasses.replace(plat, backbone_bandwidth=m / 4 * one.network.bytes_per_s)
        runs = dict(zip(STUDY, [(plat, "lr"), (plat, "smp_rsag"), (plat, "rab_rdb"), (tcp, "lr"), (core, "lr")]))
        row = {
            "GPUs": n_gpus,
            "formula: ring (NCCL)": 1e3 * float(allreduce_model.allreduce_seconds(topo, nbytes)),
            "formula: tree (NCCL)": 1e3 * float(allreduce_model.allreduce_seconds(topo, nbytes, "tree")),
        }
        start = time.perf_counter()
        if progress:
            print(f"{n_gpus} GPUs ({m} instance{'s' if m > 1 else ''}): {len(runs)} runs to simulate", flush=True)
        for label, (platform, algorithm) in runs.items():
            began = time.perf_counter()
            with _ticking(f"  {label}" if progress else None):
                row[label] = 1e3 * allreduce(platform, n_gpus, nbytes, algorithm=algorithm, repeats=1).seconds
            if progress:
                print(f"  {label}: {row[label]:.2f} ms ({time.perf_counter() - began:.0f} s to simulate)", flush=True)
        rows.append(row)
        if progress:
            print(f"{n_gpus} GPUs simulated in {time.perf_counter() - start:.1f} s", flush=True)
    return pd.DataFrame(rows).set_index("GPUs")


#: Seconds between two "still simulating" lines of a long run (cluster_study's progress).
PROGRESS_EVERY = 15.0


@contextlib.contextmanager
def _ticking(label: str | None, every: float = PROGRESS_EVERY):
    """While the block runs, print `label: still simulating, N s so far` every `every` seconds (nothing for None)."""
    if label is None:
        yield
        return
    import threading

    done, began = threading.Event(), time.perf_counter()

    def tick() -> None:
        while not done.wait(every):
            print(f"{label}: still simulating, {time.perf_counter() - began:.0f} s so far", flush=True)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()


def why_fastest(label: str, gpus: int, instances: int) -> str:
    """Why one of cluster_study's three algorithms (its STUDY label) is the fastest on `instances` of `gpus` GPUs."""
    n = gpus * instances
    reasons = {
        STUDY[0]: "its 2(N-1) steps cost less here than what the others pay",
        STUDY[1]: f"across the instances only one rank an instance takes part, so its ring has 2(M-1) = "
        f"{2 * (instances - 1)} steps instead of {2 * (n - 1)}",
        STUDY[2]: f"it takes 2 log2(N) = {2 * int(math.log2(n))} steps instead of {2 * (n - 1)}, and sends slightly "
        "fewer bytes across the network, (1 - 1/M) b instead of (1 - 1/N) b a phase (its first halving steps pair "
        "ranks of the same instance)",
    }
    if label not in reasons:
        raise ValueError(f"{label!r} is not one of the algorithms compared: {', '.join(STUDY[:3])}")
    return reasons[label]
