"""JupyterLab's kernels get CurveZMQ keys (make lab's server config): no 'running over TCP without encryption'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from jupyter_client import BlockingKernelClient, KernelManager

from utils import launch

PREFIX = Path(sys.prefix)
#: The file tools/setup_env.sh writes. jupyter_server reads every setting of jupyter_server_config.json (in each
#: config folder); of the files in jupyter_server_config.d/ it reads only ServerApp.jpserver_extensions.
CONFIG = PREFIX / "etc" / "jupyter" / "jupyter_server_config.json"
WARNING = "Kernel is running over TCP without encryption"
TOKEN = "kernel-transport-test"
#: Seconds a heartbeat may go unanswered before the test's client calls the kernel dead.
HEARTBEAT_S = 15.0


def _api(port: int, path: str, method: str = "GET", body: dict | None = None) -> dict | None:
    """One call to the server's REST API; its JSON answer (None for an empty one)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"token {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def _lab_kernel(tmp_path: Path) -> tuple[dict, str]:
    """Start JupyterLab as `make lab` does, start a python3 kernel through its API and run one line in it;
    return the kernel's connection file (as a dict) and everything the server and kernel wrote."""
    port, runtime, log = launch.free_ports(1)[0], tmp_path / "runtime", tmp_path / "lab.log"
    env = os.environ | {"JUPYTER_PATH": str(PREFIX / "share" / "jupyter"), "JUPYTER_RUNTIME_DIR": str(runtime)}
    argv = [str(PREFIX / "bin" / "jupyter"), "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1"]
    argv += [f"--IdentityProvider.token={TOKEN}", f"--notebook-dir={tmp_path}", "--ServerApp.port_retries=0"]
    argv += ["--allow-root"] if os.getuid() == 0 else []
    with log.open("w") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                _api(port, "/api/status")
                break
            except OSError:
                assert server.poll() is None, f"JupyterLab exited:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"JupyterLab did not answer in 120 s:\n{log.read_text()}"
                time.sleep(0.5)
        kernel = _api(port, "/api/kernels", "POST", {"name": "python3"})
        connection = json.loads((runtime / f"kernel-{kernel['id']}.json").read_text())
        client = BlockingKernelClient()
        client.load_connection_info(connection)
        # A client that did not start its kernel judges it alive by its heartbeat, and by default calls it dead
        # after one ping left unanswered for 1 s: on a busy 2-core machine a live kernel can take longer.
        client.hb_channel.time_to_dead = HEARTBEAT_S
        client.start_channels()
        try:
            client.wait_for_ready(timeout=120)
            reply = client.execute_interactive("6 * 7", timeout=60)
            assert reply["content"]["status"] == "ok"
        except RuntimeError as error:  # "Kernel died before replying": what the server and kernel wrote says why
            raise AssertionError(f"{error}\n{log.read_text()}") from error
        finally:
            client.stop_channels()
        _api(port, f"/api/kernels/{kernel['id']}", "DELETE")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return connection, log.read_text()


def test_jupyterlab_kernels_start_with_encrypted_sockets(tmp_path):
    assert CONFIG.exists(), f"{CONFIG} is missing: tools/setup_env.sh writes it (run `make env`)"
    connection, log = _lab_kernel(tmp_path)
    assert connection.get("curve_publickey") and connection.get("curve_secretkey"), connection
    assert "Kernel started" in log and WARNING not in log, log


def test_a_kernel_without_keys_prints_the_warning(tmp_path):
    """The message the test above looks for is the one ipykernel prints when a kernel has no keys."""
    km = KernelManager(kernel_name="python3", transport_encryption="disabled")
    log = tmp_path / "kernel.log"
    with log.open("w") as err:
        km.start_kernel(stderr=err)
        try:
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=120)
            kc.stop_channels()
        finally:
            km.shutdown_kernel(now=True)
    assert km.curve_secretkey is None and WARNING in log.read_text()
