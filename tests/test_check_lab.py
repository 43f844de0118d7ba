"""tools/check_lab.py in JupyterLab and Chromium: a notebook executed here, opened as a learner opens it, fails
on Markdown that math rendering garbles, on an error output and on stray stderr, and passes what is fine; and, read
from the executed copy alone, on a worker's raw result line, a long cell silent in its first seconds and an exercise's
answer in view."""

from __future__ import annotations

import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from utils.execution import recording_client

TOOLS = Path(__file__).resolve().parent.parent / "tools"
REPO = TOOLS.parent
VERDICT = "B meets the hour at $3,945 a day on demand; at $2.00 a worker-hour the answer changes."
CELLS = [
    new_markdown_cell("Math stays math: $2\\frac{N-1}{N}$ and $1003 = 7 \\cdot 143 + 2$; a worker-hour at \\$2.00."),
    new_code_cell(f"from IPython.display import Markdown, display\ndisplay(Markdown({VERDICT!r}))"),
    new_code_cell(f"from utils import prose\ndisplay(prose.markdown({VERDICT!r}))"),
    # a backslash is not enough in JupyterLab 4 (jupyterlab/jupyterlab#8645)
    new_code_cell(f"display(Markdown({VERDICT.replace('$', chr(92) + '$')!r}))"),
    new_code_cell("import sys\nprint('a library says something', file=sys.stderr)"),
    new_code_cell("{}['missing']"),
    new_code_cell("print('fine')"),
    # one check's line twice: the learner cannot tell which case each line is about
    new_code_cell("from utils import checks\nchecks.report('rate', 2, 2)\nchecks.report('rate', 2, 2)"),
    new_code_cell("checks.report('rate at step 50', 2, 2)\nchecks.report('rate at step 100', 2, 2)"),
    # a title read from what the plot draws (utils.figures.finding); then one whose data change after it was set;
    # then one that states an outcome typed beside the plot
    new_code_cell(
        "import matplotlib.pyplot as plt\nfrom utils import figures\nfig, ax = plt.subplots(figsize=(3, 2))\n"
        "ax.plot([1, 2], [100, 190], 'o-', label='Horovod')\n"
        "figures.finding(ax, '2 ranks {r:.2f}x faster', r=('ratio', ('y_at', 2, 'Horovod'), ('y_at', 1, 'Horovod')))"
    ),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(3, 2))\nax.plot([1, 2], [100, 190], 'o-', label='Horovod')\n"
        "figures.finding(ax, '2 ranks {r:.2f}x faster', r=('ratio', ('y_at', 2, 'Horovod'), ('y_at', 1, 'Horovod')))\n"
        "ax.lines[0].set_ydata([100, 50])"
    ),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(3, 2))\nax.bar([0, 1], [3, 9], label='img/s')\nax.set_title('3x faster')"
    ),
]


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    if not any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no Chromium here (sudo apt-get install -y chromium)")
    sys.path.insert(0, str(TOOLS))
    import check_lab

    root = tmp_path_factory.mktemp("lab")
    nb = new_notebook(cells=CELLS)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    # executed as the course executes a lesson: each cell's first output and longest silence noted, so that a cell
    # that imports TensorFlow slowly on a loaded machine is judged by when it spoke, as in the lessons
    recording_client()(nb, timeout=120, kernel_name="python3", allow_errors=True).execute(cwd=str(REPO))
    nbformat.write(nb, root / "lesson.ipynb")
    problems, outside = check_lab.check({"lesson.ipynb": root / "lesson.ipynb"}, root=root, out=root / "out")
    by_cell = defaultdict(list)
    for problem in problems:
        by_cell[problem.cell].append(problem)
    return by_cell, outside, root / "out"


def test_amounts_typeset_as_math_fail_and_escaped_ones_pass(checked):
    problems, outside, _ = checked
    garbled = problems[1][0].what
    assert garbled.startswith("$3,945 in a Markdown output is typeset as a formula by MathJax")
    assert "adayondemand" in garbled  # the words MathJax ran together
    assert 0 not in problems and 2 not in problems  # real math, and utils.prose's amounts shown as "$3,945"
    backslashed = [p.what for p in problems[3]]
    assert backslashed[0].startswith("words in a Markdown output are typeset as a formula by MathJax")
    assert "the escaped amount \\$3,945 does not show as $3,945" in backslashed
    assert outside == []


