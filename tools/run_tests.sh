#!/usr/bin/env bash
# Runs the course's tests in .venv: the unit tests, then every notebook executed top to bottom through nbmake
# in smoke mode (COURSE_SMOKE=1), its executed copy kept in build/executed/smoke (utils/nbmake_plugin.py).
# Bounded per test, per notebook cell, and as a whole run.
#   bash tools/run_tests.sh [all|lint|unit|notebooks]
# Budgets (seconds) can be changed with TEST_BUDGET (whole run) and CELL_BUDGET (one cell); TEST_WORKERS
# unit tests run at a time (default 4), NOTEBOOK_JOBS lessons (default 2; 1 executes them in order, one by one).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
# shellcheck source=tools/portable.sh
. "$repo/tools/portable.sh"
# shellcheck source=tools/run_tmpdir.sh
. "$repo/tools/run_tmpdir.sh"
what="${1:-all}"
py="$repo/.venv/bin/python"
export COURSE_SMOKE=1
export JUPYTER_PATH="$repo/.venv/share/jupyter"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
export PYTHONDONTWRITEBYTECODE=1
TEST_BUDGET="${TEST_BUDGET:-3600}"
CELL_BUDGET="${CELL_BUDGET:-300}"
start=$(date +%s)

# Every process this run starts inherits a session mark; whatever still carries it at the end (workers
# orphaned when a budget ran out) is stopped, and processes of other runs (an open JupyterLab) are not.
export COURSE_TEST_SESSION="test-$$-$start"
# shellcheck disable=SC2329  # called by the trap below
stop_leftovers() {
  "$py" -m utils.processes stop COURSE_TEST_SESSION "$COURSE_TEST_SESSION" || true
  run_tmpdir_close >/dev/null 2>&1 || true  # a run stopped early: its temporary folder goes too
}
trap stop_leftovers EXIT
# Every process of the run makes its temporary files in a folder of the run's own (tools/run_tmpdir.sh).
run_tmpdir_open || { echo "[test] ERROR: could not make a temporary folder in ${TMPDIR:-/tmp}" >&2; exit 1; }

# within_budget COMMAND...: run COMMAND with what is left of the whole run's budget; stop it when that is spent.
within_budget() {
  local left=$(( TEST_BUDGET - ($(date +%s) - start) ))
  if [ "$left" -le 0 ]; then
    echo "[test] ERROR: the budget of $TEST_BUDGET s for the whole run is used up; not started: $*" >&2
    return 1
  fi
  KILL_AFTER=30 with_timeout "$left" "$@"
  local rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "[test] ERROR: the whole run exceeded its budget of $TEST_BUDGET s (TEST_BUDGET) and was stopped." >&2
  fi
  return $rc
}

# pytest exits 5 when it collects nothing: a run that tests nothing is a failure here.
run() {
  within_budget "$py" -m pytest "$@"
  local rc=$?
  case $rc in
    0) return 0 ;;
    5) echo "[test] ERROR: no tests were collected by: pytest $*" >&2; return 1 ;;
    *) return $rc ;;
  esac
}

rc=0
# stage_done NAME: how long the stage took (each stage's time, for CI's log and the course's timing goals)
stage_start=$start
stage_done() {
  echo "[test] $1 took $(( $(date +%s) - stage_start )) s"
  stage_start=$(date +%s)
}

