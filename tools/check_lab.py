"""Check the lessons as a learner sees them in JupyterLab: each lesson's executed copy opened in the course's
own JupyterLab server (the one `make lab` starts) in headless Chromium, and failed on what would look broken.

    make lab-check                                   # after make test, which writes the executed copies
    python tools/check_lab.py 08_capstone.ipynb      # some lessons
    python tools/check_lab.py --mode full            # the copies of a full-mode run (make site SITE_MODE=full)

Nothing is executed here: the copies come from build/executed/<mode> (utils/execution.py), and a lesson whose
code changed since its copy was made is refused. Every cell is attached to the page (the check sets
notebook.windowingMode to "none" through the server's settings overrides) and rendered before it is read.
A cell fails when it shows:
- Markdown (a cell, or a Markdown output) whose dollar amounts or words MathJax typeset as a formula: a
  `$…$` pair that is not meant as math, such as two amounts in one sentence (escape them with
  utils.prose.markdown), or an escaped amount that does not show as "$" and its number;
- an error output (a traceback);
- output on stderr, unless ALLOWED_STDERR lists it with the reason a learner is shown it;
- a worker's raw result line, a line of printed output that starts with `RESULT {`, or with it after a worker's
  label (the JSON a launcher reads; a lesson shows what it says in words);
- a silent cell: one that ran longer than LONG_CELL_S seconds and showed nothing in its first FIRST_OUTPUT_S
  seconds, or nothing at all, or nothing for more than MAX_GAP_S seconds at a stretch after its first output (its
  timing comes from the copy: nbclient's start and end of each cell, and the first output's delay and the longest
  silence after it that utils.execution notes in the cell's metadata; a copy made before the longest silence was
  noted is judged on the rest);
- an exercise's answer in view before the learner asks for it (ANSWERS);
- a plot whose title disagrees with what the plot draws, read from the facts utils.figures records in each
  figure's image: a title set from the plot's data (utils.figures.finding) that the data shown no longer give, or
  that was changed after, and a title that states an outcome (faster, slower, better, worse) not read from them.

The answers are found by their text, not by understanding the lesson. ANSWERS lists, for each exercise whose
answer has a text of its own, the call that marks its check cell and a regular expression for the answer as the
course prints it (a number stands alone: 19 matches "19" or "19.0", not "1019" or "0.19"). That expression is
searched in the exercise's own cells: the check cell (its code and what it printed) and the Markdown question just
above it, where the number or word itself is the giveaway (a comment such as `# 4 x 32 = 128`, a message listing
the answer). A bare number is too common to look for anywhere else, so an entry may add `with_case`, an expression
for the answer printed beside the case it answers (e.g. "N=5, K=12" and 19 on one line), or a phrase that states
it; that one is searched in every cell from the top of the lesson to the check cell: Markdown, code and outputs.
Solution cells (tagged "solution") are skipped: they stay collapsed and run only when the learner asks. Not
listed: answers measured in the run (they change every run), answers that are scripts, functions or job
requests, answers a question's own options spell ("File", "FastFile" or "Pipe"), and exercises that ask the
learner to read a number the lesson printed (lesson 00's usable cores). What the check cannot see is code in view
that computes an answer; the checks keep that in utils.
A screenshot of each failing cell goes to build/lab-check/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat
import psutil
from check_site import CHROMIUM_FLAGS, chromium, keep_local  # tools/check_site.py: the site's browser set-up
from nbformat.sign import NotebookNotary

from utils import course, execution, figures, launch, prose
from utils.paths import REPO_ROOT

OUT = REPO_ROOT / "build" / "lab-check"
VIEWPORT = {"width": 1366, "height": 900}
#: The course's settings overrides, which `make lab` puts where the environment's JupyterLab reads them
#: (.venv/share/jupyter/lab/settings/overrides.d/course.json): no "official Jupyter news?" prompt. The check's server
#: reads the same file from the same place in its own settings folder.
COURSE_OVERRIDES = REPO_ROOT / "tools" / "jupyterlab_overrides.json"
#: Settings the check adds for its own server (overrides.json): every cell in the page, not only those near the
#: viewport; no update checks (the check stays on this machine).
CHECK_OVERRIDES = {
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False},
}


def merged(*settings: dict[str, dict]) -> dict[str, dict]:
    """Settings overrides one after the other, plugin by plugin, as JupyterLab merges its overrides files."""
    out: dict[str, dict] = {}
    for each in settings:
        for plugin, values in each.items():
            out.setdefault(plugin, {}).update(values)
    return out


#: Every setting the check's server must apply: the course's and the check's own (check_settings).
OVERRIDES = merged(json.loads(COURSE_OVERRIDES.read_text()), CHECK_OVERRIDES)
#: Lines on stderr that a lesson shows a learner on purpose: a pattern (regular expression) and why.
ALLOWED_STDERR: dict[str, str] = {}
#: A dollar amount in Markdown source: an unescaped `$`, a number, then a word or punctuation, as in
#: "$7,066 a day" or "at $2.00, and" (not "$2\frac{N-1}{N}$" or "$1003 = 7 \cdot 143 + 2$").
AMOUNT = re.compile(r"(?<!\\)\$(\d[\d,]*(?:\.\d+)?)(?=\s+[A-Za-z]|[,.;:!?)](?:\s|$)|$)", re.M)
#: An escaped amount (`\$3,945`, or utils.prose's `<span class="mathjax_ignore">&#36;</span>3,945`), which must
#: show as "$3,945".
ESCAPED = re.compile(r"(?:\\\$|" + re.escape(prose.DOLLAR) + r")(\d[\d,]*(?:\.\d+)?)")
#: Words typeset as a formula: MathJax sets each letter of ordinary text as a variable, one after another.
WORD_RUN = 6
#: What the page shows of each cell: its position, the MathJax formulas typeset in its rendered Markdown (their
#: text, their longest run of letters, whether they are in an output), its rendered Markdown's text, and the
#: text of its stderr outputs.
READ_CELLS = """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')].map((cell, i) => ({
  index: cell.dataset.windowedListIndex === undefined ? i : Number(cell.dataset.windowedListIndex),
  math: [...cell.querySelectorAll('.jp-RenderedMarkdown mjx-container')].map(m => {
    let run = 0, longest = 0;  // the longest run of single letters set as variables (<mi>), one after another
    for (const e of m.querySelectorAll('mjx-assistive-mml math *')) {
      if (e.children.length) continue;
      run = e.tagName.toLowerCase() === 'mi' && /^\\p{L}$/u.test(e.textContent) ? run + 1 : 0;
      longest = Math.max(longest, run);
    }
    return {text: (m.querySelector('mjx-assistive-mml') || m).textContent, letters: longest,
            output: m.closest('.jp-OutputArea') !== null};
  }),
  texts: [...cell.querySelectorAll('.jp-RenderedMarkdown')].map(r => ({
    text: r.innerText, output: r.closest('.jp-OutputArea') !== null})),
  stderr: [...cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
    .map(o => o.innerText),
}))"""
#: Changes while JupyterLab is still rendering: elements, typeset formulas, loaded images.
PROGRESS = """() => [document.querySelectorAll('.jp-NotebookPanel *').length,
  document.querySelectorAll('mjx-container').length,
  [...document.querySelectorAll('.jp-NotebookPanel img')].filter(i => i.complete).length]"""


@dataclass
class Problem:
    lesson: str
    cell: int  # index in the notebook, from 0
    cell_id: str
    what: str
    screenshot: Path | None = None

    def __str__(self) -> str:
        shot = f" (screenshot {_shown(self.screenshot)})" if self.screenshot else ""
        return f"{self.lesson}, cell {self.cell + 1} (id {self.cell_id}): {self.what}{shot}"


def _shown(path: Path) -> str:
    """A path as the repository's README would write it: relative to the repository where it is inside."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def markdown_amounts(nb, index: int, *, outputs: bool, pattern: re.Pattern = AMOUNT) -> list[str]:
    """The dollar amounts (their numbers) in a cell's Markdown source, or in its Markdown outputs."""
    cell = nb.cells[index]
    if outputs:
        texts = [out.get("data", {}).get("text/markdown", "") for out in cell.get("outputs", [])]
    else:
        texts = [cell.source] if cell.cell_type == "markdown" else []
    return [m.group(1) for text in texts for m in pattern.finditer("".join(text))]


