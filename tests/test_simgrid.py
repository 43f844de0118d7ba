"""SimGrid's SMPI runs a real MPI_Allreduce on a described cluster: simulated times match hand-computed ones on
tiny platforms, bad arguments are refused with what to pass, and a stopped run leaves no process behind.

The platforms are stars: every host has one link to a switch. A message between two hosts crosses two links,
its sender's (up) and its receiver's (down); with SPLITDUPLEX each direction of a link has the full bandwidth
B, as the lab's tbf shapes each direction. In a ring every host sends to its right and receives from its left
at once: each link direction carries one flow, so every flow runs at B. With network model CM02 (no TCP
corrections) and no latency, the ring allreduce of b bytes over N ranks thus takes 2(N-1)/N * b/B.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET

import psutil
import pytest

from utils import simgrid
from utils.allreduce_model import ring_seconds

needs_simgrid = pytest.mark.skipif(simgrid.available() != "", reason=simgrid.available() or "SimGrid is here")

MIB = 1 << 20
RATE = 25e6  # bytes/s: the lab's 200 Mbit/s


def ring(n: int, nbytes: float, bandwidth: float, alpha: float = 0.0) -> float:
    """The ring formula: 2(N-1) alpha + 2(N-1)/N * b / B."""
    return float(ring_seconds(n, nbytes, alpha, bandwidth))


# --- platforms and argument checks (no SimGrid needed) ------------------------------------------------------


def test_platform_xml_is_one_splitduplex_cluster():
    plat = simgrid.Platform(hosts=3, ranks_per_host=2, bandwidth=1.5e9, latency=5e-6)
    root = ET.fromstring(plat.xml())
    assert root.tag == "platform" and root.get("version") == "4.1"
    (cluster,) = root.findall("cluster")
    assert cluster.get("radical") == "0-2" and cluster.get("prefix") == "host-"
    assert cluster.get("bw") == "1500000000.0Bps" and cluster.get("lat") == "5e-06s"
    assert cluster.get("sharing_policy") == "SPLITDUPLEX"
    assert cluster.get("loopback_bw") is None and cluster.get("bb_bw") is None  # none asked for: none written

    two = simgrid.two_level_platform(4, 8, 300e9, 1e-6, 50e9, 10e-6)
    c = ET.fromstring(two.xml()).find("cluster")
    assert c.get("loopback_bw") == "300000000000.0Bps" and c.get("loopback_lat") == "1e-06s"
    assert c.get("bw") == "50000000000.0Bps"  # the instance's NIC, shared by its 8 GPUs
    assert two.latency == pytest.approx(5e-6)  # 10 µs between instances: 5 µs on each of the two links
    assert two.slots == 32

    backbone = simgrid.Platform(2, 1, 1e9, 0.0, backbone_bandwidth=2e9)
    assert ET.fromstring(backbone.xml()).find("cluster").get("bb_sharing_policy") == "SHARED"


def test_hostfile_fills_each_host_in_turn():
    plat = simgrid.Platform(hosts=3, ranks_per_host=8, bandwidth=1e9, latency=0.0)
    lines = plat.hostfile(10).splitlines()
    assert lines == ["host-0"] * 8 + ["host-1"] * 2


def test_lab_platform_mirrors_the_lab():
    plat = simgrid.lab_platform(3, "200mbit")
    assert plat.bandwidth == RATE and plat.ranks_per_host == 1
    assert plat.latency == pytest.approx(10e-6)  # 20 µs between two hosts, over two links
    assert simgrid.lab_platform(2, 200e6, latency_s=0).bandwidth == RATE
    with pytest.raises(ValueError, match="needs a rate"):
        simgrid.lab_platform(2, None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hosts": 0}, "hosts must be a whole number, at least 1"),
        ({"ranks_per_host": 0}, "ranks_per_host must be"),
        ({"bandwidth": 0.0}, "bandwidth must be a finite number of bytes per second above 0"),
        ({"bandwidth": -1e9}, "bandwidth must be"),
        ({"bandwidth": float("inf")}, "bandwidth must be"),
        ({"latency": -1e-6}, "latency must be a finite number of seconds, 0 or more"),
        ({"loopback_bandwidth": 0.0}, "loopback_bandwidth must be"),
        ({"backbone_bandwidth": float("nan")}, "backbone_bandwidth must be"),
        ({"loopback_latency": 1e-6}, "loopback_latency needs a loopback_bandwidth"),
    ],
)
def test_platform_refuses_bad_values(kwargs, message):
    args = {"hosts": 2, "ranks_per_host": 1, "bandwidth": 1e9, "latency": 0.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        simgrid.Platform(**args)


def test_allreduce_refuses_bad_arguments_before_running_anything():
    plat = simgrid.Platform(hosts=2, ranks_per_host=4, bandwidth=1e9, latency=0.0)
    with pytest.raises(ValueError, match=r"9 ranks do not fit: the platform has 8 slots \(2 hosts x 4"):
        simgrid.allreduce(plat, 9, MIB)
    with pytest.raises(ValueError, match="ranks must be"):
        simgrid.allreduce(plat, 0, MIB)
    with pytest.raises(ValueError, match="multiple of 4, at least 4"):
        simgrid.allreduce(plat, 2, 2)
    with pytest.raises(ValueError, match="multiple of 4"):
        simgrid.allreduce(plat, 2, 4 * 1000 + 1)
    with pytest.raises(ValueError, match="unknown allreduce algorithm 'ring'.*lr, rdb"):
        simgrid.allreduce(plat, 2, MIB, algorithm="ring")
    with pytest.raises(ValueError, match="power of two"):
        simgrid.allreduce(plat, 6, MIB, algorithm="rab1")
    with pytest.raises(ValueError, match="unknown network model"):
        simgrid.allreduce(plat, 2, MIB, network_model="TCP")
    with pytest.raises(ValueError, match="own factors by message size"):
        simgrid.allreduce(plat, 2, MIB, network_model="SMPI", latency_factor=2.0)
    with pytest.raises(ValueError, match="bandwidth_factor must be"):
        simgrid.allreduce(plat, 2, MIB, bandwidth_factor=0.0)


def test_without_simgrid_the_reason_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no smpicc, no smpirun
    reason = simgrid.available()
    assert "not installed" in reason and "apt-get install -y libsimgrid-dev" in reason
    assert "Installing_SimGrid" in reason
    with pytest.raises(simgrid.SimGridError, match="libsimgrid-dev"):
        simgrid.allreduce(simgrid.lab_platform(2, "200mbit"), 2, MIB)


# --- simulated times (SimGrid needed) ------------------------------------------------------------------------


@needs_simgrid
def test_two_ranks_follow_the_ring_formula():
    # CM02, no latency: 2(N-1)/N * b/B = 1 MiB / 25 MB/s = 41.94 ms. Each rank sends its half and receives the
    # other's at once: host 0's link up and host 1's link down carry one flow, the other two the other flow.
    result = simgrid.allreduce(simgrid.lab_platform(2, "200mbit", latency_s=0), 2, MIB)
    assert result.seconds == pytest.approx(ring(2, MIB, RATE), rel=1e-3)
    assert result.mean == pytest.approx(result.seconds, rel=1e-6)  # a simulation is deterministic
    assert len(result.times) == 3 and result.ranks == 2 and result.nbytes == MIB and result.algorithm == "lr"
    for cfg in ("smpi/allreduce:lr", "network/model:CM02", "network/latency-factor:1.0", "network/crosstraffic:no"):
        assert f"--cfg={cfg}" in result.command


@needs_simgrid
def test_four_ranks_take_one_and_a_half_times_two():
    # 2(N-1)/N: 1 for N = 2, 1.5 for N = 4.
    plat = simgrid.lab_platform(4, "200mbit", latency_s=0)
    two, four = (simgrid.allreduce(plat, n, 4 * MIB, repeats=1).seconds for n in (2, 4))
    assert four / two == pytest.approx(1.5, rel=1e-3)
    assert four == pytest.approx(ring(4, 4 * MIB, RATE), rel=1e-3)


@needs_simgrid
def test_latency_is_paid_once_per_ring_step():
    # latency_s is host to host (two links of 0.5 ms): 2(N-1) = 6 steps of 1 ms on top of the bandwidth term.
    plat = simgrid.lab_platform(4, "200mbit", latency_s=1e-3)
    result = simgrid.allreduce(plat, 4, MIB, repeats=1)
    assert result.seconds == pytest.approx(ring(4, MIB, RATE, alpha=1e-3), rel=1e-3)


@needs_simgrid
def test_ranks_on_one_host_go_at_the_loopback_rate():
    # One host, 4 ranks: every message takes the loopback (1 GB/s, each flow its own: a FATPIPE), never the
    # host's slow link.
    plat = simgrid.Platform(hosts=1, ranks_per_host=4, bandwidth=1e6, latency=0.0, loopback_bandwidth=1e9)
    result = simgrid.allreduce(plat, 4, MIB, repeats=1)
    assert result.seconds == pytest.approx(ring(4, MIB, 1e9), rel=1e-3)


@needs_simgrid
def test_without_a_loopback_ranks_on_one_host_share_its_link():
    # No loopback: both flows of a 2-rank ring on one host go up the host's link and back down it, so they
    # share each direction: twice the time of the same ring across two hosts.
    plat = simgrid.Platform(hosts=1, ranks_per_host=2, bandwidth=RATE, latency=0.0)
    result = simgrid.allreduce(plat, 2, MIB, repeats=1)
    assert result.seconds == pytest.approx(2 * ring(2, MIB, RATE), rel=1e-3)


@needs_simgrid
def test_a_backbone_is_shared_by_all_traffic_between_hosts():
    # A backbone of B/2 that both flows of the 2-rank ring cross: each gets B/4, four times the time.
    plat = simgrid.Platform(hosts=2, ranks_per_host=1, bandwidth=RATE, latency=0.0, backbone_bandwidth=RATE / 2)
    result = simgrid.allreduce(plat, 2, MIB, repeats=1)
    assert result.seconds == pytest.approx(4 * ring(2, MIB, RATE), rel=1e-3)


@needs_simgrid
def test_lv08_is_cm02_with_tcp_factors():
    plat = simgrid.lab_platform(2, "200mbit")
    lv08 = simgrid.allreduce(plat, 2, MIB, repeats=1, network_model="LV08")
    by_hand = simgrid.allreduce(plat, 2, MIB, repeats=1, latency_factor=13.01, bandwidth_factor=0.97)
    assert "--cfg=network/latency-factor:13.01" in lv08.command
    assert lv08.seconds == pytest.approx(by_hand.seconds, rel=1e-9)
    # latency x 13.01 and bandwidth x 0.97 on 2 steps of 20 µs: 2 x 13.01 x 20 µs + 41.94 ms / 0.97
    assert lv08.seconds == pytest.approx(2 * 13.01 * 20e-6 + ring(2, MIB, RATE) / 0.97, rel=1e-3)


@needs_simgrid
def test_a_failed_run_shows_simgrids_reason(monkeypatch):
    # SimGrid aborts rab1 on 6 ranks (not a power of two). The module refuses it first; with that check
    # turned off, SimGrid's own error has to come through, without its C++ backtrace.
    monkeypatch.setattr(simgrid, "POWER_OF_TWO", frozenset())
    plat = simgrid.Platform(hosts=3, ranks_per_host=2, bandwidth=1e9, latency=0.0)
    with pytest.raises(simgrid.SimGridError, match=r"(?s)smpirun failed.*non power of two") as caught:
        simgrid.allreduce(plat, 6, MIB, algorithm="rab1", repeats=1)
    assert "->" not in str(caught.value)


def _record_sessions(monkeypatch) -> list[int]:
    """Make utils.simgrid note the PID (= process group) of every command it starts."""
    started: list[int] = []

    class Recording(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self.pid)

    monkeypatch.setattr(simgrid.subprocess, "Popen", Recording)
    return started


def _left_in(groups: list[int]) -> list[psutil.Process]:
    """Running processes (zombies excluded) of the given process groups."""
    left = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) in groups and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except (OSError, psutil.Error):
            continue
    return left


BIG = simgrid.two_level_platform(16, 8, 300e9, 1e-6, 50e9, 10e-6)  # 128 ranks of 100 MB: many seconds


@needs_simgrid
def test_a_timeout_stops_every_process_of_the_run(monkeypatch):
    simgrid.build()  # compiled beforehand, so that the timeout hits the simulation
    started = _record_sessions(monkeypatch)
    begin = time.monotonic()
    with pytest.raises(simgrid.SimGridError, match="took over 0.5 s and was stopped"):
        simgrid.allreduce(BIG, 128, 100_000_000, timeout=0.5)
    assert time.monotonic() - begin < 10
    assert started and not _left_in(started)


@needs_simgrid
def test_ctrl_c_stops_every_process_of_the_run(monkeypatch):
    simgrid.build()
    started = _record_sessions(monkeypatch)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            simgrid.allreduce(BIG, 128, 100_000_000)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert started and not _left_in(started)


def test_a_long_run_says_it_is_still_going(capsys):
    with simgrid._ticking("  ring", every=0.05):
        time.sleep(0.6)  # room for 12 ticks, of which 3 are asked for: a busy machine delays the ticking thread
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 3 and all(line.startswith("  ring: still simulating, ") for line in lines), lines
    with simgrid._ticking(None, every=0.05):
        time.sleep(0.1)
    assert capsys.readouterr().out == ""
