"""Executed copies of lessons: written once by the notebook tests, reused while the lesson's code is unchanged,
and a failing or slow cell named by its notebook and position."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

import nbformat
import psutil
import pytest
import zmq
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from utils import course, execution, processes
from utils.paths import REPO_ROOT


def write(folder, name, *cells):
    nb = new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / name)
    return folder / name


@pytest.fixture
def lessons(tmp_path):
    (tmp_path / "notebooks").mkdir()
    return tmp_path / "notebooks", tmp_path / "executed"


def test_a_copy_keeps_outputs_runs_in_the_mode_and_the_notebooks_folder_and_is_reused(lessons):
    src, out = lessons
    code = "import os; print(os.environ['COURSE_SMOKE'], os.environ['COURSE_SOLUTIONS'], os.getcwd())"
    write(src, "a.ipynb", new_markdown_cell("# A"), new_code_cell(code))
    path, seconds = execution.ensure("a.ipynb", "smoke", folder=out, source_dir=src)
    assert path == out / "smoke" / "a.ipynb" and seconds is not None
    copy = nbformat.read(path, as_version=4)
    assert copy.cells[1].outputs[0]["text"].split() == ["1", "run", str(src)]
    assert json.loads((src / "a.ipynb").read_text())["cells"][1]["outputs"] == []  # the source stays clean
    assert execution.is_current("a.ipynb", "smoke", out, src)
    assert not execution.is_current("a.ipynb", "full", out, src)
    assert execution.ensure("a.ipynb", "smoke", folder=out, source_dir=src) == (path, None)  # reused
    run = copy.metadata["course_run"]  # what the website says of the page's outputs
    assert run["mode"] == "smoke" and run["date"] == dt.date.today().isoformat() and 0 < run["seconds"] < 120
    del copy.metadata["course_run"]  # a copy made before the course recorded its runs is made again
    nbformat.write(copy, path)
    assert not execution.is_current("a.ipynb", "smoke", out, src)
    path, seconds = execution.ensure("a.ipynb", "smoke", folder=out, source_dir=src)
    assert seconds is not None

    write(src, "a.ipynb", new_markdown_cell("# A, reworded"), new_code_cell(code))
    assert execution.is_current("a.ipynb", "smoke", out, src)  # prose does not change what the code printed
    write(src, "a.ipynb", new_markdown_cell("# A"), new_code_cell(code + "; print('more')"))
    assert not execution.is_current("a.ipynb", "smoke", out, src)
    _, seconds = execution.ensure("a.ipynb", "full", folder=out, source_dir=src)
    assert seconds is not None
    full = nbformat.read(out / "full" / "a.ipynb", as_version=4)
    assert full.cells[1].outputs[0]["text"].split()[0] == "0"


@pytest.mark.skipif(not zmq.has("curve"), reason="this pyzmq has no CurveZMQ: kernels run unencrypted")
def test_a_lesson_kernel_talks_over_encrypted_sockets_as_in_jupyterlab(lessons, capfd):
    """The kernel got CurveZMQ keys (asked inside it), so CI's log has no "Kernel is running over TCP without
    encryption" at every lesson's start (kernel_config; tests/test_kernel_transport.py shows the line without it)."""
    src, out = lessons
    keyed = "from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().curve_secretkey is not None)"
    write(src, "k.ipynb", new_code_cell(keyed))
    execution.execute("k.ipynb", "smoke", folder=out, source_dir=src)
    assert "without encryption" not in capfd.readouterr().err
    assert nbformat.read(out / "smoke" / "k.ipynb", as_version=4).cells[0].outputs[0]["text"].strip() == "True"


def test_a_failing_cell_is_named_and_its_copy_is_never_reused(lessons):
    src, out = lessons
    write(
        src, "b.ipynb", new_code_cell("x = 1"), new_markdown_cell("text"), new_code_cell("raise ValueError('no data')")
    )
    with pytest.raises(execution.LessonFailed) as failed:
        execution.ensure("b.ipynb", "smoke", folder=out, source_dir=src)
    err = failed.value
    assert (err.notebook, err.cell, err.count) == ("b.ipynb", 2, 3)
    assert err.summary == "ValueError: no data"
    assert "b.ipynb: cell 3 of 3" in str(err) and "raise ValueError('no data')" in str(err)
    assert err.copy.is_file() and not execution.is_current("b.ipynb", "smoke", out, src)