#: A cell that runs longer than LONG_CELL_S seconds must show something within FIRST_OUTPUT_S of its start: a line
#: saying what it starts, then progress. 5 s, not less: the copies checked are executed two lessons at a time on a
#: 2-core machine (make test), where a cell's first imports alone can take a few seconds before its first line.
LONG_CELL_S, FIRST_OUTPUT_S = 10.0, 5.0
#: The course's rule for every cell: a line at least every MAX_GAP_S seconds while it runs (utils.heartbeat says a
#: launched run is still going every 10 s for this).
MAX_GAP_S = 15.0
#: A worker's raw result line (`RESULT {json}`, which utils.launch reads for the lesson), alone or as the launcher
#: streams it, after the worker's label ("[worker 1] ", or horovodrun's "[1]<stdout>:").
RESULT_LINE = re.compile(r"^(?:\[[^\]\n]+\]\s*(?:<stdout>:)?)?RESULT \{", re.M)


def number(value: float) -> str:
    """A regular expression for a number as a lesson prints it (128, 128.0, 1,875,000, 1.875e+06, 0.0045), standing
    alone: not part of a longer number or word."""
    forms = {f"{value:g}", repr(float(value))}
    if float(value).is_integer():
        forms |= {f"{int(value)}", f"{int(value):,}"}
    body = "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    return rf"(?<![\w.,])(?:{body})(?![\w]|[.,]\d)"


