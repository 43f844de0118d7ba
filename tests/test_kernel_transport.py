"""JupyterLab's kernels get CurveZMQ keys (make lab's server config): no 'running over TCP without encryption'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from jupyter_client import KernelManager

CONFIG = Path(sys.prefix) / "etc" / "jupyter" / "jupyter_server_config.d" / "course.json"
WARNING = "Kernel is running over TCP without encryption"


def _start_and_run(policy: str, log: Path) -> tuple[str, bool]:
    """Start the course's kernel with a transport-encryption policy, run one line; return its stderr and
    whether it was given Curve keys."""
    km = KernelManager(kernel_name="python3", transport_encryption=policy)
    with log.open("w") as err:
        km.start_kernel(stderr=err)
        try:
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=120)
            reply = kc.execute_interactive("6 * 7", timeout=60)
            assert reply["content"]["status"] == "ok"
            kc.stop_channels()
        finally:
            km.shutdown_kernel(now=True)
    return log.read_text(), km.curve_secretkey is not None


def test_the_server_config_gives_kernels_encrypted_sockets(tmp_path):
    if not CONFIG.exists():
        pytest.fail(f"{CONFIG} is missing: tools/setup_env.sh writes it (run `make env`)")
    policy = json.loads(CONFIG.read_text())["MappingKernelManager"]["transport_encryption"]
    stderr, keyed = _start_and_run(policy, tmp_path / "configured.log")
    assert keyed and WARNING not in stderr, stderr
    # The same kernel without the setting: ipykernel's warning, which the configuration removes.
    stderr, keyed = _start_and_run("disabled", tmp_path / "default.log")
    assert not keyed and WARNING in stderr
