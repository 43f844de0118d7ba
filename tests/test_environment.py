"""The environment's pins live in one place, and environment.yml follows them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def requirement_pins() -> dict[str, str]:
    """Package name -> full pin line, from requirements.txt (comments skipped)."""
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert "==" in line, f"requirements.txt: '{line}' is not pinned with =="
        name = re.split(r"[\[=]", line, maxsplit=1)[0].lower()
        assert name not in pins, f"requirements.txt pins {name} twice"
        pins[name] = line
    return pins


def test_every_requirement_is_pinned_exactly_once():
    pins = requirement_pins()
    for must in ("tensorflow-cpu", "keras", "sagemaker", "moto", "jupyterlab", "nbclient", "portpicker"):
        assert must in pins, f"{must} is missing from requirements.txt"


def test_horovod_build_pin_is_present():
    text = (REPO / "requirements.txt").read_text()
    assert re.search(r"^#build: horovod==\d+\.\d+\.\d+$", text, re.M), "the '#build: horovod==' line is missing"


def test_environment_yml_matches_requirements():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    conda_pins = [d for d in deps if isinstance(d, str) and not d.startswith("python=")]
    pins = requirement_pins()
    tools = {k: v for k, v in pins.items() if k in ("pip", "setuptools", "wheel")}
    others = {k: v for k, v in pins.items() if k not in tools}
    assert sorted(conda_pins) == sorted(tools.values()), (
        "environment.yml's pip/setuptools/wheel differ from requirements.txt"
    )
    assert sorted(pip_section) == sorted(others.values()), (
        "environment.yml's pip section differs from requirements.txt: "
        f"only in environment.yml {sorted(set(pip_section) - set(others.values()))}, "
        f"only in requirements.txt {sorted(set(others.values()) - set(pip_section))}"
    )


def test_environment_yml_and_build_script_agree_on_python():
    setup = (REPO / "tools" / "setup_env.sh").read_text()
    assert "(3, 11)" in setup
    assert "python=3.11" in (REPO / "environment.yml").read_text()