@dataclass(frozen=True)
class Answer:
    """An exercise's answer as a lesson would show it (see the module's docstring)."""

    lesson: str  # the lesson's file name
    exercise: str  # the exercise's number in its lesson
    check: str  # text only the exercise's check cell has: the call of its check
    answer: str  # the answer (a regular expression), searched in the check cell and the question above it
    with_case: str | None = None  # the answer beside its case, or a phrase stating it: searched up to the check


#: Every exercise whose answer has a text of its own, lesson by lesson.
ANSWERS = [
    Answer("00_start_here.ipynb", "2", "checks.check_global_batch(", number(128)),
    Answer("01_why_distributed.ipynb", "1", "checks.check_speedup_needed(", number(29.9)),
    Answer("01_why_distributed.ipynb", "2", "checks.check_job_hours_on_workers(", r"(?<![\d.])1\.28[89]\d*"),
    Answer("01_why_distributed.ipynb", "3", "checks.check_data_to_halve_error(", number(1024)),
    Answer("01_why_distributed.ipynb", "4", "checks.check_doubling_months(", r"(?<![\d.])3\.61\d*"),
    Answer("02_data_vs_model_parallelism.ipynb", "1", "checks.check_scaled_rate(", f"{number(512)}|{number(0.08)}"),
    Answer("02_data_vs_model_parallelism.ipynb", "2", "checks.check_gpipe_bubble(", f"{number(0.2)}|{number(28)}"),
    Answer("02_data_vs_model_parallelism.ipynb", "3", "checks.check_training_state_bytes(", number(16e9)),
    Answer(
        "02_data_vs_model_parallelism.ipynb",
        "4",
        "checks.check_parameter_server_values(",
        f"{number(16e6)}|{number(1.875e6)}",
    ),
    Answer("03_allreduce_cost.ipynb", "1", "checks.check_ring_bytes(", number(7e6)),
    Answer(
        "03_allreduce_cost.ipynb",
        "2",
        "checks.check_uneven_ring_worker(",
        number(19),
        with_case=rf"N ?= ?5, K ?= ?12\b[^\n]*{number(19)}",
    ),
    Answer("03_allreduce_cost.ipynb", "3", "checks.check_ring_time_ms(", number(60)),
    Answer("04_horovod.ipynb", "1", "checks.check_scaling_efficiency(", number(0.85)),
    Answer("04_horovod.ipynb", "2", "checks.check_warmup_rate(", f"{number(0.008)}|{number(0.0045)}"),
    Answer("05_tf_distribute.ipynb", "2", "checks.check_global_batch_of_replicas(", number(1024)),
    Answer(
        "06_mixed_precision.ipynb",
        "1",
        "precision.check_survivors(",
        r"\[True, True, True, False, True\]",
        with_case=r"\[True, True, True, False, True\]",
    ),
    Answer(
        "06_mixed_precision.ipynb", "2", "precision.check_loss_scale(", rf"{number(32768)}|2(?:\.0)? ?(?:\*\*|\^) ?15\b"
    ),
    Answer("06_mixed_precision.ipynb", "3", "precision.check_bfloat16_normal(", r"(?<![\w.])-126\b"),
    Answer("06_mixed_precision.ipynb", "4", "precision.check_layer_dtypes(", r"[\"']bfloat16[\"']"),
    Answer(
        "09_kubernetes.ipynb",
        "2",
        "checks.check_ps_rule_owner(",
        r"(?i)[\"']tensorflow(?:'s)?[\"']",
        with_case=r"(?i)only chief and worker tasks|no parameter servers",
    ),
]