def test_error_outputs_and_stderr_fail_and_each_failing_cell_has_a_screenshot(checked):
    problems, _, out = checked
    assert [p.what for p in problems[5]] == ["an error output: KeyError: 'missing'"]
    assert "'a library says something'" in problems[4][0].what
    assert sorted(problems) == [1, 3, 4, 5, 7, 10, 11]
    shots = sorted(p.name for p in out.glob("*.png"))
    assert shots == [f"lesson.cell{i:03d}.png" for i in (2, 4, 5, 6, 8, 11, 12)]
    assert all(p.screenshot.stat().st_size > 1000 for cell in problems.values() for p in cell)


def test_an_exercise_check_that_prints_the_same_line_twice_fails(checked):
    problems, _, _ = checked
    assert [p.what for p in problems[7]] == [
        "an exercise check prints the same line 2 times ('[rate] correct: 2'): a learner cannot tell the cases "
        "apart; give each its own label"
    ]
    assert 8 not in problems  # two checks with labels of their own


def test_a_plot_title_that_its_data_do_not_give_fails(checked):
    problems, _, _ = checked
    assert 9 not in problems  # the title read from the drawn data, which stay as they were
    assert [p.what for p in problems[10]] == [
        "a plot: the title '2 ranks 1.90x faster' says r = 1.9, but the plot as shown draws 0.5: set the title after "
        "the last series is drawn"
    ]
    assert [p.what for p in problems[11]] == [
        "a plot: the title '3x faster' states an outcome (faster) that is not read from the plot's data: make it with "
        "utils.figures.finding, or say it in a printed sentence"
    ]


# What the check reads from the executed copy alone (no browser): raw result lines, silent cells, answers in view.


@pytest.fixture(scope="module")
def lab():
    sys.path.insert(0, str(TOOLS))
    import check_lab

    return check_lab


