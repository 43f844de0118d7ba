"""The environment report and the course map read what is really there."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from conftest import needs_horovod, path_with_nvidia_smi

from utils import course, envinfo


def test_cpu_info_is_plausible():
    cpu = envinfo.cpu_info()
    assert cpu.logical_cores >= 1
    assert 1 <= cpu.usable_cores <= cpu.logical_cores
    assert cpu.model
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    if flags:  # Linux: the kernel's own flag list, read independently of cpu_info()
        assert cpu.bf16_hardware == bool(flags & {"avx512_bf16", "amx_bf16"})


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"avx2", "avx512f"}, False),  # AVX-512 without its BF16 extension
        ({"avx512f", "avx512_bf16"}, True),  # e.g. AMD Zen 4, Intel Cooper Lake
        ({"amx_tile", "amx_bf16"}, True),  # Intel Sapphire Rapids and later
        ({"amx_tile", "amx_int8"}, False),  # AMX without BF16
        (set(), False),
    ],
)
def test_bf16_hardware_from_known_flag_sets(flags, expected):
    assert envinfo.CpuInfo("cpu", 2, 2, flags).bf16_hardware is expected


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


@pytest.mark.parametrize(
    "nvidia_smi, names, problem",
    [
        ("a10g", ["NVIDIA A10G"], ""),
        ("4xl4", ["NVIDIA L4"] * 4, ""),
        ("no-driver", [], "nvidia-smi failed (exit 9: NVIDIA-SMI has failed because it couldn't communicate"),
        ("echo 'No devices were found'", [], "nvidia-smi lists no GPU (exit 0: No devices were found)"),
        (None, [], "no nvidia-smi"),
    ],
)
def test_nvidia_gpus_reads_what_nvidia_smi_lists(monkeypatch, tmp_path, nvidia_smi, names, problem):
    monkeypatch.setenv("PATH", path_with_nvidia_smi(tmp_path / "bin", nvidia_smi))
    found, why = envinfo.nvidia_gpus()
    assert found == names and why.startswith(problem)


@pytest.mark.parametrize(
    "nvidia_smi, build, tf_gpus, says",
    [
        (None, "tensorflow-cpu", [], "No NVIDIA GPU here: every lesson runs on the CPU"),
        ("no-driver", "tensorflow-cpu", [], "nvidia-smi failed (exit 9: NVIDIA-SMI has failed"),
        ("a10g", "tensorflow-cpu", [], "but TensorFlow's CPU build (tensorflow-cpu) is installed"),
        ("a10g", "tensorflow", ["/physical_device:GPU:0"], "TensorFlow's GPU build sees 1 GPU(s)"),
        ("4xl4", "tensorflow-cpu", [], "nvidia-smi lists 4 x NVIDIA L4, but TensorFlow's CPU build"),
        ("a10g", "tensorflow", [], "TensorFlow's GPU build is installed, but TensorFlow sees no GPU"),
    ],
)
def test_gpu_report_says_which_build_uses_which_gpu_and_what_to_do(
    monkeypatch, tmp_path, nvidia_smi, build, tf_gpus, says
):
    monkeypatch.setenv("PATH", path_with_nvidia_smi(tmp_path / "bin", nvidia_smi))
    monkeypatch.setattr(envinfo, "tensorflow_build", lambda: build)
    report = envinfo.gpu_report(tf_gpus)
    assert says in report
    if "make env" in report or "set-up again" in report:
        assert "tools/sagemaker_lifecycle/setup.sh" in report  # the way on a notebook instance too


def test_gpu_report_names_a_hidden_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", path_with_nvidia_smi(tmp_path / "bin", "a10g"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    monkeypatch.setattr(envinfo, "tensorflow_build", lambda: "tensorflow")
    assert "CUDA_VISIBLE_DEVICES='-1' in this kernel's environment hides it" in envinfo.gpu_report([])


def test_tensorflow_build_is_the_installed_one():
    assert envinfo.tensorflow_build() in ("tensorflow-cpu", "tensorflow")
    assert envinfo.package_version(envinfo.tensorflow_build()) == envinfo.versions()["TensorFlow"]


def test_aws_credentials_detection(no_aws_credentials):
    monkeypatch = no_aws_credentials
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
    rows[0]["core_seconds"] = "45"
    line = course.measured_duration_line("01_a.ipynb", rows)
    assert "full mode 2.0 min for Run All, of which the core path (no deep dive, no exercise) 0.8 min" in line


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


# --- memory the course needs, and the warning on a smaller machine

INSTANCES = [
    {"instance_type": "ml.t3.medium", "vcpus": "2", "memory_gib": "4"},
    {"instance_type": "ml.t3.large", "vcpus": "2", "memory_gib": "8"},
    {"instance_type": "ml.m5.large", "vcpus": "2", "memory_gib": "8"},
    {"instance_type": "ml.m5.xlarge", "vcpus": "4", "memory_gib": "16"},
    {"instance_type": "ml.c5.large", "vcpus": "2", "memory_gib": "4"},
]


def _lesson_folder(tmp_path, names):
    for name in names:
        _notebook(tmp_path / name, [{"cell_type": "markdown", "source": [f"# {name}\n"], "metadata": {}}])
    return tmp_path


def _row(notebook, mode, peak):
    return {"notebook": notebook, "mode": mode, "seconds": "10", "peak_memory_mib": peak}


def test_memory_need_is_the_largest_full_mode_peak_plus_jupyterlab(tmp_path):
    folder = _lesson_folder(tmp_path, ["00_a.ipynb", "01_b.ipynb", "02_c.ipynb"])
    rows = [_row("00_a.ipynb", "full", "1500"), _row("01_b.ipynb", "full", "3000"), _row("01_b.ipynb", "smoke", "9000")]
    rows.append(_row("02_c.ipynb", "full", ""))  # measured before the column existed
    lab = [{"rss_mib": "100", "date": "2026-01-01"}, {"rss_mib": "120", "date": "2026-02-01"}]
    need = course.memory_need(rows, lab, folder)
    assert (need.peak_notebook, need.peak_mib, need.jupyterlab_mib) == ("01_b.ipynb", 3000.0, 120.0)
    assert need.total_mib == 3120.0 and need.unmeasured == ["02_c.ipynb"]
    line = course.memory_line(need, INSTANCES)
    assert "3.05 GiB" in line and "01_b.ipynb" in line and "120 MiB, measured 2026-02-01" in line
    assert "ml.t3.medium (4 GiB)" in line and "ml.m5.large (8 GiB)" in line and "02_c.ipynb" in line
    assert "ml.c5" not in line  # only the families the course recommends


def test_memory_not_measured_yet_is_said_and_gives_no_warning(tmp_path):
    folder = _lesson_folder(tmp_path, ["00_a.ipynb"])
    need = course.memory_need([_row("00_a.ipynb", "full", "")], [], folder)
    assert need.total_mib is None
    assert "not measured yet" in course.memory_line(need, INSTANCES)
    assert course.memory_warning(1, need, INSTANCES) is None
    no_lab = course.memory_need([_row("00_a.ipynb", "full", "900")], [], folder)
    assert "JupyterLab" in course.memory_line(no_lab, INSTANCES) and no_lab.total_mib is None


def test_memory_warning_names_bigger_instances_only_when_memory_is_short(tmp_path):
    folder = _lesson_folder(tmp_path, ["00_a.ipynb"])
    need = course.memory_need([_row("00_a.ipynb", "full", "4000")], [{"rss_mib": "150", "date": "d"}], folder)
    assert course.instances_with_memory(4150, INSTANCES)[0]["memory_gib"] == "8"
    warning = course.memory_warning(int(3.8 * 2**30), need, INSTANCES)
    assert warning and "3.80 GiB" in warning and "4.05 GiB" in warning
    assert "ml.t3.large (8 GiB)" in warning and "ml.m5.large (8 GiB)" in warning and "ml.t3.medium" not in warning
    assert course.memory_warning(8 * 2**30, need, INSTANCES) is None


def test_instance_types_file_names_its_source():
    types = course.instance_types()
    assert {"ml.t3.medium", "ml.m5.large"} <= {t["instance_type"] for t in types}
    assert all(t["source"].startswith("AWS") and "docs.aws.amazon.com" in t["source"] for t in types)


def test_jupyterlab_memory_round_trip(tmp_path):
    path = tmp_path / "lab.csv"
    row = {"rss_mib": "90", "jupyterlab": "4.6.6", "python": "3.11", "cpu_model": "c", "date": "d1", "how": "h"}
    course.record_jupyterlab_memory(row, path)
    course.record_jupyterlab_memory({**row, "rss_mib": "95", "date": "d2"}, path)
    assert [r["rss_mib"] for r in course.read_jupyterlab_memory(path)] == ["90", "95"]


def test_total_memory_reads_a_container_limit(tmp_path):
    import psutil

    (tmp_path / "memory.max").write_text("1073741824\n")
    assert envinfo.total_memory(tmp_path) == min(2**30, psutil.virtual_memory().total)
    (tmp_path / "memory.max").write_text("max\n")
    assert envinfo.total_memory(tmp_path) == psutil.virtual_memory().total


def test_lesson_start_warns_on_a_machine_with_too_little_memory(monkeypatch, capsys):
    from utils import lesson

    monkeypatch.setattr(envinfo, "total_memory", lambda: 2**30)  # a 1 GiB machine
    monkeypatch.setattr(envinfo, "machine_line", lambda: "machine")
    need = course.memory_need()
    lesson.start("00_start_here.ipynb").finish()
    out = capsys.readouterr().out
    assert ("WARNING: this machine has 1.00 GiB" in out) == (need.total_mib is not None)


def test_an_old_durations_file_without_core_seconds_still_reads_and_is_rewritten_with_it(tmp_path):
    path = tmp_path / "d.csv"
    old = ",".join(course.REQUIRED_DURATION_FIELDS)
    path.write_text(old + "\n01_a.ipynb,full,60,,cpu,2,2026-01-01,2.21.0,abc\n")
    rows = course.read_durations(path)
    assert course.peak_memory_of("01_a.ipynb", "full", rows) is None
    course.record_duration({**rows[0], "mode": "smoke", "core_seconds": "30.0"}, path)
    again = course.read_durations(path)
    assert [r["core_seconds"] for r in again] == ["", "30.0"]


# --- the core path: sections marked "(deep dive)"


def _md(text):
    return {"cell_type": "markdown", "source": [text], "metadata": {}}


def _code(text, seconds=None):
    meta = {}
    if seconds is not None:
        meta["execution"] = {
            "iopub.execute_input": "2026-01-01T00:00:00.000000Z",
            "shell.execute_reply": f"2026-01-01T00:00:{seconds:02d}.500000Z",
        }
    return {"cell_type": "code", "source": [text], "metadata": meta, "outputs": [], "execution_count": None}


def _synthetic_lesson():
    return {
        "cells": [
            _md("# 09 A lesson\n\nWhat and why."),  # 0
            _code("L = lesson.start('09_x.ipynb')", 1),  # 1
            _md("## Core part\n\none two three four"),  # 2
            _code("x = 1", 2),  # 3
            _md("### A detail (deep dive)\n"),  # 4
            _code("y = 2", 10),  # 5
            _md("### Back on the path"),  # 6
            _code("z = 3", 3),  # 7
            _md("## Everything here (Deep Dive)"),  # 8
            _code("if L.need_horovod():\n    pass", 20),  # 9
            _md("### Still deep"),  # 10
            _code("w = 4", 30),  # 11
            _md("## Summary\n\nfive six"),  # 12
            _code("print(L.finish())", 1),  # 13
        ]
    }


def test_sections_and_core_cells_leave_out_deep_dives():
    nb = _synthetic_lesson()
    deep = {s.title: s.deep_dive for s in course.sections(nb)}
    assert deep == {
        "09 A lesson": False,
        "Core part": False,
        "A detail (deep dive)": True,
        "Back on the path": False,
        "Everything here (Deep Dive)": True,
        "Still deep": True,
        "Summary": False,
    }
    assert course.core_cells(nb) == [0, 1, 2, 3, 6, 7, 12, 13]
    assert course.has_deep_dives(nb)
    assert course.horovod_sections(nb) == ["Everything here (Deep Dive)"]


def test_the_exercises_and_what_is_under_them_are_off_the_path_a_lesson_times():
    nb = _synthetic_lesson()
    nb["cells"] += [
        _md("## Exercises\n\nthree things to try"),  # 14
        _md("### 1. The first"),  # 15
        _code("answer = None", 40),  # 16
        _md("### 2. A detail (deep dive)"),  # 17
        _code("other = None", 50),  # 18
    ]
    assert course.core_cells(nb) == [0, 1, 2, 3, 6, 7, 12, 13, 14, 15, 16]
    assert course.path_cells(nb) == [0, 1, 2, 3, 6, 7, 12, 13]
    assert course.core_seconds(nb) == 1.5 + 2.5 + 3.5 + 1.5
    assert course.reading_words(nb) == course.reading_words(_synthetic_lesson())
    nb["cells"].append(_md("## After the exercises\n\nseven"))  # 19: a section of the same level ends them
    assert course.path_cells(nb)[-1] == 19


def test_core_seconds_sums_the_timed_core_cells_only():
    nb = _synthetic_lesson()
    assert course.core_seconds(nb) == 1.5 + 2.5 + 3.5 + 1.5
    untimed = {"cells": [_md("# T"), _code("x = 1")]}
    assert course.core_seconds(untimed) is None


def test_reading_minutes_counts_core_words_at_the_stated_speed():
    nb = {"cells": [_md("# Title words\n" + "word " * 398), _md("## Extra (deep dive)\n" + "word " * 1000)]}
    assert course.reading_minutes(nb, wpm=200) == 400 / 200
    assert course.reading_minutes(nb, core_only=False, wpm=200) == (400 + 1003) / 200


def test_reading_counts_what_the_outputs_show_and_prefers_the_recorded_words(tmp_path):
    cell = _code("x = 1")
    cell["outputs"] = [
        {"output_type": "stream", "name": "stdout", "text": ["three more words\n"]},
        {"output_type": "display_data", "data": {"text/markdown": "two words", "text/plain": "ignored here"}},
        {"output_type": "execute_result", "data": {"text/plain": ["one"]}, "execution_count": 1},
    ]
    assert course.reading_words({"cells": [cell]}) == 2 + 3 + 2 + 1
    _notebook(tmp_path / "01_x.ipynb", [_md("# One two")])
    rows = [{"notebook": "01_x.ipynb", "mode": "full", "seconds": "1", "reading_words": "3200"}]
    assert course.lesson_reading_minutes("01_x.ipynb", rows, tmp_path) == 3200 / course.READING_WPM
    rows[0]["reading_words"] = ""  # measured before the column existed: the text and code alone
    assert course.lesson_reading_minutes("01_x.ipynb", rows, tmp_path) == 2 / course.READING_WPM


def test_the_duration_paragraph_comes_from_the_measured_figures_and_replaces_the_old_one(tmp_path):
    lesson_md = "# 01 T\n\n## Objectives\n- a\n\n## Duration\nAbout 55 minutes, typed.\n\n## Prerequisites\n- b"
    _notebook(tmp_path / "01_x.ipynb", [_md(lesson_md), _code("x = 1")])
    nb = json.loads((tmp_path / "01_x.ipynb").read_text())
    hashed = course.code_hash(tmp_path / "01_x.ipynb")
    row = {"notebook": "01_x.ipynb", "mode": "full", "seconds": "700", "core_seconds": "600", "cpu_model": "CPU X"}
    row |= {"usable_cores": "2", "code_hash": hashed, "reading_words": str(20 * course.READING_WPM)}
    text = course.duration_paragraph("01_x.ipynb", [row], tmp_path)
    # 20 min of reading + 10 min of running -> 30; measured on the lesson's code as it is
    assert text.startswith(
        "Core path: about 30 minutes, that is about 20 minutes of reading (its text, code and outputs"
    )
    assert "about 10 minutes of running in full mode, measured on CPU X with 2 cores." in text
    assert course.with_duration(nb, text) and not course.with_duration(nb, text)
    source = "".join(nb["cells"][0]["source"])
    assert f"## Duration\n{text}\n\n## Prerequisites" in source and "typed" not in source
    row["code_hash"] = "other"
    assert "on an earlier version of this lesson" in course.duration_paragraph("01_x.ipynb", [row], tmp_path)
    with pytest.raises(ValueError, match="no '## Duration' section"):
        course.with_duration({"cells": [_md("# T")]}, text)


def test_core_run_time_is_recorded_or_the_whole_lesson_without_deep_dives(tmp_path):
    _notebook(tmp_path / "01_plain.ipynb", [_md("# Plain")])
    _notebook(tmp_path / "02_marked.ipynb", _synthetic_lesson()["cells"])
    rows = [
        {"notebook": "01_plain.ipynb", "mode": "full", "seconds": "120", "core_seconds": ""},
        {"notebook": "02_marked.ipynb", "mode": "full", "seconds": "300", "core_seconds": ""},
    ]
    assert course.core_run_seconds("01_plain.ipynb", rows, tmp_path) == 120.0
    assert course.core_run_seconds("02_marked.ipynb", rows, tmp_path) is None  # not measured yet
    rows[1]["core_seconds"] = "90"
    assert course.core_run_seconds("02_marked.ipynb", rows, tmp_path) == 90.0


def test_workshop_schedule_fits_lessons_and_breaks_in_the_time(tmp_path):
    words = "word " * (10 * course.READING_WPM + 1)  # 10 min of reading (and a little more with the title)
    for name in ("00_a.ipynb", "01_b.ipynb", "02_c.ipynb", "03_d.ipynb"):
        _notebook(tmp_path / name, [_md(f"# T\n{words}")])
    rows = [
        {"notebook": n, "mode": "full", "seconds": "1200", "core_seconds": ""} for n in ("00_a.ipynb", "01_b.ipynb")
    ]
    rows.append({"notebook": "02_c.ipynb", "mode": "full", "seconds": "1200", "core_seconds": ""})
    plan, left = course.workshop_schedule(total_min=100, break_after_min=60, break_min=10, rows=rows, folder=tmp_path)
    # each lesson: 20 min run + 10 min reading (+ 2 words) -> 31 min
    assert [(s.what, s.start_min, s.minutes) for s in plan] == [
        ("00_a.ipynb", 0, 31),
        ("break", 31, 10),
        ("01_b.ipynb", 41, 31),
    ]
    assert left == ["02_c.ipynb", "03_d.ipynb"]


# --- the course map in lesson 00


def _map_folder(tmp_path):
    objectives = "## Objectives\n- measure the `ring`\n- fit a line\n\n## Duration\n"
    for i, (name, title) in enumerate(
        (("00_a.ipynb", "00 · Start"), ("01_b.ipynb", "01 · Rings"), ("02_c.ipynb", "02 · Later"))
    ):
        _notebook(tmp_path / name, [_md(f"# {title}\n\n{objectives}"), _code(f"x = {i}")])
    timed = {"code_hash": course.code_hash(tmp_path / "00_a.ipynb"), "peak_memory_mib": "1536", "core_seconds": ""}
    rows = [
        {"notebook": "00_a.ipynb", "mode": "full", "seconds": "90", **timed},
        {"notebook": "00_a.ipynb", "mode": "smoke", "seconds": "30", **timed},
        {"notebook": "01_b.ipynb", "mode": "full", "seconds": "600", **timed},  # another lesson's code: stale
    ]
    return tmp_path, rows


def test_course_map_has_one_linked_line_per_lesson_then_its_figures(tmp_path):
    folder, rows = _map_folder(tmp_path)
    text = course.course_map_markdown(rows, folder)
    map_lines = text.split("\n\n")[0].splitlines()
    assert map_lines == ["- [00 · Start](00_a.ipynb)", "- [01 · Rings](01_b.ipynb)", "- [02 · Later](02_c.ipynb)"]
    for line in map_lines:  # every link is relative to the notebooks' folder and names a lesson that is there
        target = re.search(r"\]\(([^)]+)\)", line).group(1)
        assert (folder / target).is_file()
    table = [line for line in text.splitlines() if line.startswith("| [")]
    assert table[0] == "| [00](00_a.ipynb) | 1.5 + 0 | 1.5 | 0.5 | 1.5 |"
    assert "| 10.0" + course.EARLIER_MARK + " |" in table[1] and "not measured" in table[1]  # stale, smoke not timed
    assert table[2].count("not measured") == 4
    assert course.EARLIER_MARK + " measured on an earlier version" in text
    # the objectives, folded below the table: every one, with backticks left to Markdown (rendered as code)
    folded = text[text.index("<details>") : text.index("</details>")]
    assert folded.count("measure the `ring` · fit a line") == 3


def test_course_map_says_nothing_of_earlier_versions_when_all_are_current(tmp_path):
    folder, rows = _map_folder(tmp_path)
    text = course.course_map_markdown(rows[:2], folder)
    assert course.EARLIER_MARK not in text


def test_the_course_map_of_the_course_links_every_lesson():
    text = course.course_map_markdown()
    for lesson in course.lessons():
        assert f"- [{lesson.title}]({lesson.notebook})" in text


def test_recount_takes_a_deep_dive_marked_since_the_timing_off_the_core_path(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import time_notebooks

    def lesson(extra_title):
        cells = [_md("# 01 T"), _code("a = 1", 2), _md(f"## {extra_title}"), _code("b = 2", 7)]
        for cell in cells:
            cell.setdefault("outputs", [])
        cells[3]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "many words printed here\n"}]
        return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

    monkeypatch.setattr(course, "NOTEBOOKS", tmp_path)
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "01_t.full.ipynb").write_text(json.dumps(lesson("More")))  # the copy timed: all on the core path
    now = lesson("More (deep dive)")
    for cell in now["cells"]:
        cell.pop("outputs", None) if cell["cell_type"] == "markdown" else cell.update(outputs=[], metadata={})
    (tmp_path / "01_t.ipynb").write_text(json.dumps(now))
    out = tmp_path / "durations.csv"
    row = {"notebook": "01_t.ipynb", "mode": "full", "seconds": "10", "peak_memory_mib": "1", "cpu_model": "X"}
    row |= {
        "usable_cores": "2",
        "date": "2026-01-01",
        "tensorflow": "2.21.0",
        "code_hash": course.code_hash(tmp_path / "01_t.ipynb"),
    }
    course.record_duration(row | {"core_seconds": "9.0", "reading_words": "20"}, out)
    time_notebooks.recount(saved, ["01_t.ipynb"], out)
    (after,) = course.read_durations(out)
    assert after["core_seconds"] == "2.5" and int(after["reading_words"]) == 4  # 01, T, a, 1
    now["cells"][1]["source"] = ["a = 3"]  # the code changed since: it must be timed again
    (tmp_path / "01_t.ipynb").write_text(json.dumps(now))
    with pytest.raises(SystemExit, match=r"01_t.ipynb: the lesson's code differs"):
        time_notebooks.recount(saved, ["01_t.ipynb"], out)


@pytest.mark.parametrize(
    "text, expected", [("200000 100000\n", 2.0), ("150000 100000\n", 1.5), ("max 100000\n", None), ("junk", None)]
)
def test_cpu_quota_reads_cgroup_v2(tmp_path, text, expected):
    (tmp_path / "cpu.max").write_text(text)
    assert envinfo.cpu_quota(tmp_path) == expected
    assert envinfo.cpu_quota(tmp_path / "absent") is None


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"avx512bw", "avx512_fp16"}, True),  # Sapphire Rapids
        ({"avx512bw", "amx_fp16"}, True),  # Granite Rapids
        ({"avx_ne_convert"}, True),  # without AVX-512
        ({"avx512_fp16"}, False),  # AVX512BW missing
        ({"avx512bw", "avx512_bf16"}, False),  # Zen 4: bfloat16, no float16
        (set(), False),
    ],
)
def test_onednn_float16_follows_tensorflows_test(flags, expected):
    assert envinfo.CpuInfo("cpu", 2, 2, flags).onednn_float16 is expected