def test_a_cell_past_its_time_limit_is_named_and_what_it_started_is_stopped(lessons):
    src, out = lessons
    # a worker in a session of its own, as launchers start them: stopping the kernel does not reach it
    start = (
        "import subprocess, time\nchild = subprocess.Popen(['sleep', '120'], start_new_session=True)\nprint(child.pid)"
    )
    write(src, "c.ipynb", new_code_cell(start), new_code_cell("time.sleep(30)"))
    with pytest.raises(execution.LessonFailed) as failed:
        execution.execute("c.ipynb", "smoke", cell_timeout=5, folder=out, source_dir=src)
    assert failed.value.cell == 1
    assert failed.value.summary == "it ran past the limit of 5 s for one cell"
    child = int(nbformat.read(failed.value.copy, as_version=4).cells[0].outputs[0]["text"])
    assert gone(child), "the lesson's leftover process is still running"


def gone(pid: int) -> bool:
    try:
        return not processes.alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return True


def test_bad_names_and_modes_are_refused_with_what_to_give(lessons, capsys):
    with pytest.raises(ValueError, match="'smoke'"):
        execution.copy_path("a.ipynb", "quick")
    with pytest.raises(FileNotFoundError, match="lesson's file name"):
        execution.execute("none.ipynb", "smoke", folder=lessons[1], source_dir=lessons[0])
    with pytest.raises(SystemExit):
        execution.main(["--mode", "smoke", "99_none.ipynb"])
    assert "such as 00_start_here.ipynb" in capsys.readouterr().err


def test_a_lesson_edited_while_it_runs_leaves_a_copy_that_is_not_current(lessons):
    src, out = lessons
    edit = (
        "import nbformat\n"
        "nb = nbformat.read('c.ipynb', as_version=4)\n"
        "nb.cells.append(nbformat.v4.new_code_cell('print(2)'))\n"
        "nbformat.write(nb, 'c.ipynb')"
    )
    write(src, "c.ipynb", new_code_cell(edit))
    execution.execute("c.ipynb", "smoke", folder=out, source_dir=src)
    assert len(nbformat.read(src / "c.ipynb", as_version=4).cells) == 2  # the edit happened during the run
    assert not execution.is_current("c.ipynb", "smoke", out, src)