def visible_text(cell) -> str:
    """What a learner sees of a cell: its source, and for a code cell the text of its outputs."""
    texts = [cell.source]
    for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
        texts.append("".join(out.get("text", "")))
        data = out.get("data", {})
        texts += ["".join(data.get(kind, "")) for kind in ("text/plain", "text/markdown", "text/html")]
    return "\n".join(texts)


def is_solution(cell) -> bool:
    """True for a solution cell: collapsed, and run only when the learner asks."""
    return "solution" in cell.get("metadata", {}).get("tags", [])


def answers_in_view(nb, lesson: str, answers: list[Answer] | None = None) -> list[tuple[int, str]]:
    """(cell index, what) for each exercise answer of `lesson` that a learner sees before asking for it."""
    found = []
    for entry in [a for a in (ANSWERS if answers is None else answers) if a.lesson == lesson]:
        checks = [
            i
            for i, c in enumerate(nb.cells)
            if c.cell_type == "code" and not is_solution(c) and entry.check in c.source
        ]
        if len(checks) != 1:
            found.append(
                (
                    0,
                    f"exercise {entry.exercise}'s check cell (the one calling {entry.check}...) is found "
                    f"{len(checks)} times, not once: update check_lab.ANSWERS to the lesson",
                )
            )
            continue
        check = checks[0]
        question = check
        while question > 0 and nb.cells[question - 1].cell_type == "markdown":
            question -= 1
        searches = [(range(question, check + 1), entry.answer)]
        if entry.with_case:
            searches.append((range(0, check + 1), entry.with_case))
        seen = set()
        for cells, pattern in searches:
            for i in cells:
                cell = nb.cells[i]
                match = None if is_solution(cell) else re.search(pattern, visible_text(cell))
                if match and i not in seen:
                    seen.add(i)
                    where = "the exercise's own cells" if i >= question else "a cell before the exercise"
                    found.append(
                        (
                            i,
                            f"the answer to exercise {entry.exercise} is in view in {where} "
                            f"({match.group(0)[:80]!r}) before the learner asks for it: keep it in the "
                            "check (utils), or ask about a case the lesson does not show",
                        )
                    )
    return found


def _seconds(start: str, end: str) -> float:
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


def silent(cell, max_gap: float | None = None) -> str | None:
    """Why a code cell is silent (it ran past LONG_CELL_S and showed nothing in its first FIRST_OUTPUT_S, or once
    nothing for longer than `max_gap`, MAX_GAP_S unless given, after its first output), or None."""
    timing = cell.get("metadata", {}).get("execution", {})
    if cell.cell_type != "code" or not {"iopub.execute_input", "shell.execute_reply"} <= set(timing):
        return None
    took = _seconds(timing["iopub.execute_input"], timing["shell.execute_reply"])
    if took <= LONG_CELL_S:
        return None
    noted = cell.get("metadata", {}).get("course", {})
    first, gap = noted.get("first_output_s"), noted.get("longest_gap_s")
    max_gap = MAX_GAP_S if max_gap is None else max_gap
    fix = (
        "print a line saying what it starts (flush=True), then progress (a line per step, or tqdm with file=sys.stdout)"
    )
    if not cell.get("outputs"):
        return f"a silent cell: it ran {took:.0f} s and showed nothing at all: {fix}"
    if first is None:
        return (
            f"it ran {took:.0f} s, and when its first output came is not recorded: execute the lesson again "
            "(python -m utils.execution), which records it"
        )
    found = []
    if first > FIRST_OUTPUT_S:
        found.append(f"showed nothing for its first {first:.0f} s: {fix}")
    if gap is not None and gap > max_gap:
        found.append(
            f"once showed nothing for {gap:.0f} s (limit {max_gap:.0f} s): print a line every few seconds while "
            "it works (a launched run: utils.heartbeat.stream; a loop: a line per step, or tqdm with file=sys.stdout)"
        )
    if found:
        return f"a silent cell: it ran {took:.0f} s and " + "; and it ".join(found)
    return None


