"""The shell scripts run on Linux and on a stock macOS: GNU-only tools are used only through tools/portable.sh,
whose fallbacks (Python, getconf) are checked here by forcing them."""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PORTABLE = REPO / "tools" / "portable.sh"
MODES = {"native": {}, "fallback": {"COURSE_PORTABLE_FALLBACK": "1"}}


def bash(script: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    import os

    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        ["bash", "-c", f'. "{PORTABLE}"\n{script}'], env=full_env, capture_output=True, text=True, timeout=60, **kw
    )


@pytest.mark.parametrize("mode", MODES)
def test_sha256_hex_matches_hashlib(mode):
    data = b"the course\n\x00\xff"
    out = subprocess.run(
        ["bash", "-c", f'. "{PORTABLE}"; sha256_hex'],
        input=data,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", **MODES[mode]},
        timeout=30,
    )
    assert out.stdout.decode().strip() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("mode", MODES)
def test_with_timeout_stops_a_command_and_returns_124(mode):
    start = time.monotonic()
    out = bash("with_timeout 1 sleep 30; echo rc=$?", MODES[mode])
    assert "rc=124" in out.stdout, out.stderr
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("mode", MODES)
def test_with_timeout_passes_the_exit_status_through(mode):
    out = bash("with_timeout 20 sh -c 'exit 3'; echo rc=$?", MODES[mode])
    assert "rc=3" in out.stdout, out.stderr


@pytest.mark.parametrize("mode", MODES)
def test_cpu_count_is_a_positive_number(mode):
    out = bash("cpu_count", MODES[mode])
    assert int(out.stdout.strip()) >= 1


def test_apple_silicon_gets_the_tensorflow_wheel(tmp_path):
    fake = tmp_path / "uname"
    fake.write_text('#!/bin/sh\ncase "$1" in -s) echo Darwin ;; -m) echo arm64 ;; esac\n')
    fake.chmod(0o755)
    import os

    mac = bash("default_tf_package", {"PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert mac.stdout.strip() == "tensorflow"
    here = bash("default_tf_package").stdout.strip()
    assert here == (
        "tensorflow" if os.uname().sysname == "Darwin" and os.uname().machine == "arm64" else "tensorflow-cpu"
    )
    reqs = tmp_path / "r.txt"
    reqs.write_text("keras==1\ntensorflow-cpu==2.21.0\n")
    assert bash(f"requirements_for tensorflow '{reqs}'").stdout == "keras==1\ntensorflow==2.21.0\n"


GNU_ONLY = {
    r"\bsha256sum\b": "sha256_hex",
    r"(^|[;&|(]\s*|\s)timeout\s": "with_timeout",
    r"\bnproc\b": "cpu_count",
    r"readlink -f": 'cd "$(dirname ...)" && pwd',
    r"\bsed -i(\s|$)": "sed -i.bak (or Python)",
    r"\bdate -d\b": "Python",
    r"\bgrep -P\b": "grep -E",
}


def test_scripts_use_no_gnu_only_tool_directly():
    scripts = [p for p in (*REPO.glob("tools/**/*.sh"), *REPO.glob("scripts/**/*.sh")) if p != PORTABLE]
    assert len(scripts) >= 5
    found = []
    for path in scripts:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
            for pattern, instead in GNU_ONLY.items():
                if re.search(pattern, code):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}  (use {instead})")
    assert not found, "GNU-only tools (missing on a stock macOS):\n" + "\n".join(found)
