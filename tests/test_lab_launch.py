"""`make lab`'s JupyterLab: the address it prints opens the learner's copy of lesson 00 (not the Launcher), and the
course's settings overrides (tools/jupyterlab_overrides.json) turn off the "official Jupyter news?" prompt. The
Makefile's recipe runs for real in a small copy of the course, with stand-ins for the set-up and for JupyterLab;
then this environment's JupyterLab is started with the arguments the recipe gave, and asked what it applies."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from utils import launch
from utils.paths import REPO_ROOT

OVERRIDES = REPO_ROOT / "tools" / "jupyterlab_overrides.json"
NEWS = "@jupyterlab/apputils-extension:notification"
SCHEMAS = Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas"


def test_the_course_overrides_turn_off_the_news_prompt_as_jupyterlabs_schemas_allow():
    overrides = json.loads(OVERRIDES.read_text())
    assert overrides[NEWS]["fetchNews"] == "false"  # "Never" (the prompt asks while it is "none")
    for plugin, values in overrides.items():
        package, name = plugin.split(":")
        schema = json.loads((SCHEMAS / package / f"{name}.json").read_text())
        jsonschema.validate(values, schema)  # a misspelt key or a value the setting does not take fails here
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"fetchNews": False}, json.loads((SCHEMAS / NEWS.replace(":", "/")).with_suffix(".json").read_text())
        )


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """`make lab` in a small copy of the course: (its folder, the arguments JupyterLab was given)."""
    course = tmp_path_factory.mktemp("course")
    (course / "utils").mkdir()
    (course / "tools").mkdir()
    shutil.copy(REPO_ROOT / "Makefile", course / "Makefile")
    for f in ("__init__.py", "paths.py", "workspace.py"):
        shutil.copy(REPO_ROOT / "utils" / f, course / "utils" / f)
    shutil.copy(OVERRIDES, course / "tools" / OVERRIDES.name)
    (course / "tools" / "setup_env.sh").write_text("exit 0\n")
    (course / "notebooks").mkdir()
    lesson = new_notebook(cells=[new_code_cell("x = 1")])
    lesson.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(lesson, course / "notebooks" / "00_start_here.ipynb")
    bin_ = course / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_ / "jupyter").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/../../lab-args"\n')
    for f in ("python", "jupyter"):
        (bin_ / f).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    done = subprocess.run(
        ["make", "--no-print-directory", "lab"], cwd=course, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return course, (course / "lab-args").read_text().splitlines()


def test_make_lab_points_jupyterlab_at_lesson_00_and_writes_the_course_overrides(made):
    course, args = made
    assert args[0] == "lab" and "--LabApp.default_url=/lab/tree/workspace/00_start_here.ipynb" in args
    assert f"--notebook-dir={course}" in args
    written = course / ".venv" / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "course.json"
    assert json.loads(written.read_text()) == json.loads(OVERRIDES.read_text())


def test_jupyterlab_started_as_make_lab_starts_it_prints_lesson_00s_address_and_asks_no_news(made, tmp_path):
    """This environment's JupyterLab, with the recipe's arguments and its overrides folder, headless: the address it
    prints is the lesson's, `/` leads there, and the news setting is "Never" with no user setting."""
    course, args = made
    port = launch.free_ports(1)[0]
    command = [str(Path(sys.executable).with_name("jupyter")), *args, "--no-browser", f"--port={port}"]
    command += ["--ip=127.0.0.1", f"--LabApp.app_settings_dir={course / '.venv/share/jupyter/lab/settings'}"]
    command += [f"--LabApp.user_settings_dir={tmp_path / 'user'}", f"--LabApp.workspaces_dir={tmp_path / 'ws'}"]
    command += ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    env = {
        **os.environ,
        "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(command, cwd=course, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        address, deadline = None, time.monotonic() + 120
        while address is None:
            found = re.search(rf"http://127\.0\.0\.1:{port}/\S*", log.read_text())
            address = found.group(0) if found else None
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/lab/tree/workspace/00_start_here\.ipynb\?token=\w+", address)
        token = address.split("token=")[1]
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/?token={token}", timeout=30) as answer:
            assert answer.url.startswith(f"{base}/lab/tree/workspace/00_start_here.ipynb")
        with urllib.request.urlopen(f"{base}/lab/api/settings/{NEWS}?token={token}", timeout=30) as answer:
            news = json.load(answer)
        assert news["schema"]["properties"]["fetchNews"]["default"] == "false" and "fetchNews" not in news["settings"]
    finally:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
        import check_lab

        check_lab.stop_server(server)  # the server and every kernel it started
