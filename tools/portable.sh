# Portable helpers for the course's shell scripts (sourced, not run): they work with the GNU tools of
# Linux and with what a stock macOS has (BSD tools, bash 3.2), falling back to Python where a tool
# differs. Set COURSE_PORTABLE_FALLBACK=1 to force the fallbacks (the tests do, to check them on Linux).
# shellcheck shell=bash

# The Python that the fallbacks run: the caller's $PY or $py when set, else python3.
_portable_python() {
  local candidate
  for candidate in "${PY:-}" "${py:-}" python3 python; do
    if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  echo "python3"
}

# sha256 of standard input, as 64 hex digits (GNU sha256sum, macOS shasum, or Python's hashlib).
sha256_hex() {
  if [ -z "${COURSE_PORTABLE_FALLBACK:-}" ] && command -v sha256sum >/dev/null 2>&1; then
    sha256sum | cut -d' ' -f1
  elif [ -z "${COURSE_PORTABLE_FALLBACK:-}" ] && command -v shasum >/dev/null 2>&1; then
    shasum -a 256 | cut -d' ' -f1
  else
    "$(_portable_python)" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
  fi
}

# Number of CPUs (GNU nproc, else getconf, which Linux and macOS both have, else 2).
cpu_count() {
  if [ -z "${COURSE_PORTABLE_FALLBACK:-}" ] && command -v nproc >/dev/null 2>&1; then
    nproc
  else
    getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2
  fi
}

# with_timeout SECONDS COMMAND...: run COMMAND; after SECONDS stop it (TERM, then KILL
# $KILL_AFTER s later, default 10) and return 124, as GNU `timeout --kill-after=10` does. Without GNU timeout (macOS), Python does it: the
# command runs in its own process group, and the whole group is stopped.
with_timeout() {
  local seconds="$1"
  shift
  if [ -z "${COURSE_PORTABLE_FALLBACK:-}" ] && command -v timeout >/dev/null 2>&1 \
     && timeout --version >/dev/null 2>&1; then
    timeout --kill-after="${KILL_AFTER:-10}" "$seconds" "$@"
    return $?
  fi
  "$(_portable_python)" -c '
import os, signal, subprocess, sys
limit, grace, cmd = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
proc = subprocess.Popen(cmd, start_new_session=True)
def killpg(signum):
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass
def stop(signum, frame):
    killpg(signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
try:
    rc = proc.wait(timeout=limit)
except subprocess.TimeoutExpired:
    killpg(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        killpg(signal.SIGKILL)
        proc.wait()
    sys.exit(124)
sys.exit(128 - rc if rc < 0 else rc)
' "$seconds" "${KILL_AFTER:-10}" "$@"
}

# The TensorFlow wheel for this platform: tensorflow-cpu, except on macOS with Apple silicon, where
# tensorflow-cpu has no wheels and the `tensorflow` wheel is the CPU build.
default_tf_package() {
  if [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" = arm64 ]; then
    echo tensorflow
  else
    echo tensorflow-cpu
  fi
}

# requirements_for TF_PACKAGE REQUIREMENTS: the pins, with TensorFlow installed as TF_PACKAGE.
# The pins installed with --no-deps (no_deps_pins) are left out: their own requirements would pull in the
# `tensorflow` package (the GPU build) next to tensorflow-cpu.
NO_DEPS_PINS='^tf-keras=='
requirements_for() {
  sed "s/^tensorflow-cpu==/$1==/" "$2" | grep -Ev "$NO_DEPS_PINS"
}

# no_deps_pins REQUIREMENTS: the pins to install with `pip install --no-deps` after the others.
no_deps_pins() {
  grep -E "$NO_DEPS_PINS" "$1"
}