def notebook_problems(nb, lesson: str) -> list[tuple[int, str]]:
    """(cell index, what) for what is wrong in the executed copy itself, whatever the page shows: raw result lines,
    silent cells and answers in view."""
    found = []
    for index, cell in enumerate(nb.cells):
        printed = "\n".join(
            "".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream"
        )
        raw = RESULT_LINE.search(printed)
        if raw:
            line = printed[raw.start() :].split("\n", 1)[0]
            found.append(
                (
                    index,
                    f"a worker's raw result line is shown ({line[:60]!r}): launch with stream=False or a filter, "
                    "and print in words what the lesson reads from it",
                )
            )
        why = silent(cell)
        if why:
            found.append((index, why))
        for out in cell.get("outputs", []):
            recorded = out.get("metadata", {}).get("image/png", {}).get(figures.KEY)
            found += [(index, f"a plot: {what}") for what in figures.problems(recorded or {})]
    return found + answers_in_view(nb, lesson)


#: A line printed by an exercise's check (utils.checks.report): "[what] correct: ..." and its siblings.
CHECK_LINE = re.compile(r"^\[[^\]]+\] (correct|not quite|not answered)")


def allowed(line: str) -> bool:
    """True when a stderr line is one a lesson shows on purpose (ALLOWED_STDERR)."""
    return any(re.search(pattern, line) for pattern in ALLOWED_STDERR)


def cell_problems(nb, seen: dict) -> list[str]:
    """What is broken in one rendered cell, read from the page (`seen`, as READ_CELLS gives it) and told
    apart with the cell's outputs in the notebook."""
    index, cell, found = seen["index"], nb.cells[seen["index"]], []
    for math in seen["math"]:
        shown = re.sub(r"\s+", "", math["text"])
        where = "a Markdown output" if math["output"] else "the Markdown cell"
        amount = next((a for a in markdown_amounts(nb, index, outputs=math["output"]) if shown.startswith(a)), None)
        if amount is not None:
            found.append(
                f"${amount} in {where} is typeset as a formula by MathJax, and the text up to the next $ "
                f"with it ({shown[:60]!r}): escape the $ signs (utils.prose.markdown)"
            )
        elif math["letters"] >= WORD_RUN:
            found.append(
                f"words in {where} are typeset as a formula by MathJax ({shown[:60]!r}): a pair of $ signs "
                "that is not math; escape them (utils.prose.markdown)"
            )
    for output in (False, True):
        shown = "\n".join(t["text"] for t in seen["texts"] if t["output"] == output)
        for amount in markdown_amounts(nb, index, outputs=output, pattern=ESCAPED):
            if f"${amount}" not in shown or f"\\${amount}" in shown:
                found.append(f"the escaped amount \\${amount} does not show as ${amount}")
    checked = [
        line
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
        for line in "".join(out.get("text", "")).splitlines()
        if CHECK_LINE.match(line)
    ]
    for line in sorted({line for line in checked if checked.count(line) > 1}):
        found.append(
            f"an exercise check prints the same line {checked.count(line)} times ({line[:100]!r}): a learner "
            "cannot tell the cases apart; give each its own label"
        )
    errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    for text in seen["stderr"]:
        error = next((e for e in errors if e.get("ename", "") in text), None)
        if error is not None:
            found.append(f"an error output: {error.get('ename')}: {error.get('evalue')}")
            continue
        lines = [line for line in text.splitlines() if line.strip() and not allowed(line)]
        if lines:
            found.append(f"stderr a learner sees ({len(lines)} lines not in ALLOWED_STDERR), first: {lines[0][:200]!r}")
    return found


