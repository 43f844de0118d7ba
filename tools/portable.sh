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

# readable_lines: standard input (what a program printed: any bytes, at most 64 kB read) as lines a terminal shows
# as they are: terminal escape sequences, NULs and other control characters removed (a tab or carriage return
# becomes a space), each byte that is not ASCII (invalid UTF-8 too) shown as '?', spaces squeezed, blank lines
# dropped, and each line cut to 200 characters.
readable_lines() {
  local esc bel
  esc="$(printf '\033')"
  bel="$(printf '\007')"
  head -c 65536 | LC_ALL=C tr -d '\000' \
    | LC_ALL=C sed -e "s|$esc\\[[0-9;?]*[ -/]*[@-~]||g" -e "s|$esc\\][^$bel]*$bel\\{0,1\\}||g" -e "s|$esc.||g" \
    | LC_ALL=C tr '\200-\377' '?' | LC_ALL=C tr '\001-\011\013-\037\177' ' ' \
    | LC_ALL=C awk '{ $1 = $1 } NF { if (length($0) > 200) $0 = substr($0, 1, 197) "..."; print }'
}

# nvidia_gpus: the NVIDIA GPUs that `nvidia-smi -L` lists, on one line in $nvidia_gpu_names ("NVIDIA A10G",
# "4 x NVIDIA A10G"). Returns 0 when it lists at least one; 1 when there is no nvidia-smi; 2 when nvidia-smi
# fails or lists no GPU, with what happened, on one readable line, in $nvidia_smi_said ("failed (exit 9:
# NVIDIA-SMI has failed ...)", "lists no GPU (exit 0: printed nothing)", "failed (exit 124: no answer in 20 s)").
nvidia_gpus() {
  local out rc limit tmp start
  nvidia_gpu_names=""
  nvidia_smi_said=""
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  # A driver in a bad state can leave nvidia-smi hanging; listing the GPUs takes well under a second. It is
  # stopped after $COURSE_NVIDIA_SMI_TIMEOUT s (20 by default; the tests use less): SIGTERM to its process group,
  # then SIGKILL 2 s later. Its output goes to a file, not a pipe: $(...) would wait for the pipe's end, which a
  # child it started in a session of its own (out of the group's reach) can hold open for as long as it lives.
  limit="${COURSE_NVIDIA_SMI_TIMEOUT:-20}"
  case "$limit" in '' | *[!0-9.]* | *.*.* | .*) limit=20 ;; esac
  if ! tmp="$(mktemp "${TMPDIR:-/tmp}/course-nvidia-smi.XXXXXX" 2>/dev/null)"; then
    nvidia_smi_said="could not be asked (no temporary file can be made in ${TMPDIR:-/tmp}: set TMPDIR to a writable folder)"
    return 2
  fi
  start=$SECONDS
  KILL_AFTER=2 with_timeout "$limit" nvidia-smi -L </dev/null >"$tmp" 2>&1 && rc=0 || rc=$?
  out="$(readable_lines <"$tmp")" || out=""
  rm -f "$tmp"
  if [ "$rc" = 0 ] && printf '%s\n' "$out" | grep '^GPU ' >/dev/null; then
    # "GPU 0: NVIDIA A10G (UUID: GPU-...)" -> "NVIDIA A10G"; identical GPUs counted, in the order listed
    nvidia_gpu_names="$(printf '%s\n' "$out" | sed -n -e '/^GPU /!d' -e 's/^GPU [0-9]*: //' -e 's/ (UUID:.*//' -e p | awk '
      { if (!($0 in n)) order[++k] = $0; n[$0]++ }
      END { for (i = 1; i <= k; i++) s = s (i > 1 ? ", " : "") (n[order[i]] > 1 ? n[order[i]] " x " : "") order[i]; print s }')"
    return 0
  fi
  if [ "$rc" = 124 ]; then
    out="no answer in $limit s"
  elif [ "$rc" = 137 ] && [ $((SECONDS - start)) -ge "${limit%.*}" ]; then  # GNU timeout's SIGKILL, 2 s after TERM
    out="no answer in $limit s; it ignored SIGTERM and was killed"
  else
    out="$(printf '%s\n' "$out" | sed -n 1p)"
    [ -n "$out" ] || out="printed nothing"
  fi
  out="exit $rc: $out"
  if [ "$rc" = 0 ]; then nvidia_smi_said="lists no GPU ($out)"; else nvidia_smi_said="failed ($out)"; fi
  return 2
}

