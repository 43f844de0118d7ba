#!/bin/bash
# SageMaker notebook instance lifecycle configuration, "Start notebook" script (runs as root at every
# start, creation included). A lifecycle script that runs longer than 5 minutes fails the start, and
# the first set-up takes longer (packages, then a Horovod compile), so this script only starts the
# set-up in the background (nohup) and returns at once.
#
# The set-up (tools/sagemaker_lifecycle/setup.sh in the course) keeps everything under ~/SageMaker,
# which survives a stop: a Python 3.11, the course environment, the Horovod wheel cache. It then
# registers the kernel "Python 3 (distributed-training-course)", which a stop erases (it lives in ~/.local).
# The first start compiles Horovod, then SimGrid (after the status turns ready): about 1,700 CPU-seconds in all,
# measured without root on 2 cores (docs/notebook_instance.md); every later start takes seconds. Progress:
#   ~/SageMaker/.course-env/setup.log   and the one-line state in ~/SageMaker/.course-env/status
# On a GPU instance (ml.g5, ml.g6, ...) the set-up installs TensorFlow's GPU build (it asks nvidia-smi), and the log
# says which build it chose and why.
set -euo pipefail

# TensorFlow's build. Empty: the GPU build where nvidia-smi lists a GPU, else the CPU build. tensorflow-cpu keeps
# the CPU build on a GPU instance. (sudo below passes no environment to the set-up: this line does.)
TF_PACKAGE="${TF_PACKAGE:-}"

NB_USER="${COURSE_NB_USER:-ec2-user}"
SAGEMAKER_DIR="${COURSE_SAGEMAKER_DIR:-/home/$NB_USER/SageMaker}"
COURSE_DIR="${COURSE_DIR:-$SAGEMAKER_DIR/distributed-training-course}"
STATE="$SAGEMAKER_DIR/.course-env"

if [ ! -f "$COURSE_DIR/tools/sagemaker_lifecycle/setup.sh" ]; then
  # The course may have been cloned under another folder name.
  for found in "$SAGEMAKER_DIR"/*/tools/sagemaker_lifecycle/setup.sh; do
    [ -f "$found" ] && { COURSE_DIR="${found%/tools/sagemaker_lifecycle/setup.sh}"; break; }
  done
fi
if [ ! -f "$COURSE_DIR/tools/sagemaker_lifecycle/setup.sh" ]; then
  echo "[course] no course found in $SAGEMAKER_DIR: nothing to set up (see on-create.sh)."
  exit 0
fi

as_user() {
  if [ "$(id -u)" = 0 ] && [ "$(id -un)" != "$NB_USER" ] && id "$NB_USER" >/dev/null 2>&1; then
    sudo -u "$NB_USER" -H "$@"
  else
    "$@"
  fi
}

as_user mkdir -p "$STATE"
# shellcheck disable=SC2016  # expanded by the inner shell
as_user bash -c 'echo "starting $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$0/status"' "$STATE"
echo "[course] setting up $COURSE_DIR in the background; progress in $STATE/setup.log"
# shellcheck disable=SC2016  # $0 and $1 are expanded by the inner shell
as_user env "TF_PACKAGE=$TF_PACKAGE" nohup bash -c 'exec bash "$0" "$1" >>"$1/setup.log" 2>&1' \
  "$COURSE_DIR/tools/sagemaker_lifecycle/setup.sh" "$STATE" >/dev/null 2>&1 </dev/null &
exit 0
