"""The network lab: hosts with their own names and addresses, links shaped to the set bandwidth, programs run
on every host, bad input refused, and nothing of the lab left after a run, a failure or a killed parent."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import needs_horovod

from utils import launch, netlab, processes

REPO = Path(__file__).resolve().parent.parent
SUPPORT = netlab.support()
# CI runs as root: there the lab must work, and a test that cannot build it fails instead of skipping.
needs_lab = pytest.mark.skipif(
    not SUPPORT.available and os.environ.get("CI") != "true", reason=f"no network lab here: {SUPPORT.reason}"
)


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True).stdout


def until(check, timeout=10.0):
    """Call `check` until it returns something false or `timeout` s have passed; return its last value."""
    deadline = time.monotonic() + timeout
    while (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


@pytest.mark.parametrize(
    "text, bps",
    [("200mbit", 200e6), ("1gbit", 1e9), ("10Gbit", 10e9), ("5000kbit", 5e6), ("1.5gbit", 1.5e9), (100e6, 100e6)],
)
def test_bandwidth_parsed(text, bps):
    assert netlab.parse_bandwidth(text) == pytest.approx(bps)


@pytest.mark.parametrize("text", [0, -5, "0mbit", "-1gbit", "fast", "10 parsecs", "100tbit", "10kbit", True])
def test_bad_bandwidth_says_what_to_write(text):
    with pytest.raises(ValueError, match="mbit|above 0|bits per second"):
        netlab.parse_bandwidth(text)


def test_unshaped_is_none_and_labelled():
    assert netlab.parse_bandwidth(None) is None and netlab.parse_bandwidth("none") is None
    assert netlab.describe_rate(None) == "unshaped"
    assert netlab.describe_rate(200e6) == "200 Mbit/s" and netlab.describe_rate(10e9) == "10 Gbit/s"


def test_bad_lab_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="at least 1"):
        netlab.Lab(0)
    with pytest.raises(ValueError, match="more than the lab holds"):
        netlab.Lab(netlab.MAX_HOSTS + 1)
    with pytest.raises(ValueError, match="names must differ"):
        netlab.Lab(2, names=["a", "a"])
    with pytest.raises(ValueError, match="names must differ"):
        netlab.Lab(2, names=["a", "b"], aliases=[["b"], []])
    with pytest.raises(ValueError, match="2 lists of aliases"):
        netlab.Lab(2, names=["a", "b"], aliases=[["c"]])
    with pytest.raises(ValueError, match="lower-case letters"):
        netlab.Lab(2, names=["a", "b"], aliases=[["Pod_0"], []])
    with pytest.raises(ValueError, match="holds 2 hosts"):
        netlab.Lab(3, subnet="10.77.0.0/30")
    with pytest.raises(ValueError, match="clashes with this machine's address 127.0.0.1"):
        netlab.Lab(2, subnet="127.0.0.0/24")


def test_loopback_fallback_when_switched_off(monkeypatch):
    monkeypatch.setenv(netlab.SWITCH_VAR, "off")
    netlab.support.cache_clear()
    try:
        sup = netlab.support()
        assert not sup.available and sup.kind == "none" and "loopback" in sup.reason
        with pytest.raises(netlab.LabError, match="cannot run here"):
            netlab.Lab(2).start()
    finally:
        netlab.support.cache_clear()


@needs_lab
def test_hosts_have_names_addresses_and_shaped_links():
    before = ip("-br", "link")
    # an alias: a second name for a host, as cluster DNS answers a pod's service name (lesson 09)
    aliases = [[], [], ["job-worker-1.ns.svc"]]
    with netlab.Lab(3, "200mbit", names=["algo-1", "algo-2", "algo-3"], aliases=aliases) as lab:
        assert lab.addresses == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
        show = (
            "hostname; getent hosts algo-3; echo $LAB_HOSTS $LAB_HOST_INDEX $TMPDIR; tc qdisc show dev eth0; "
            "getent ahostsv4 job-worker-1.ns.svc | head -1; ip -br addr"
        )
        # a caller's environment that names a TMPDIR (a copy of the notebook's) does not move a host's own
        result = lab.run([["sh", "-c", show]] * 3, envs=[{"TMPDIR": "/tmp"}] * 3, stream=False)
        tmp = [f"{lab._dir}/tmp{i}" for i in range(3)]
        for i, w in enumerate(result.workers):
            lines = w.output.splitlines()
            assert lines[0] == f"algo-{i + 1}"
            assert lines[1].split() == ["10.77.0.3", "algo-3", "job-worker-1.ns.svc"]
            assert lines[2] == f"10.77.0.1,10.77.0.2,10.77.0.3 {i} {tmp[i]}"
            assert "tbf" in lines[3] and "rate 200Mbit" in lines[3]
            assert lines[4].split()[0] == "10.77.0.3"
            assert f"10.77.0.{i + 1}/24" in w.output
        # the machine's own network gained nothing
        assert ip("-br", "link") == before
        assert "10.77.0" not in ip("-br", "addr")
        folder = lab._dir
    assert not folder.exists(), "the hosts' temporary folders are gone with the lab's"


@needs_lab
@pytest.mark.alone
@pytest.mark.parametrize("rate", ["100mbit", "1gbit"])
def test_links_achieve_their_set_bandwidth(rate):
    """No link carries more than its set rate, in any measurement; each carries at least 90 % of the rate left by
    the machine's CPU steal time, in the better of two measurements (a second only where the first fell short).

    A virtual machine's CPUs can be taken by its host for a while (steal time), and the token bucket keeps little
    credit (1 ms of traffic at 1 Gbit/s, three 9000-byte frames at 100 Mbit/s), so time stolen from a sender is
    bandwidth lost: on a 2-vCPU virtual machine with 8 to 17 % steal over each measurement, 1 Gbit/s links carried
    86 to 98 % of their rate (measured 2026-11-27, CPUs otherwise mostly idle), and 89.6 % with 11 to 14 % steal in
    a fresh-clone run of the tests. The bound is 0.9 x (1 - steal): 90 % where nothing is stolen; a link shaped to
    the wrong rate (bytes for bits, both directions on one bucket) still fails it."""
    tries = []  # (links, steal over the measurement, %)
    with netlab.Lab(2, rate) as lab:
        while len(tries) < 2 and not any(min(link.ratio for link in t[0]) > _floor(t[1]) for t in tries):
            psutil.cpu_times_percent(None)
            links = lab.measure(seconds=1.0)
            tries.append((links, getattr(psutil.cpu_times_percent(None), "steal", 0.0)))
    for links, _ in tries:
        assert len(links) == 2
        for link in links:
            assert link.ratio < 1.05, f"{link.host}: {link.achieved_bps:.3g} bit/s achieved, {rate} set"
            assert link.rtt_us > 0
    said = "; ".join(
        f"try {i + 1}: {', '.join(f'{link.ratio:.1%}' for link in links)} of {rate} with {steal:.0f} % CPU steal "
        f"(floor {_floor(steal):.1%})"
        for i, (links, steal) in enumerate(tries)
    )
    assert any(min(link.ratio for link in links) > _floor(steal) for links, steal in tries), said


def _floor(steal_percent: float) -> float:
    """The least share of its rate a link must carry while the machine's host takes `steal_percent` of its CPUs."""
    return 0.9 * (1 - steal_percent / 100)