def start_server(work: Path, root: Path, out: Path) -> tuple[subprocess.Popen, str, str]:
    """A headless JupyterLab server as `make lab` starts it (this environment, the repository as its root),
    with the course's settings overrides as `make lab` puts them, the check's own, and its own empty user settings,
    workspaces and trust database."""
    (work / "app" / "overrides.d").mkdir(parents=True)
    shutil.copy(COURSE_OVERRIDES, work / "app" / "overrides.d" / "course.json")
    (work / "app" / "overrides.json").write_text(json.dumps(CHECK_OVERRIDES, indent=1))
    port, token = launch.free_ports(1)[0], secrets.token_hex(16)  # below the kernel's own range
    env = {**os.environ, "JUPYTER_PATH": str(REPO_ROOT / ".venv" / "share" / "jupyter")}
    jupyter = Path(sys.executable).with_name("jupyter")
    command = [str(jupyter), "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1", f"--notebook-dir={root}"]
    command += [f"--IdentityProvider.token={token}", f"--LabApp.app_settings_dir={work / 'app'}"]
    command += [f"--LabApp.user_settings_dir={work / 'user'}", f"--LabApp.workspaces_dir={work / 'workspaces'}"]
    command += [f"--NotebookNotary.data_dir={work / 'trust'}"]
    command += ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    with (out / "server.log").open("w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5).read()
            return server, base, token
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                stop_server(server)
                raise RuntimeError(f"JupyterLab did not start within 120 s; its log: {out / 'server.log'}") from None
            time.sleep(0.5)


def stop_server(server: subprocess.Popen) -> None:
    """Stop the server and every kernel it started."""
    children = psutil.Process(server.pid).children(recursive=True) if server.poll() is None else []
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def check_settings(base: str, token: str) -> None:
    """Fail unless the server applies the course's and the check's overrides (JupyterLab's settings API: overrides
    become the schema's defaults, and the check's own user settings are empty)."""
    for plugin, wanted in OVERRIDES.items():
        with urllib.request.urlopen(f"{base}/lab/api/settings/{plugin}?token={token}", timeout=30) as answer:
            found = json.load(answer)
        composite = {key: spec.get("default") for key, spec in found["schema"]["properties"].items()}
        composite.update(found["settings"])
        for key, value in wanted.items():
            if composite.get(key) != value:
                raise RuntimeError(
                    f"JupyterLab's {plugin} has {key}={composite.get(key)!r}, not the overrides' {value!r} "
                    f"({_shown(COURSE_OVERRIDES)} or CHECK_OVERRIDES)"
                )


def shut_down_kernels(base: str, token: str) -> None:
    """Shut down the sessions (kernels) that opening a notebook started."""
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as answer:
        sessions = json.load(answer)
    for session in sessions:
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


def wait_rendered(page, cells: int, markdown: int, timeout: float = 90) -> float:
    """Wait until every cell is on the page, every Markdown cell rendered and nothing changes for 1.5 s."""
    start, last, steady = time.monotonic(), None, 0
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=timeout * 1000)
    while time.monotonic() - start < timeout:
        count = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").count()
        rendered = page.locator(".jp-NotebookPanel .jp-MarkdownCell.jp-mod-rendered").count()
        now = page.evaluate(PROGRESS)
        steady = steady + 1 if (count == cells and rendered == markdown and now == last) else 0
        if steady >= 3:
            return time.monotonic() - start
        last = now
        time.sleep(0.5)
    raise TimeoutError(
        f"JupyterLab showed {count} of {cells} cells and rendered {rendered} of {markdown} Markdown cells "
        f"within {timeout:.0f} s"
    )