# choose_tf_package REQUIREMENTS: the TensorFlow package to install, in $tf_package (a name; the version is
# tensorflow-cpu's pin in REQUIREMENTS, for every build), and why, on one line in $tf_package_why.
# TF_PACKAGE wins when set; then the TensorFlow wheel of the wheelhouse in $WHEELHOUSE (it holds one); then
# TensorFlow's GPU build, tensorflow[and-cuda], where nvidia-smi lists an NVIDIA GPU; else the CPU build.
choose_tf_package() {
  local version gpus cpu why_cpu rc_gpu
  version="$(sed -n 's/^tensorflow-cpu==//p' "$1")"
  cpu="$(default_tf_package)"
  nvidia_gpus && rc_gpu=0 || rc_gpu=$?
  gpus="$nvidia_gpu_names"
  case "$rc_gpu" in
    0) why_cpu="" ;;
    1) why_cpu="no NVIDIA GPU here (no nvidia-smi)" ;;
    *) why_cpu="nvidia-smi is installed but $nvidia_smi_said, so no GPU can be used" ;;
  esac
  if [ -n "${TF_PACKAGE:-}" ]; then
    tf_package="$TF_PACKAGE"
    tf_package_why="TensorFlow as $tf_package==$version, as TF_PACKAGE says"
    [ "$rc_gpu" = 0 ] && tf_package_why="$tf_package_why (nvidia-smi lists $gpus)"
  elif [ -n "${WHEELHOUSE:-}" ] && [ -f "$WHEELHOUSE/TF_PACKAGE" ]; then
    tf_package="$(cat "$WHEELHOUSE/TF_PACKAGE")"
    tf_package_why="TensorFlow as $tf_package==$version, the one the wheelhouse holds"
    if [ "$rc_gpu" = 0 ] && [ "$tf_package" != 'tensorflow[and-cuda]' ]; then
      tf_package_why="$tf_package_why, although nvidia-smi lists $gpus: for the GPU build, make a wheelhouse with
          TF_PACKAGE='tensorflow[and-cuda]' (make wheelhouse TF_PACKAGE='tensorflow[and-cuda]')"
    fi
  elif [ "$rc_gpu" = 0 ]; then
    tf_package='tensorflow[and-cuda]'
    tf_package_why="GPU found by nvidia-smi ($gpus): TensorFlow's GPU build, tensorflow[and-cuda]==$version (with
          NVIDIA's CUDA libraries, a few GB). To keep the CPU build, set TF_PACKAGE=$cpu (make lab TF_PACKAGE=$cpu)."
  else
    tf_package="$cpu"
    tf_package_why="$why_cpu: TensorFlow's CPU build, $cpu==$version"
    [ "$rc_gpu" = 2 ] && tf_package_why="$tf_package_why.
          Once \`nvidia-smi -L\` lists the GPU (the NVIDIA driver works), run the set-up again (make env) for the GPU build."
  fi
  return 0
}

# switch_tf_build PYTHON TF_PACKAGE: before TF_PACKAGE is installed into PYTHON's environment, remove the other
# TensorFlow build if it is there. tensorflow-cpu and tensorflow (the GPU build) install the same `tensorflow`
# module: pip would put one over the other, and removing either afterwards would break the module. Leaving the
# GPU build also removes the CUDA libraries that its [and-cuda] extra brought (a few GB the CPU build never loads).
switch_tf_build() {
  local other leaving
  case "$2" in
    tensorflow-cpu) other=tensorflow ;;
    *) other=tensorflow-cpu ;;
  esac
  leaving="$("$1" -c '
import importlib.metadata as m, re, sys
other = sys.argv[1]
try:
    m.version(other)
except m.PackageNotFoundError:
    sys.exit()
names = [other]
if other == "tensorflow":  # the CUDA libraries of its [and-cuda] extra, those installed
    for req in m.requires(other) or []:
        name = re.match(r"[A-Za-z0-9._-]+", req).group(0)
        if re.search(r"extra\s*==\s*.and-cuda.", req):
            try:
                m.version(name)
                names.append(name)
            except m.PackageNotFoundError:
                pass
print(" ".join(names))
' "$other")" || return 1
  [ -n "$leaving" ] || return 0
  printf '[setup] switching TensorFlow builds to %s: removing %s first\n' "$2" "$leaving"
  # shellcheck disable=SC2086  # one argument per package, on purpose
  "$1" -m pip uninstall --quiet --yes $leaving
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