if [ "$what" = all ] || [ "$what" = lint ]; then
  echo "[test] lint and format checks (ruff)"
  if "$repo/.venv/bin/ruff" check --quiet . && "$repo/.venv/bin/ruff" format --check --quiet .; then
    echo "[test] ruff: no problem found"
  else
    echo "[test] ERROR: ruff found problems (above); \`make format\` fixes most of them" >&2
    rc=1
  fi
  echo "[test] shell scripts (shellcheck)"
  shell_scripts=()
  # every shell script of the repository (git's list; without git, every *.sh outside the environment)
  while IFS= read -r script; do shell_scripts+=("$script"); done < <(
    git ls-files -co --exclude-standard '*.sh' 2>/dev/null \
      || find . -name '*.sh' -not -path './.venv/*' -not -path './build/*' -not -path './wheelhouse/*')
  [ -f .ci/run ] && shell_scripts+=(.ci/run)  # CI's entry point has no .sh suffix
  if "$repo/.venv/bin/shellcheck" -x "${shell_scripts[@]}"; then
    echo "[test] shellcheck: no problem found in ${#shell_scripts[@]} scripts"
  else
    echo "[test] ERROR: shellcheck found problems (above)" >&2
    rc=1
  fi
  echo "[test] GitHub Actions workflows (zizmor, offline)"
  if "$repo/.venv/bin/zizmor" --offline --quiet .github/workflows; then
    echo "[test] zizmor: no problem found"
  else
    echo "[test] ERROR: zizmor found problems in .github/workflows (above)" >&2
    rc=1
  fi
  stage_done lint
fi
if [ "$what" = all ] || [ "$what" = unit ]; then
  # Most tests wait on processes they start (rendezvous, timeouts, TensorFlow's import), so they run
  # TEST_WORKERS at a time (pytest-xdist); the ones that measure a bandwidth or a duration (marked `alone`)
  # run afterwards with nothing beside them.
  # Four on two cores: with two, the cores stood idle a third of the stage, most tests waiting; with three, 15 % of
  # it (600 s); with four, 6 % (545 s; vmstat, 2-core AMD EPYC, 2026-11-30).
  workers="${TEST_WORKERS:-4}"
  echo "[test] unit tests ($workers at a time, then the ones that measure, alone)"
  run tests -q -p no:cacheprovider --timeout=300 --durations=25 -n "$workers" --dist worksteal -m "not alone" \
    || rc=1
  run tests -q -p no:cacheprovider --timeout=300 -m alone || rc=1
  stage_done "unit tests"
fi
if [ "$what" = all ] || [ "$what" = notebooks ]; then
  # Every lesson executed through nbmake (`pytest --nbmake`, with the course's plugin utils/nbmake_plugin.py), once:
  # the lessons whose verdicts or asserts rest on times they measure (utils.execution.MEASURING, by mode; marked
  # `alone`) first, one at a time with nothing beside them; then the others NOTEBOOK_JOBS at a time (default 2:
  # most of them keep one core busy, not two), longest first. NOTEBOOK_DIR and COURSE_EXECUTED change where the
  # lessons are read from and where their executed copies go.
  jobs="${NOTEBOOK_JOBS:-2}"
  lessons="${NOTEBOOK_DIR:-notebooks}"
  echo "[test] notebooks in $lessons (COURSE_SMOKE=1), through nbmake, the measuring ones alone, then $jobs at a time; at most $CELL_BUDGET s a cell (CELL_BUDGET)"
  # The executed copies stay in build/executed/smoke: the website (make site) and the JupyterLab check
  # (make lab-check) read them instead of executing the lessons again.
  nbmake=(--nbmake "$lessons" -p utils.nbmake_plugin -p no:cacheprovider --nbmake-timeout "$CELL_BUDGET"
    --nbmake-kernel python3 --executed-copies "${COURSE_EXECUTED:-$repo/build/executed}" -v --no-header)
  # (pytest exits 5 when no lesson of the folder is one that measures: nothing to run alone)
  within_budget "$py" -m pytest "${nbmake[@]}" -m alone
  case $? in 0 | 5) ;; *) rc=1 ;; esac
  parallel=()
  # worksteal: each worker gets a run of lessons planned to end with the other's (utils.execution.order, from their
  # recorded times in data/notebook_durations.csv), and a worker that runs out takes lessons from the other's tail
  # (load: 689 s here, where two workers could have shared the same lessons in about 590 s)
  [ "$jobs" -gt 1 ] && parallel=(-n "$jobs" --dist worksteal)
  run "${nbmake[@]}" -m "not alone" "${parallel[@]}" || rc=1
  stage_done notebooks
fi
"$py" -m utils.processes stop COURSE_TEST_SESSION "$COURSE_TEST_SESSION" || true
run_tmpdir_close || rc=1
echo "[test] finished in $(( $(date +%s) - start )) s"
exit $rc