@needs_lab
def test_a_failed_program_stops_the_others_and_the_lab_goes_on():
    with netlab.Lab(2, "1gbit") as lab:
        with pytest.raises(launch.WorkerError) as err:
            lab.run([["sh", "-c", "exit 3"], ["sleep", "60"]], stream=False, timeout=30)
        assert err.value.rank == 0 and "exited with code 3" in err.value.reason
        assert err.value.seconds < 10
        assert lab.run([["true"], ["true"]], stream=False).workers[1].returncode == 0


PARENT = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from utils import netlab
    lab = netlab.Lab(2, "100mbit").start()
    sleeper = subprocess.Popen([*lab.enter(1), "sleep", "300"])
    print(json.dumps({"holder": lab._holder.pid, "hosts": [h.pid for h in lab.hosts], "sleeper": sleeper.pid,
                      "folder": str(lab._dir)}), flush=True)
    time.sleep(300)
    """
)


@needs_lab
def test_nothing_is_left_when_the_parent_is_killed():
    """A JupyterLab kernel killed mid-run: the holder, the hosts, a program on a host and the lab's folder all go."""
    before_links, before_ns = ip("-br", "link"), ip("netns", "list")
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    try:
        info = json.loads(parent.stdout.readline())
        pids = [info["holder"], *info["hosts"], info["sleeper"]]
        assert all(psutil.pid_exists(p) for p in pids)
        procs = [psutil.Process(p) for p in pids]  # handles: a PID reused later is not taken for one of these
        mine = os.stat("/proc/self/ns/net").st_ino
        # it really runs inside a host (once nsenter has entered it)
        assert not until(lambda: os.stat(f"/proc/{info['sleeper']}/ns/net").st_ino == mine)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        # processes.alive: one that ends between a look at its PID and one at its status is gone, not an error
        left = until(lambda: [p.pid for p in procs if processes.alive(p)])
        assert not left, f"processes of the lab still running: {left}"
        assert not until(lambda: Path(info["folder"]).exists()), f"the lab's folder {info['folder']} is left behind"
    finally:
        parent.kill()
        parent.wait()
    assert ip("-br", "link") == before_links and ip("netns", "list") == before_ns


