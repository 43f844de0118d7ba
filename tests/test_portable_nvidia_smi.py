"""The set-up's `nvidia-smi -L` probe (tools/portable.sh, nvidia_gpus) under faults: a stand-in that ignores SIGTERM,
one that leaves a child holding its output, one that prints garbage and one that prints nothing (S02-S04 of the
2026-11-28 fault report). Each gives one readable line within the bound, and the CPU build."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import path_with_nvidia_smi

REPO = Path(__file__).resolve().parent.parent
PORTABLE = REPO / "tools" / "portable.sh"
MODES = {"native": {}, "fallback": {"COURSE_PORTABLE_FALLBACK": "1"}}


def probe(tmp_path: Path, nvidia_smi: str, timeout: float = 30, **env: str) -> subprocess.CompletedProcess:
    """choose_tf_package in bash with a stand-in nvidia-smi (a shell line), as the set-up runs it (set -euo
    pipefail); stdout: its package, then why."""
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("keras==3.15.1\ntensorflow-cpu==2.21.0\n")
    script = (
        f'set -euo pipefail\n. "{PORTABLE}"\nchoose_tf_package "{reqs}"\nprintf "%s\\n" "$tf_package" "$tf_package_why"'
    )
    full = {
        **os.environ,
        "PATH": path_with_nvidia_smi(tmp_path / "bin", nvidia_smi),
        "TF_PACKAGE": "",
        "WHEELHOUSE": "",
    }
    full["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(["bash", "-c", script], env={**full, **env}, capture_output=True, timeout=timeout)


def first_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, out.stderr
    package, why = out.stdout.decode("utf-8").split("\n", 1)
    assert package == "tensorflow-cpu"
    return why.splitlines()[0]


@pytest.mark.parametrize("mode", MODES)
def test_S02_an_nvidia_smi_that_ignores_sigterm_gives_a_reason(tmp_path, mode):
    start = time.monotonic()
    out = probe(tmp_path, 'trap "" TERM; sleep 600', COURSE_NVIDIA_SMI_TIMEOUT="1", **MODES[mode])
    line = first_line(out)
    assert time.monotonic() - start < 15
    assert line.startswith("nvidia-smi is installed but failed (exit "), line
    assert "no answer in 1 s" in line, line
    assert not list((tmp_path / "tmp").iterdir())  # its temporary file is removed


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid (util-linux)")
@pytest.mark.parametrize("mode", MODES)
def test_S03_a_child_holding_nvidia_smis_output_does_not_hold_the_setup(tmp_path, mode):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    try:
        out = probe(
            tmp_path,
            f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 40' & sleep 600",
            timeout=25,  # before the fix, the probe waited for the child's end (40 s)
            COURSE_NVIDIA_SMI_TIMEOUT="1",
            **MODES[mode],
        )
        assert "no answer in 1 s" in first_line(out)
        assert time.monotonic() - start < 15
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("code", [3, 0])
def test_S04_garbage_from_nvidia_smi_is_quoted_as_one_readable_line(tmp_path, code):
    garbage = r"printf '\033[2J\033[31mfail\033[0med\a here\000 \377\376\033]0;title\007\r\n'"
    out = probe(tmp_path, f"{garbage}; head -c 3000 /dev/urandom; exit {code}")
    assert b"null byte" not in out.stderr, out.stderr  # bash's warning about a NUL in $(...)
    line = first_line(out)
    said = "failed (exit 3: " if code else "lists no GPU (exit 0: "
    assert line.startswith(f"nvidia-smi is installed but {said}failed here ??)"), line
    assert line.isprintable() and line.isascii(), repr(line)
    # everything it prints is one readable line of at most 200 characters, whatever the random bytes
    long = probe(tmp_path, "head -c 20000 /dev/urandom; exit 5")
    line = first_line(long)
    assert line.isprintable() and line.isascii(), repr(line)
    quoted = line.split("failed (exit 5: ", 1)[1].rsplit("), so no GPU", 1)[0]
    assert 0 < len(quoted) <= 200


def test_S04_an_nvidia_smi_that_prints_nothing_says_so(tmp_path):
    assert first_line(probe(tmp_path, "exit 0")).startswith(
        "nvidia-smi is installed but lists no GPU (exit 0: printed nothing), so no GPU can be used"
    )
    assert "failed (exit 4: printed nothing)" in first_line(probe(tmp_path, "printf '\\033[0m\\n\\n'; exit 4"))
