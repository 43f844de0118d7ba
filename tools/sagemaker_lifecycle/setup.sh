#!/usr/bin/env bash
# The course's set-up on a SageMaker notebook instance, started in the background by on-start.sh at
# every start, as the notebook user. Everything it makes lives in STATE (under ~/SageMaker), which
# survives a stop and start:
#   STATE/python   a Python 3.11 made with the instance's conda (once), when there is a conda
#   STATE/venv     the course environment (tools/setup_env.sh: reinstalls only when the pins change)
#   STATE/cache    the Horovod wheel cache (compiled once, on the first start), and SimGrid's SMPI build
# and then registers the kernel "Python 3 (distributed-training-course)" in ~/.local, which a stop erases.
# A notebook instance has no apt-get and the set-up runs as the notebook user, not root: tools/setup_env.sh then
# installs Open MPI from PyPI into the environment (Horovod is built against it) and SimGrid's SMPI is built from
# its source release on PyPI (tools/build_simgrid.sh). That build is the longest step of a first start, so it
# comes last, after the kernel is registered and the status says `ready`: the lessons can start meanwhile, and
# lesson 03 runs its simulated cluster once the log says "SimGrid ready" (the status then reads `ready+simgrid`).
#
#   bash tools/sagemaker_lifecycle/setup.sh [STATE]      (default: ~/SageMaker/.course-env)
# Without conda (a laptop, or a test), COURSE_PYTHON names the Python 3.11 to use (default: python3.11).
# TensorFlow's build is tools/setup_env.sh's choice: TF_PACKAGE when set (on-start.sh passes it on), else the GPU
# build where `nvidia-smi -L` lists a GPU (a GPU instance), else the CPU build; the log says which, and why.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
STATE="${1:-$HOME/SageMaker/.course-env}"
KERNEL_NAME="${COURSE_KERNEL_NAME:-distributed-training-course}"
mkdir -p "$STATE"
start=$(date +%s)
say() { printf '[course %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
status() { printf '%s %s\n' "$1" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$STATE/status"; }
fail() {
  say "ERROR: $*"
  status "failed"
  exit 1
}
status running
say "setting up the course in $repo (state in $STATE)"

# 1. Python 3.11, kept under ~/SageMaker.
find_conda() {
  local c
  for c in "${CONDA_EXE:-}" "$HOME/anaconda3/bin/conda" "$HOME/miniconda3/bin/conda" /opt/conda/bin/conda; do
    [ -n "$c" ] && [ -x "$c" ] && { printf '%s\n' "$c"; return 0; }
  done
  command -v conda 2>/dev/null || true
}
if [ -x "$STATE/python/bin/python3.11" ]; then
  PYTHON="$STATE/python/bin/python3.11"
else
  conda="$(find_conda)"
  if [ -n "$conda" ]; then
    say "creating Python 3.11 with $conda in $STATE/python (once)"
    "$conda" create --yes --quiet --prefix "$STATE/python" python=3.11 \
      || fail "conda could not create Python 3.11 in $STATE/python"
    PYTHON="$STATE/python/bin/python3.11"
  else
    PYTHON="${COURSE_PYTHON:-python3.11}"
    command -v "$PYTHON" >/dev/null 2>&1 || fail "no conda and no $PYTHON here: set COURSE_PYTHON to a Python 3.11"
    say "no conda found: using $PYTHON"
  fi
fi

# 2. The course environment and Horovod, both under ~/SageMaker.
# A wheelhouse copied into ~/SageMaker (make wheelhouse) makes the first start work offline.
if [ -z "${WHEELHOUSE:-}" ] && [ -f "$STATE/../wheelhouse/COMPLETE" ]; then
  WHEELHOUSE="$(cd "$STATE/../wheelhouse" && pwd)"
  export WHEELHOUSE
fi
COURSE_VENV="$STATE/venv" COURSE_CACHE_DIR="$STATE/cache" PYTHON="$PYTHON" COURSE_SIMGRID="${COURSE_SIMGRID:-defer}" \
  bash "$repo/tools/setup_env.sh" || fail "the course environment could not be set up (see above)"

# 3. The kernel, registered for the notebook user (a stop erases ~/.local, so every start does this).
# (ipykernel stages the kernelspec in a temporary folder it does not remove: it gets one that goes at once)
scratch="$(mktemp -d)"
# Open MPI and SimGrid from PyPI live in the environment's bin folder: the kernel puts it first on its PATH, so that
# a lesson's mpirun and smpirun are those (jupyter_client expands ${PATH} when it starts the kernel).
# shellcheck disable=SC2016  # ${PATH} is for jupyter_client
TMPDIR="$scratch" "$STATE/venv/bin/python" -m ipykernel install --user --name "$KERNEL_NAME" \
  --display-name "Python 3 ($KERNEL_NAME)" --env PATH "$STATE/venv/bin"':${PATH}' >/dev/null \
  || { rm -rf "$scratch"; fail "the kernel could not be registered"; }
rm -rf "$scratch"
say "kernel \"Python 3 ($KERNEL_NAME)\" registered"
# 4. The learner's copies of the lessons (utils/workspace.py): new lessons copied, the course's changes merged in.
"$STATE/venv/bin/python" -m utils.workspace sync || fail "the lessons could not be copied into $repo/workspace"
status ready
say "ready in $(( $(date +%s) - start )) s: open workspace/00_start_here.ipynb with that kernel"
# 5. SimGrid's SMPI, where the set-up left its build to this step (no system SimGrid): compiled once, kept in
# STATE/cache; a later start finds it there and only links it into the environment again.
if [ ! -x "$STATE/venv/bin/smpirun" ] && ! command -v smpirun >/dev/null 2>&1 && [ "${COURSE_SIMGRID:-}" != skip ]; then
  if COURSE_CACHE_DIR="$STATE/cache" bash "$repo/tools/build_simgrid.sh" "$STATE/venv/bin/python"; then
    status ready+simgrid
    say "SimGrid ready in $(( $(date +%s) - start )) s (from the start of this set-up): lesson 03 runs its simulated cluster"
  else
    say "WARNING: SimGrid's SMPI could not be built (above): lesson 03 skips its simulated cluster; the rest works"
  fi
fi
