"""The environment report and the course map read what is really there."""

from __future__ import annotations

import json

import pytest
from conftest import needs_horovod

from utils import course, envinfo


def test_cpu_info_is_plausible():
    cpu = envinfo.cpu_info()
    assert cpu.logical_cores >= 1
    assert 1 <= cpu.usable_cores <= cpu.logical_cores
    assert cpu.model
    assert cpu.bf16_hardware == (cpu.has("avx512_bf16") or cpu.has("amx_bf16"))


def test_pins_are_read_from_requirements_including_the_horovod_build_line(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("# a comment with x==1\npip==26.3\nmoto[s3,sagemaker]==5.2.5\n#build: horovod==0.28.1\n")
    assert envinfo.pins(req) == {"pip": "26.3", "moto": "5.2.5", "horovod": "0.28.1"}


def test_versions_match_the_pins():
    pins = envinfo.pins()
    v = envinfo.versions()
    assert v["TensorFlow"] == pins["tensorflow-cpu"]
    assert v["Keras"] == pins["keras"]
    assert v["SageMaker SDK"] == pins["sagemaker"]
    checked = {row["package"]: row for row in envinfo.version_check()}
    assert checked["Keras"]["ok"] and checked["Keras"]["pinned"] == "3.15.1"
    assert v["Python"].startswith("3.11.")


@needs_horovod
def test_horovod_build_reports_gloo():
    info = envinfo.horovod_build()
    assert info["importable"], info["error"]
    assert info["gloo_built"] is True


def test_aws_credentials_detection(monkeypatch, tmp_path):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert envinfo.aws_credentials_present() is False
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert envinfo.aws_credentials_present() is True


def _notebook(path, cells):
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_read_lesson_extracts_title_and_objectives(tmp_path):
    md = "# 07 Title here\n\nText.\n\n## Objectives\n- first goal\n- second goal\n\n## Duration\n5 min\n"
    _notebook(tmp_path / "07_x.ipynb", [{"cell_type": "markdown", "source": [md], "metadata": {}}])
    lesson = course.read_lesson(tmp_path / "07_x.ipynb")
    assert lesson.title == "07 Title here"
    assert lesson.objectives == ["first goal", "second goal"]


def test_durations_round_trip(tmp_path):
    path = tmp_path / "d.csv"
    row = {
        "notebook": "01_a.ipynb",
        "mode": "smoke",
        "seconds": "12.5",
        "peak_memory_mib": "900",
        "cpu_model": "cpu",
        "usable_cores": "2",
        "date": "2026-01-01",
        "tensorflow": "2.21.0",
        "code_hash": "0123456789ab",
    }
    course.record_duration(row, path)
    course.record_duration({**row, "seconds": "14.0"}, path)  # replaces, does not append
    course.record_duration({**row, "mode": "full", "seconds": "300"}, path)
    rows = course.read_durations(path)
    assert len(rows) == 2
    assert course.duration_of("01_a.ipynb", "smoke", rows) == 14.0
    assert course.duration_of("01_a.ipynb", "full", rows) == 300.0
    assert course.duration_of("99_none.ipynb", "full", rows) is None
    assert course.peak_memory_of("01_a.ipynb", "full", rows) == 900.0
    assert rows[0]["code_hash"] == "0123456789ab"


def test_durations_file_with_missing_columns_says_how_to_fix(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("notebook,seconds\nx,1\n")
    with pytest.raises(ValueError, match="time_notebooks.py"):
        course.read_durations(path)


def test_measured_duration_line():
    rows = [
        {
            "notebook": "01_a.ipynb",
            "mode": "full",
            "seconds": "120",
            "cpu_model": "cpu X",
            "usable_cores": "2",
            "date": "2026-01-01",
            "tensorflow": "2.21.0",
        }
    ]
    line = course.measured_duration_line("01_a.ipynb", rows)
    assert "full mode 2.0 min" in line and "cpu X" in line and "smoke" not in line
    assert "not measured yet" in course.measured_duration_line("02_b.ipynb", rows)


def test_every_lesson_has_measured_durations_in_both_modes():
    """The course map shows a measured time for every notebook; re-time new ones with tools/time_notebooks.py."""
    rows = course.read_durations()
    missing = [
        (lesson.notebook, which)
        for lesson in course.lessons()
        for which in ("full", "smoke")
        if course.duration_of(lesson.notebook, which, rows) is None
    ]
    assert not missing, (
        f"data/notebook_durations.csv has no time for {missing}: run "
        "`python tools/time_notebooks.py --mode full NOTEBOOK` (and --mode smoke)"
    )


def test_cache_sizes_are_read_from_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"), (3, "Unified", "32M")]
    ):
        d = tmp_path / "cpu0" / "cache" / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert envinfo.cache_sizes(root=tmp_path) == {"L1d": 48 * 1024, "L2": 1024 * 1024, "L3": 32 * 1024**2}
    assert envinfo.cache_sizes(root=tmp_path / "nowhere") == {}


def test_a_duration_measured_on_other_code_is_marked_as_earlier(tmp_path):
    nb = {
        "cells": [{"cell_type": "markdown", "source": ["# T"]}, {"cell_type": "code", "source": ["x = 1\n", "y = 2"]}]
    }
    path = tmp_path / "05_x.ipynb"
    path.write_text(json.dumps(nb))
    row = {
        "notebook": "05_x.ipynb",
        "mode": "full",
        "seconds": "60",
        "cpu_model": "c",
        "usable_cores": "2",
        "date": "2026-01-01",
        "tensorflow": "2.21.0",
        "code_hash": course.code_hash(path),
    }
    assert course.is_current(row, tmp_path)
    nb["cells"][0]["source"] = ["# A new title"]  # prose changes leave the timing valid
    path.write_text(json.dumps(nb))
    assert course.is_current(row, tmp_path)
    nb["cells"][1]["source"] = ["x = 2\n", "y = 2"]  # a code change makes it an earlier version
    path.write_text(json.dumps(nb))
    assert not course.is_current(row, tmp_path)
    assert not course.is_current({**row, "code_hash": ""}, tmp_path)