def test_cli_runs_on_every_host_and_exits_with_the_first_failure(tmp_path):
    if not SUPPORT.available and os.environ.get("CI") != "true":
        pytest.skip(SUPPORT.reason)
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "utils.netlab",
            "--hosts",
            "3",
            "--bandwidth",
            "200mbit",
            "--",
            "sh",
            "-c",
            "echo index $LAB_HOST_INDEX on $(hostname) of $LAB_HOSTS",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    for i in range(3):
        assert f"index {i} on host-{i + 1} of 10.77.0.1,10.77.0.2,10.77.0.3" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "utils.netlab", "--hosts", "2", "--", "sh", "-c", "exit $((LAB_HOST_INDEX + 4))"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert bad.returncode in (4, 5) and "exited with code" in bad.stderr
    refused = subprocess.run(
        [sys.executable, "-m", "utils.netlab", "--bandwidth=-1gbit", "--", "true"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert refused.returncode == 2 and "'100mbit'" in refused.stderr


ROOTLESS = textwrap.dedent(
    """
    import os
    from utils import netlab
    assert os.geteuid() != 0
    print(netlab.support().kind)
    with netlab.Lab(2, "100mbit") as lab:
        out = lab.run([["sh", "-c", "hostname; tc qdisc show dev eth0"]] * 2, stream=False)
        print(out.workers[1].output.strip())
        print(min(m.ratio for m in lab.measure(seconds=0.7)))
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root")
def test_the_lab_without_root_in_a_user_namespace(tmp_path):
    """As `nobody`: the same lab in a user namespace (where the kernel allows them; CI's does)."""
    python = "/usr/bin/python3"
    if shutil.which("setpriv") is None or not Path(python).exists():
        pytest.skip("setpriv or the system's python3 missing")
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    if version.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip(f"the system's python3 is not {sys.version_info[:2]}: the environment's packages won't load")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    done = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", python, "-c", ROOTLESS],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": f"{REPO}:{site}"},
    )
    assert done.returncode == 0, done.stderr
    kind, host, qdisc, ratio = done.stdout.strip().splitlines()
    assert kind == "userns" and host == "host-2" and "rate 100Mbit" in qdisc
    # The rate is what is tested (the shaping holds in a user namespace); how close a 0.7-s send comes to it from
    # below depends on the other tests' load (this one is not run alone; the bandwidth test is).
    assert 0.5 < float(ratio) < 1.05


@needs_lab
@needs_horovod
def test_horovod_and_tf_distribute_run_across_hosts():
    script = REPO / "scripts" / "workers"
    with netlab.Lab(2, "1gbit", names=["algo-1", "algo-2"]) as lab:
        hvd = lab.launch_horovod(script / "hello_horovod.py", stream=False, timeout=120).records()
        mwms = lab.launch_tf_workers(script / "hello_mwms.py", stream=False, timeout=120).records()
    assert [r["host"] for r in hvd] == ["algo-1", "algo-2"]
    assert all(r["size"] == 2 and r["sum"] == [3.0] * 4 for r in hvd)
    assert [r["workers"] for r in mwms] == [2, 2]
    assert mwms[0]["weights_after_step"] == mwms[1]["weights_after_step"]


@needs_lab
@needs_horovod
def test_horovod_runs_on_the_user_namespace_lab(monkeypatch):
    """The lab built the rootless way (a user namespace, entered with nsenter --user), Horovod across its hosts."""
    monkeypatch.setenv(netlab.SWITCH_VAR, "userns")
    netlab.support.cache_clear()
    try:
        if netlab.support().kind != "userns":
            pytest.skip(f"no user namespaces here: {netlab.support().reason}")
        with netlab.Lab(2, "500mbit") as lab:
            assert lab.kind == "userns"
            hvd = lab.launch_horovod(REPO / "scripts" / "workers" / "hello_horovod.py", stream=False, timeout=120)
        assert [r["host"] for r in hvd.records()] == ["host-1", "host-2"]
        assert all(r["sum"] == [3.0] * 4 for r in hvd.records())
    finally:
        netlab.support.cache_clear()


INCAST = textwrap.dedent(
    """
    import os, socket, threading, time
    me = int(os.environ["LAB_HOST_INDEX"]); hosts = os.environ["LAB_HOSTS"].split(",")
    if me == 0:  # receives from every other host at once: only its downlink (the switch port's tbf) limits it
        server = socket.create_server(("0.0.0.0", 5301))
        log, lock = [], threading.Lock()  # (when, bytes) of every read, from both senders
        def take(conn):
            while (data := conn.recv(1 << 20)):
                with lock: log.append((time.monotonic(), len(data)))
        threads = [threading.Thread(target=take, args=(server.accept()[0],)) for _ in hosts[1:]]
        [t.start() for t in threads]; [t.join() for t in threads]
        start, end = log[0][0], log[-1][0]
        bins = [0] * (int((end - start) / 0.1) + 1)  # bytes read in each 0.1 s
        for when, size in log:
            bins[int((when - start) / 0.1)] += size
        busiest = max(sum(bins[i : i + 10]) for i in range(max(1, len(bins) - 9)))  # the busiest second's bytes
        print("RATE", 8 * sum(s for _, s in log) / (end - start), "BUSIEST", 8 * busiest)
    else:
        for _ in range(100):
            try:
                out = socket.create_connection((hosts[0], 5301)); break
            except OSError:
                time.sleep(0.05)
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            out.sendall(b"x" * (1 << 20))
        out.close()
    """
)


@needs_lab
@pytest.mark.alone
def test_a_hosts_downlink_is_shaped_too():
    """Two hosts send to a third at once: together they get no more than the receiver's link."""
    with netlab.Lab(3, "100mbit") as lab:
        result = lab.run([[sys.executable, "-c", INCAST]] * 3, stream=False, timeout=60)
    rate, busiest = map(float, result.workers[0].output.split("RATE")[1].split("BUSIEST"))
    # The claim is the upper bound: over the whole transfer and over its busiest second. Two senders into one
    # shaped queue lose packets (incast); a flow that waits out TCP's retransmission timeouts leaves a slow tail
    # after the other has finished, so the mean over the whole transfer varies (27 to 99 Mbit/s over 35 runs alone
    # on this 2-core machine) while the busiest second stayed within 99.4 to 101.7 Mbit/s over 20 of them: its
    # lower bound catches a starved link.
    assert rate < 1.05 * 100e6, f"{rate:.3g} bit/s into a 100 Mbit/s downlink over the whole transfer"
    assert 0.7 * 100e6 < busiest < 1.05 * 100e6, f"{busiest:.3g} bit/s into a 100 Mbit/s downlink in its busiest second"


@needs_lab
def test_the_lab_has_no_way_out_and_the_machine_no_way_in():
    """The hosts have no route beyond their subnet (a connection to the machine's own addresses fails at once, no
    packet leaves), and the machine's namespace holds no address of the lab's subnet and no link to its switch."""
    import ipaddress
    import socket

    machine_ips = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET]
    probe = (
        "import socket, sys\n"
        "for ip in sys.argv[1:]:\n"
        "    try:\n"
        "        socket.create_connection((ip, 9), timeout=1).close(); print('REACHED', ip)\n"
        "    except OSError as exc:\n"
        "        print('blocked', ip, exc.errno)\n"
    )
    with netlab.Lab(2, "100mbit") as lab:
        out = lab.run([[sys.executable, "-c", probe, *machine_ips]], stream=False).workers[0].output
        routes = lab.run([["ip", "route"]], stream=False).workers[0].output
    outside = [ip for ip in machine_ips if not ip.startswith("127.")]
    assert outside and all(f"blocked {ip}" in out for ip in outside), out
    assert "default" not in routes and routes.strip().startswith(str(netlab.SUBNET)), routes
    subnet = ipaddress.ip_network(netlab.SUBNET)
    assert not [ip for ip in machine_ips if ipaddress.ip_address(ip) in subnet]


@needs_lab
@pytest.mark.parametrize("when", ["before the holder answers", "once the hosts are up"])
def test_a_lab_interrupted_while_it_starts_leaves_nothing(monkeypatch, when):
    """The Stop button (a KeyboardInterrupt) while `with Lab(...)` waits for the lab to come up: the holder, the
    hosts, their namespaces and the lab's folder go at once, not when the kernel ends."""
    lab, seen, real = netlab.Lab(3, "100mbit"), {}, netlab._read_line

    def interrupted(stream, timeout):
        seen["holder"], seen["folder"] = lab._holder.pid, lab._dir
        if when == "once the hosts are up":
            seen["hosts"] = json.loads(real(stream, timeout)[len("READY ") :])["pids"]
        raise KeyboardInterrupt

    monkeypatch.setattr(netlab, "_read_line", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            with lab:
                pytest.fail("the body of `with` ran")
        assert lab._holder is None and lab not in netlab._LIVE and not lab.hosts
        assert not seen["folder"].exists(), "the lab's folder is left behind"
        pids = [seen["holder"], *seen.get("hosts", [])]
        gone = until(lambda: [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"])
        assert not gone, f"processes of the lab still running: {gone}"
        assert not until(
            lambda: [
                p for p in psutil.process_iter(["cmdline"]) if str(seen["folder"]) in " ".join(p.info["cmdline"] or [])
            ]
        )
    finally:
        lab.stop()


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf", "soon"])
def test_cli_refuses_a_timeout_that_is_not_a_positive_number_before_building_the_lab(timeout):
    done = subprocess.run(
        [sys.executable, "-m", "utils.netlab", f"--timeout={timeout}", "--", "true"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--timeout" in done.stderr and "positive" in done.stderr, done.stderr
    assert "[lab]" not in done.stdout, "the lab was built first"


@needs_lab
def test_cli_names_the_host_that_failed():
    done = subprocess.run(
        [sys.executable, "-m", "utils.netlab", "--", "sh", "-c", '[ "$LAB_HOST_INDEX" = 1 ] && exit 5; sleep 30'],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    last = done.stderr.strip().splitlines()[-1]
    _remove_logs(last)
    assert done.returncode == 5 and last.startswith("[lab] host-2 exited with code 5"), done.stderr
    assert "worker" not in last, last


def _remove_logs(line: str) -> None:
    """Remove the run's log folder that the lab's command names ("...; logs in FOLDER"): a test keeps none."""
    if "; logs in " in line:
        folder = Path(line.rsplit("; logs in ", 1)[1].strip())
        if folder.name.startswith("run-"):
            shutil.rmtree(folder, ignore_errors=True)


def sleeping(parent: psutil.Process) -> list[psutil.Process]:
    found = []
    for p in parent.children(recursive=True):
        try:
            if p.name() == "sleep":
                found.append(p)
        except psutil.Error:
            continue
    return found


@needs_lab
def test_cli_interrupted_ends_with_one_line_and_status_130():
    """Ctrl-C of the lab's command: one line, no traceback, exit 130, and the lab and its programs gone."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "utils.netlab", "--", "sh", "-c", "echo started; sleep 60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        # as typed in a terminal: a suite started in the background (`make test &`) passes SIGINT on ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert cli.stdout.readline().startswith("[lab] "), "the lab is up"
        me = psutil.Process(cli.pid)
        assert not until(lambda: len(sleeping(me)) < 2, 30), "both hosts run their program"
        everything = me.children(recursive=True)
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=30)
    finally:
        cli.kill()
        cli.wait()
    _remove_logs(err.strip().splitlines()[-1] if err.strip() else "")
    assert cli.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "interrupted" in err
    assert not until(lambda: [p for p in everything if processes.alive(p)]), "processes of the lab still running"
