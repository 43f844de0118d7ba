#!/bin/bash
# SageMaker notebook instance lifecycle configuration, "Create notebook" script (runs once, as root,
# when the instance is created). It puts the course under ~/SageMaker, the only folder that survives a
# stop and start. The set-up itself is done by on-start.sh, which SageMaker also runs at creation.
#
# Set COURSE_REPO_URL below to the course's git URL, or leave it empty when the instance clones the
# course itself (a git repository associated with the notebook instance lands in ~/SageMaker too).
set -euo pipefail

COURSE_REPO_URL="${COURSE_REPO_URL:-}"
NB_USER="${COURSE_NB_USER:-ec2-user}"
SAGEMAKER_DIR="${COURSE_SAGEMAKER_DIR:-/home/$NB_USER/SageMaker}"
COURSE_DIR="${COURSE_DIR:-$SAGEMAKER_DIR/distributed-training-course}"

as_user() {
  # Run as the notebook user when this script runs as root and that user exists (on an instance);
  # otherwise (a test, or a manual run) as whoever runs it.
  if [ "$(id -u)" = 0 ] && [ "$(id -un)" != "$NB_USER" ] && id "$NB_USER" >/dev/null 2>&1; then
    sudo -u "$NB_USER" -H "$@"
  else
    "$@"
  fi
}

if [ -d "$COURSE_DIR/.git" ] || [ -f "$COURSE_DIR/Makefile" ]; then
  echo "[course] the course is already in $COURSE_DIR"
elif [ -n "$COURSE_REPO_URL" ]; then
  echo "[course] cloning $COURSE_REPO_URL into $COURSE_DIR"
  as_user git clone --quiet "$COURSE_REPO_URL" "$COURSE_DIR"
else
  echo "[course] COURSE_REPO_URL is empty and $COURSE_DIR does not exist: clone the course into ~/SageMaker"
  echo "[course] (or associate its git repository with the notebook instance); on-start.sh sets it up then."
fi