def stream(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def timed(cell, seconds, first=None, gap=None):
    """A code cell as an executed copy records it: it ran `seconds`, its first output came `first` s after it began,
    and its longest silence after that lasted `gap` s."""
    cell.metadata["execution"] = {
        "iopub.execute_input": "2026-11-27T10:00:00.000000Z",
        "shell.execute_reply": f"2026-11-27T10:00:{seconds:09.6f}Z",
    }
    recorded = {"first_output_s": first, "longest_gap_s": gap}
    if first is not None:
        cell.metadata["course"] = {key: value for key, value in recorded.items() if value is not None}
    return cell


def test_a_raw_result_line_fails_and_the_words_a_lesson_prints_pass(lab):
    raw = new_code_cell("run = launch.launch_tf_workers(...)")
    raw.outputs = [stream('[worker 0] epoch 1\nRESULT {"rank": 0, "loss": 0.5}\n')]
    words = new_code_cell("print(run.records())")
    words.outputs = [stream("rank 0 ended with a loss of 0.5; the RESULT { lines are read by the launcher\n")]
    streamed = new_code_cell("run = launch.launch_horovodrun(...)")
    streamed.outputs = [stream('[1]<stdout>:epoch 1\n[1]<stdout>:RESULT {"rank": 1}\n')]
    labelled = new_code_cell("run = launch.launch_tf_workers(...)")
    labelled.outputs = [stream('[worker 1] RESULT {"rank": 1}\n')]
    found = lab.notebook_problems(new_notebook(cells=[raw, words, streamed, labelled]), "lesson.ipynb")
    assert [i for i, _ in found] == [0, 2, 3]
    assert found[0][1].startswith("a worker's raw result line is shown ('RESULT {\"rank\": 0")
    assert found[1][1].startswith("a worker's raw result line is shown ('[1]<stdout>:RESULT {")


def test_a_long_cell_that_shows_nothing_in_its_first_seconds_fails(lab):
    cells = [
        timed(new_code_cell("train()"), 12),  # nothing at all
        timed(new_code_cell("train()"), 12, first=7.0),  # a line, but only after 7 s
        timed(new_code_cell("train()"), 12, first=0.2),  # says what it starts at once
        timed(new_code_cell("x = 1"), 4),  # short: nothing to wait for
        timed(new_code_cell("train()"), 12),  # outputs, but no record of when the first came
    ]
    for cell in cells[1:3] + cells[4:]:
        cell.outputs = [stream("epoch 1\n")]
    found = dict(lab.notebook_problems(new_notebook(cells=cells), "lesson.ipynb"))
    assert sorted(found) == [0, 1, 4]
    assert found[0].startswith("a silent cell: it ran 12 s and showed nothing at all")
    assert found[1].startswith("a silent cell: it ran 12 s and showed nothing for its first 7 s")
    assert "not recorded: execute the lesson again" in found[4]


def test_the_first_output_is_timed_when_a_lesson_is_executed(lab, tmp_path, monkeypatch):
    """utils.execution notes when each cell's first output came; with the limits shortened, the check finds the
    cell that waits before it prints and passes the one that says what it starts."""
    from utils import execution

    src = tmp_path / "notebooks"
    src.mkdir()
    # seconds, not tenths: the kernel's own timestamps, which a busy machine can delay by a second
    late = "import time\ntime.sleep(6)\nprint('done', flush=True)"
    early = "print('starting', flush=True)\ntime.sleep(6)\nprint('done')"
    nb = new_notebook(cells=[new_code_cell(late), new_code_cell(early), new_code_cell("x = 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "t.ipynb")
    execution.execute("t.ipynb", "smoke", folder=tmp_path / "executed", source_dir=src)
    copy = nbformat.read(tmp_path / "executed" / "smoke" / "t.ipynb", as_version=4)
    firsts = [cell.metadata.get("course", {}).get("first_output_s") for cell in copy.cells]
    assert firsts[0] >= 5.9 and firsts[1] < 3.0 and firsts[2] is None
    monkeypatch.setattr(lab, "LONG_CELL_S", 5.0)
    monkeypatch.setattr(lab, "FIRST_OUTPUT_S", 3.0)
    assert [i for i, _ in lab.notebook_problems(copy, "t.ipynb")] == [0]


def test_a_long_cell_silent_for_longer_than_the_limit_after_its_first_line_fails(lab):
    cells = [
        timed(new_code_cell("train()"), 50, first=0.2, gap=19.6),  # a line, then nothing for 19.6 s
        timed(new_code_cell("train()"), 50, first=0.2, gap=9.8),  # a line every few seconds
        timed(new_code_cell("train()"), 50, first=0.2),  # an older copy: no gap recorded, judged as before
        timed(new_code_cell("train()"), 50, first=7.0, gap=30.0),  # late to start, and silent later too
    ]
    for cell in cells:
        cell.outputs = [stream("epoch 1\n")]
    found = dict(lab.notebook_problems(new_notebook(cells=cells), "lesson.ipynb"))
    assert sorted(found) == [0, 3]
    assert found[0].startswith(
        f"a silent cell: it ran 50 s and once showed nothing for 20 s (limit {lab.MAX_GAP_S:.0f} s)"
    )
    assert "utils.heartbeat.stream" in found[0] and "tqdm" in found[0]
    assert "showed nothing for its first 7 s" in found[3] and "showed nothing for 30 s" in found[3]
    assert lab.silent(cells[0], max_gap=20.0) is None


def test_the_longest_silence_is_timed_when_a_lesson_is_executed(lab, tmp_path, monkeypatch):
    """utils.execution notes each cell's longest silence after its first output, from the kernel's messages; with the
    limits shortened, the check finds the cell that goes quiet and passes the one that prints a line every few
    tenths of a second."""
    from utils import execution

    src = tmp_path / "notebooks"
    src.mkdir()
    # seconds, not tenths: the kernel's own timestamps, which a busy machine can delay by a second
    pause = "import time\nprint('starting', flush=True)\ntime.sleep(6)\nprint('done', flush=True)"
    steady = "for step in range(16):\n    print('step', step, flush=True)\n    time.sleep(0.25)"
    nb = new_notebook(cells=[new_code_cell(pause), new_code_cell(steady)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "t.ipynb")
    execution.execute("t.ipynb", "smoke", folder=tmp_path / "executed", source_dir=src)
    copy = nbformat.read(tmp_path / "executed" / "smoke" / "t.ipynb", as_version=4)
    gaps = [cell.metadata["course"]["longest_gap_s"] for cell in copy.cells]
    assert 5.9 <= gaps[0] <= 9.0 and gaps[1] < 3.0, gaps
    monkeypatch.setattr(lab, "LONG_CELL_S", 3.0)
    monkeypatch.setattr(lab, "MAX_GAP_S", 3.0)
    assert [i for i, _ in lab.notebook_problems(copy, "t.ipynb")] == [0]


def test_the_checks_server_applies_the_course_overrides_as_make_lab_writes_them_and_its_own(lab, tmp_path):
    """The course's overrides file (make lab's: no news prompt) and the check's own (every cell attached), merged
    plugin by plugin; the server started as the check starts it applies them all (check_settings)."""
    news = "@jupyterlab/apputils-extension:notification"
    assert lab.OVERRIDES[news] == {"fetchNews": "false", "checkForUpdates": False}
    assert lab.OVERRIDES["@jupyterlab/notebook-extension:tracker"] == {"windowingMode": "none"}
    (tmp_path / "work").mkdir()
    server, base, token = lab.start_server(tmp_path / "work", tmp_path, tmp_path)
    try:
        lab.check_settings(base, token)
    finally:
        lab.stop_server(server)
    assert (tmp_path / "work" / "app" / "overrides.d" / "course.json").read_text() == lab.COURSE_OVERRIDES.read_text()


def uneven_ring(lab, *, demo, hint="", solution="19"):
    """Lesson 03's exercise 2 in a small notebook: a demo cell, the question, its check cell and its solution."""
    shown = new_code_cell("for n, k in CASES: print(...)")
    shown.outputs = [stream(demo)]
    check = new_code_cell(
        f"my_worker0 = None  # your answer{hint}\nchecks.check_uneven_ring_worker(5, 12, 0, my_worker0);"
    )
    check.outputs = [stream("[uneven ring, worker 0] not answered yet: replace None with your answer\n")]
    answer = new_code_cell(f"%%solution\nassert checks.check_uneven_ring_worker(5, 12, 0, {solution})")
    answer.metadata["tags"] = ["solution", "hide-cell"]
    question = new_markdown_cell("**Exercise 2.** With N = 5 workers and K = 12 values, how many does worker 0 send?")
    nb = new_notebook(cells=[new_markdown_cell("# 03"), shown, question, check, answer])
    entry = next(a for a in lab.ANSWERS if (a.lesson, a.exercise) == ("03_allreduce_cost.ipynb", "2"))
    return lab.answers_in_view(nb, "03_allreduce_cost.ipynb", [entry])


def test_an_answer_in_view_fails_where_it_shows_and_nowhere_else(lab):
    # the same number in a table, and in the solution, is no giveaway: only the case with its answer is
    assert uneven_ring(lab, demo="N=4, K=10: sent per worker [15, 16, 15, 14]\n19 of 20 cases\n") == []
    leaked = uneven_ring(lab, demo="N=5, K=12: chunk sizes [3, 3, 2, 2, 2], sent per worker [19, 20, 20, 20, 17]\n")
    assert [i for i, _ in leaked] == [1]
    assert leaked[0][1].startswith("the answer to exercise 2 is in view in a cell before the exercise ('N=5, K=12")
    commented = uneven_ring(lab, demo="", hint=": 24 - 3 - 2 = 19")
    assert [i for i, _ in commented] == [3] and "in the exercise's own cells ('19')" in commented[0][1]


def test_an_exercise_whose_check_cell_is_gone_is_named(lab):
    nb = new_notebook(cells=[new_code_cell("checks.check_ring_bytes(8, 1_000_000, None)")])
    found = lab.answers_in_view(nb, "03_allreduce_cost.ipynb")
    assert [i for i, _ in found] == [0, 0]  # exercises 2 and 3 have no check cell here
    assert (
        "exercise 2's check cell (the one calling checks.check_uneven_ring_worker(...) is found 0 times" in found[0][1]
    )


def correct_answers():
    """For each registered exercise: its check, given the right answer (the check prints it as "correct: ...")."""
    from utils import checks, kubeflow, precision

    job = kubeflow.tfjob("exercise", chief=1, workers=2, image="img", command=["python", "train_mwms.py"])
    l00, l01, l02, l03 = "00_start_here", "01_why_distributed", "02_data_vs_model_parallelism", "03_allreduce_cost"
    return {
        (l00, "2"): lambda: checks.check_global_batch(32, 4, 128),
        (l01, "1"): lambda: checks.check_speedup_needed(23.0, 0.30, 29.9),
        (l01, "2"): lambda: checks.check_job_hours_on_workers(10, 10_000, 100, 8, 100, 1.25 + 140 / 3600),
        (l01, "3"): lambda: checks.check_data_to_halve_error(0.1, 1024),
        (l01, "4"): lambda: checks.check_doubling_months(10, 12 * np.log(2) / np.log(10)),
        (l02, "1"): lambda: checks.check_global_batch(64, 8, 512) & checks.check_scaled_rate(0.01, 8, 0.08),
        (l02, "2"): lambda: checks.check_gpipe_bubble(4, 12, 0.2) & checks.check_micro_batches_for(4, 0.10, 28),
        (l02, "3"): lambda: checks.check_training_state_bytes(10**9, "adam", 16e9),
        (l02, "4"): lambda: (
            checks.check_parameter_server_values(16, 10**6, 16_000_000)
            & checks.check_ring_worker_values(16, 10**6, 1_875_000)
        ),
        (l03, "1"): lambda: checks.check_ring_bytes(8, 1_000_000, 7e6),
        (l03, "2"): lambda: checks.check_uneven_ring_worker(5, 12, 0, 19),
        (l03, "3"): lambda: checks.check_ring_time_ms(16, 100e6, 25, 60.0),
        ("04_horovod", "1"): lambda: checks.check_scaling_efficiency(10_000, 4, 34_000, 0.85),
        ("04_horovod", "2"): lambda: (
            checks.check_warmup_rate(0.001, 8, 100, 100, 0.008) & checks.check_warmup_rate(0.001, 8, 100, 50, 0.0045)
        ),
        ("05_tf_distribute", "2"): lambda: checks.check_global_batch_of_replicas(32, 32, 1024, workers=4),
        ("06_mixed_precision", "1"): lambda: precision.check_survivors(
            [True, True, True, False, True], [3e-8, 1e-7, 6e-5, 70_000.0, 65_519.0]
        ),
        ("06_mixed_precision", "2"): lambda: precision.check_loss_scale(2.0**15, 2e-9),
        ("06_mixed_precision", "3"): lambda: precision.check_bfloat16_normal(-126, True, 1e-30),
        ("06_mixed_precision", "4"): lambda: precision.check_layer_dtypes("float32", "bfloat16"),
        ("09_kubernetes", "2"): lambda: checks.check_ps_rule_owner("tensorflow", job),
    }


def test_each_registered_answer_is_found_as_its_check_prints_it(lab, capsys):
    calls = correct_answers()
    assert sorted(calls) == sorted((a.lesson.removesuffix(".ipynb"), a.exercise) for a in lab.ANSWERS)
    for entry in lab.ANSWERS:
        capsys.readouterr()
        assert calls[entry.lesson.removesuffix(".ipynb"), entry.exercise](), entry
        printed = capsys.readouterr().out
        assert re.search(entry.answer, printed), (entry, printed)


def test_every_registered_exercise_has_one_check_cell_and_its_lesson_shows_no_answer(lab):
    """On the lessons as they are in git (no outputs): each registered check cell is found once, and no answer is in
    the text of the lesson up to it."""
    for lesson in sorted({a.lesson for a in lab.ANSWERS}):
        nb = nbformat.read(REPO / "notebooks" / lesson, as_version=4)
        assert lab.answers_in_view(nb, lesson) == [], lesson


@pytest.mark.parametrize(
    "value, shown, hidden",
    [
        (19, ["19", "[19, 20]", "19.0"], ["119", "1.19", "190", "19.5"]),
        (1.875e6, ["1875000", "1,875,000", "1.875e+06"], ["18750000"]),
        (0.0045, ["0.0045"], ["0.00451", "10.0045"]),
    ],
)
def test_a_number_is_found_standing_alone(lab, value, shown, hidden):
    assert all(re.search(lab.number(value), text) for text in shown)
    assert not any(re.search(lab.number(value), text) for text in hidden)