def test_make_tests_stage_runs_the_measuring_lessons_alone_then_two_at_a_time_through_nbmake(lessons):
    """The notebook stage of `make test` (tools/run_tests.sh notebooks: `pytest --nbmake`) on four small lessons:
    one named as a lesson that measures runs with nothing beside it, the other two overlap, a failing one is named
    with its cell, and every copy is kept with whether it shared the machine."""
    src, out = lessons
    times = src.parent / "times"
    times.mkdir()
    record = (
        "import pathlib, time\nstart = time.time()\n{wait}time.sleep(3)\n"
        "pathlib.Path('{t}', '{name}').write_text(f'{{start}} {{time.time()}}')"
    )
    # The two that may overlap each wait (a minute at most) for the other to have started: their kernels can start
    # seconds apart on a busy machine. Run one after the other, the first waits in vain and they do not overlap.
    meet = (
        "pathlib.Path('{t}', '{name}.started').touch()\n"
        "while not pathlib.Path('{t}', '{other}.started').exists() and time.time() < start + 60:\n"
        "    time.sleep(0.1)\n"
    )
    # named as a lesson that measures (execution.MEASURING), and three that do not
    for name, other in (("03_allreduce_cost.ipynb", None), ("05_a.ipynb", "06_b.ipynb"), ("06_b.ipynb", "05_a.ipynb")):
        wait = meet.format(t=times, name=name, other=other) if other else ""
        write(src, name, new_code_cell(record.format(t=times, name=name, wait=wait)))
    write(src, "07_c.ipynb", new_code_cell("x = 1"), new_code_cell("raise ValueError('no data')"))
    env = {**os.environ, "NOTEBOOK_DIR": str(src), "COURSE_EXECUTED": str(out), "NOTEBOOK_JOBS": "2"}
    done = subprocess.run(
        ["bash", "tools/run_tests.sh", "notebooks"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stdout and "07_c.ipynb" in done.stdout and "ValueError: no data" in done.stdout
    assert "raise ValueError('no data')" in done.stdout  # nbmake shows the failing cell
    spans = {p.name: tuple(map(float, p.read_text().split())) for p in times.glob("*.ipynb")}
    overlap = lambda a, b: spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
    assert overlap("05_a.ipynb", "06_b.ipynb"), "the two lessons that do not measure ran one after the other"
    assert not overlap("03_allreduce_cost.ipynb", "05_a.ipynb") and not overlap("03_allreduce_cost.ipynb", "06_b.ipynb")
    names = ["03_allreduce_cost.ipynb", "05_a.ipynb", "06_b.ipynb"]
    assert all(execution.is_current(n, "smoke", out, src) for n in names)
    assert not execution.is_current("07_c.ipynb", "smoke", out, src) and (out / "smoke" / "07_c.ipynb").is_file()
    shared = {n: nbformat.read(out / "smoke" / n, as_version=4).metadata["course_run"]["shared"] for n in names}
    assert shared == {"03_allreduce_cost.ipynb": False, "05_a.ipynb": True, "06_b.ipynb": True}


def test_the_order_puts_the_measuring_lessons_first_then_the_longest():
    names = ["00_start_here.ipynb", "04_horovod.ipynb", "03_allreduce_cost.ipynb", "01_why_distributed.ipynb"]
    seconds = {r["notebook"]: float(r["seconds"]) for r in course.read_durations() if r["mode"] == "smoke"}
    smoke = execution.order(names, "smoke")
    assert smoke[0] == "03_allreduce_cost.ipynb"
    assert [seconds[n] for n in smoke[1:]] == sorted((seconds[n] for n in smoke[1:]), reverse=True)
    assert set(execution.order(names, "full")[:2]) == {"03_allreduce_cost.ipynb", "04_horovod.ipynb"}


def test_two_workers_get_one_run_of_lessons_each_that_end_close_together(monkeypatch):
    """With the smoke times of one `make test` here (two at a time), the nine lessons beside each other are dealt as
    worksteal hands them out: the first four to one worker, the other five to the other, each run longest first."""
    paired = {"04": 455, "07": 291, "05": 216, "08": 192, "06": 102, "09": 95, "01": 69, "02": 62, "00": 58, "03": 145}
    names = sorted(lesson.notebook for lesson in course.lessons())  # 00_start_here.ipynb ...
    rows = [{"notebook": n, "mode": "smoke", "seconds": str(paired[n[:2]])} for n in names]
    monkeypatch.setattr(course, "read_durations", lambda: rows)
    planned = [n[:2] for n in execution.order(names, "smoke", workers=2)]
    assert planned == ["03", "04", "08", "01", "00", "07", "05", "06", "09", "02"]
    first, second = (sum(paired[n] for n in run) for run in (planned[1:5], planned[5:]))
    assert abs(first - second) <= 10, (first, second)  # 774 s and 766 s
    longest_first = [n[:2] for n in execution.order(names, "smoke")]  # one worker's order, split the same way
    assert sum(paired[n] for n in longest_first[1:5]) - sum(paired[n] for n in longest_first[5:]) > 700
    few = [names[0], names[1], names[3]]  # two lessons beside 03: one each, longest first
    assert [n[:2] for n in execution.order(few, "smoke", workers=2)] == ["03", "01", "00"]


def test_worksteal_hands_the_first_worker_the_first_share_and_steals_from_the_tail():
    """What execution.order plans for, on pytest-xdist's own worksteal scheduler (make test's -n 2 --dist worksteal)
    with two stand-in workers: of nine lessons the first four go to one worker and the other five to the other, and a
    worker that has started its last lesson takes lessons from the tail of the other's."""
    from types import SimpleNamespace

    from xdist.scheduler.worksteal import WorkStealingScheduling

    class Worker:
        def __init__(self, name):
            self.gateway, self.shutting_down, self.given, self.asked = SimpleNamespace(id=name), False, [], []

        def send_runtest_some(self, indices):
            self.given += indices

        def send_steal(self, indices):
            self.asked += indices

        def shutdown(self):
            self.shutting_down = True

    scheduler = WorkStealingScheduling(SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None))
    first, second = Worker("gw0"), Worker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
    for worker in (first, second):
        scheduler.add_node_collection(worker, [f"lesson {i}" for i in range(9)])
    scheduler.schedule()
    assert (first.given, second.given) == ([0, 1, 2, 3], [4, 5, 6, 7, 8])
    for done in (4, 5, 6):  # the second worker is on 7, with 8 to come: nothing taken yet
        scheduler.mark_test_complete(second, done)
    assert first.asked == []
    scheduler.mark_test_complete(second, 7)  # on its last: it takes half of the first worker's queue, from the tail
    assert first.asked == [2, 3]


def test_the_first_output_of_each_cell_is_noted_in_seconds_from_its_start():
    """note_first_output, on the kernel's messages as nbclient hands them over: the first output counts, later ones
    and messages that show nothing do not."""
    start = dt.datetime(2026, 11, 27, 10, 0, 0, tzinfo=dt.UTC)
    msg = lambda kind, seconds: {"msg_type": kind, "header": {"date": start + dt.timedelta(seconds=seconds)}}
    cell, started = new_code_cell("train()"), {}
    for kind, seconds in [("status", 0), ("execute_input", 0.1), ("status", 0.2), ("stream", 4.6), ("stream", 9)]:
        execution.note_first_output(msg(kind, seconds), cell, started, 3)
    assert cell.metadata["course"] == {"first_output_s": 4.5}
    quiet = new_code_cell("x = 1")
    for kind, seconds in [("execute_input", 0), ("status", 12)]:
        execution.note_first_output(msg(kind, seconds), quiet, started, 4)
    assert "course" not in quiet.metadata


def test_the_longest_gap_between_outputs_and_to_the_end_is_noted_from_the_messages():
    """note_gaps times the kernel's output messages, one by one (nbclient merges consecutive stream messages into one
    output): the longest silence after the first output, to the next one or to the cell's end (its idle status)."""
    start = dt.datetime(2026, 11, 27, 10, 0, 0, tzinfo=dt.UTC)

    def msg(kind, seconds, **content):
        return {"msg_type": kind, "header": {"date": start + dt.timedelta(seconds=seconds)}, "content": content}

    def noted(messages, index=3):
        cell, times = new_code_cell("train()"), {}
        for message in messages:
            execution.note_gaps(message, cell, times, index)
        assert times == {}  # nothing kept once the cell ended
        return cell.metadata.get("course", {}).get("longest_gap_s")

    begin = [msg("status", 0, execution_state="busy"), msg("execute_input", 0.1)]
    idle = lambda seconds: msg("status", seconds, execution_state="idle")
    lines = [msg("stream", 4.6, name="stdout", text="a\n"), msg("stream", 5.0, name="stdout", text="b\n")]
    # between two lines (the wait before the first is first_output_s), then to the end
    assert noted([*begin, *lines, msg("stream", 21.04, name="stdout", text="c\n"), idle(22)]) == 16.0
    assert noted([*begin, *lines, msg("display_data", 6.0, data={}), idle(26.25)]) == 20.2
    # an update of a display shows something; an empty write shows nothing
    update = msg("update_display_data", 12.0, data={})
    assert noted([*begin, *lines, update, msg("stream", 13.0, name="stdout", text=""), idle(20.5)]) == 8.5
    assert noted([*begin, idle(3.26)]) == 3.2  # nothing shown: the whole run is one silence
    assert noted([msg("stream", 1, name="stdout", text="x"), idle(2)]) is None  # no start seen: nothing to time