def check_lesson(page, base: str, token: str, name: str, copy: Path, root: Path, out: Path) -> list[Problem]:
    """Open one executed copy in JupyterLab, wait for it to render and return its problems (with screenshots)."""
    nb = nbformat.read(copy, as_version=4)
    markdown = sum(cell.cell_type == "markdown" for cell in nb.cells)
    path = copy.relative_to(root).as_posix()
    page.goto(f"{base}/lab/tree/{path}?reset&token={token}")
    try:
        seconds = wait_rendered(page, len(nb.cells), markdown)
    except TimeoutError as err:
        page.screenshot(path=str(out / f"{Path(name).stem}.not-rendered.png"))
        raise TimeoutError(f"{name}: {err} (screenshot in {_shown(out)})") from None
    panels = page.locator(".jp-NotebookPanel").count()
    if panels != 1:
        raise RuntimeError(f"{panels} notebooks open in JupyterLab where the check opened one ({path})")
    problems = []
    for seen in page.evaluate(READ_CELLS):
        for what in cell_problems(nb, seen):
            problems.append(Problem(name, seen["index"], nb.cells[seen["index"]].get("id", "?"), what))
    for index, what in notebook_problems(nb, name):
        problems.append(Problem(name, index, nb.cells[index].get("id", "?"), what))
    for problem in problems:
        shot = out / f"{Path(name).stem}.cell{problem.cell + 1:03d}.png"
        if problem.screenshot is None and not shot.exists():
            element = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(problem.cell)
            element.scroll_into_view_if_needed()
            element.screenshot(path=str(shot))
        problem.screenshot = shot
    print(f"[lab] {name}: {len(nb.cells)} cells rendered in {seconds:.1f} s, {len(problems)} problems", flush=True)
    return problems


def check(copies: dict[str, Path], root: Path = REPO_ROOT, out: Path = OUT) -> tuple[list[Problem], list[str]]:
    """Open each executed copy (a file under root) in a JupyterLab server with root as its folder, and return the
    problems found (screenshots in out, emptied first) and the requests to other hosts that were blocked."""
    from playwright.sync_api import sync_playwright

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    problems: list[Problem] = []
    outside: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lab-check-") as work:
        (Path(work) / "trust").mkdir()
        trust = NotebookNotary(data_dir=str(Path(work) / "trust"))
        for copy in copies.values():  # the learner's own executed notebook is trusted: its outputs render in full
            trust.sign(nbformat.read(copy, as_version=4))
        server, base, token = start_server(Path(work), root, out)
        try:
            check_settings(base, token)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
                context = browser.new_context(viewport=VIEWPORT)
                # JupyterLab's first load is megabytes of JavaScript: Playwright's default 30 s is short for it on a
                # busy 2-core machine (CI runs this beside other checks)
                context.set_default_timeout(90_000)
                context.route("**/*", functools.partial(keep_local, outside))
                for name, copy in copies.items():
                    page = context.new_page()
                    problems += check_lesson(page, base, token, name, copy, root, out)
                    page.close()
                    shut_down_kernels(base, token)
                browser.close()
        finally:
            stop_server(server)
    return problems, sorted(set(outside))


def main() -> None:
    """Check every named lesson (default: all); exit 1 with the list of problems when any is found."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=execution.MODES, default="smoke")
    parser.add_argument("--stale", action="store_true", help="also check copies made from older code")
    parser.add_argument("notebooks", nargs="*", help="file names in notebooks/ (default: every lesson)")
    args = parser.parse_args()
    names = args.notebooks or [lesson.notebook for lesson in course.lessons()]
    for name in names:
        if args.stale and execution.copy_path(name, args.mode).is_file():
            continue
        if not execution.is_current(name, args.mode):
            sys.exit(
                f"No current executed copy of {name} in {execution.copy_path(name, args.mode).parent} (the lesson's "
                f"code changed since, or it was never run): run `make test`, or `.venv/bin/python -m utils.execution "
                f"--mode {args.mode} {name}`."
            )
    start = time.perf_counter()
    copies = {name: execution.copy_path(name, args.mode) for name in names}
    try:
        problems, outside = check(copies)
    except (RuntimeError, TimeoutError) as err:
        sys.exit(f"[lab] ERROR: {err}")
    took = time.perf_counter() - start
    print(f"[lab] {len(names)} lessons checked in JupyterLab in {took:.0f} s; screenshots of failing cells in {OUT}")
    if outside:
        print("[lab] requests to hosts outside this machine, blocked:\n  " + "\n  ".join(outside))
    if problems:
        print("[lab] PROBLEMS a learner would see:\n  " + "\n  ".join(map(str, problems)), file=sys.stderr)
        sys.exit(1)
    print("[lab] JupyterLab check passed")


if __name__ == "__main__":
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    main()
