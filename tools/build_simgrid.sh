#!/usr/bin/env bash
# Builds SimGrid's SMPI (smpicc, smpirun: lesson 03's simulated cluster, utils/simgrid.py) from SimGrid's source
# release on PyPI, with no root: for machines where apt-get (libsimgrid-dev) cannot be used, such as a SageMaker
# notebook instance. tools/setup_env.sh calls it there; the Debian path installs libsimgrid-dev instead.
#
#   bash tools/build_simgrid.sh PYTHON      (the course environment's Python: its pip downloads, its cmake builds)
#
# What it does, and why:
# - SimGrid on PyPI (simgrid==4.1, a source distribution) is the whole SimGrid source tree, but `pip install
#   simgrid` builds only the Python bindings, with SMPI off (its setup.py passes -Denable_smpi=OFF). So the source
#   release is downloaded with pip (its sha256 checked) and built with CMake, SMPI on, into a prefix.
# - SimGrid needs Boost's headers (no Boost library). Where the system has none (Amazon Linux 2023 has no
#   boost-devel installed, and installing it needs root), they come from PyPI's boost-headers wheel (the headers
#   of Boost 1.85, unpacked for the build only); a five-line BoostConfig.cmake written here lets SimGrid's CMake
#   find them (the wheel has no CMake package of its own). The -I of these headers comes before the system's, so a
#   system Boost is not what the build uses.
# - Built without what the course does not use (Python and Java bindings, model checker, Fortran, LTO) and at -O2
#   without debug information, which roughly halves the compile (SimGrid's own default is -O3 -g3). Simulated times
#   do not depend on the compiler's flags: only how long a simulation takes to run does.
# - Most of a SimGrid file's compile is spent reading Boost's and the standard library's headers (about 1,000 files
#   each time), so those are compiled once into a precompiled header that every C++ file of the library starts
#   with (CMake's target_precompile_headers, added from outside SimGrid's CMakeLists through
#   CMAKE_PROJECT_INCLUDE): measured on one of SMPI's files, 3.6 s of CPU without it, 1.6 s with it. A file that
#   cannot use it reads the headers as usual.
# - The prefix is kept in a cache outside the repository, keyed by SimGrid's version, the platform, the C++
#   compiler and the build recipe (as tools/build_horovod.sh keys Horovod's wheel), so it is compiled once per
#   machine; the environment gets links to its smpicc, smpicxx and smpirun in its bin folder:
#     ${COURSE_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/distributed-training-course}/simgrid/<key>
# - It ends by proving the build: smpicc compiles an MPI_Allreduce and smpirun runs it on 4 simulated hosts.
# - With COURSE_CACHED_ONLY=1, where no build is cached it compiles nothing: it says so and exits with status 75.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
# shellcheck source=tools/portable.sh
. "$here/portable.sh"
PY="${1:?usage: bash tools/build_simgrid.sh PYTHON}"

say() { printf '[simgrid] %s\n' "$*"; }
die() { printf '[simgrid] ERROR: %s\n' "$*" >&2; exit 1; }

version="$(sed -n 's/^#build: simgrid==\([0-9.]*\).*/\1/p' "$repo/requirements.txt")"
boost_version="$(sed -n 's/^#build: boost-headers==\([0-9a-z.]*\).*/\1/p' "$repo/requirements.txt")"
[ -n "$version" ] && [ -n "$boost_version" ] \
  || die "requirements.txt has no '#build: simgrid==X.Y' or '#build: boost-headers==X.Y.Z' line"
# sha256 of the two downloads on the registry, so that what is compiled is what was checked.
sdist_sha256="23ac24cb5b2467f1f051c992ec921b4a9f8f5ac2df16c489bd01bf1c44e6e817"
boost_sha256="4510a571d3bf6c5e913b31d2a9b2441ee79f883ae42d42a5882dd1da46b35e7f"

bin="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")"
cmake="$bin/cmake"
[ -x "$cmake" ] || die "the cmake package is missing from $PY: install requirements.txt first."

# The build recipe: CMake's options and the BoostConfig.cmake written for the headers (part of the key).
cmake_flags=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS_RELEASE=-O2 -g0" "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -g0"
             -Denable_smpi=ON -Denable_python=OFF -Denable_java=OFF -Denable_model-checking=OFF -Denable_fortran=OFF
             -Denable_lto=OFF -Denable_sthread=OFF -Denable_documentation=OFF -DEIGEN3_HINT=OFF
             -Dnlohmann_json_HINT=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
# shellcheck disable=SC2016  # ${BOOST_HEADERS_INCLUDE} is for CMake
boost_config='# Boost headers only (the boost-headers wheel from PyPI has no CMake package of its own)
set(Boost_VERSION 1.85.0)
set(Boost_INCLUDE_DIRS "${BOOST_HEADERS_INCLUDE}")
set(Boost_INCLUDE_DIR "${BOOST_HEADERS_INCLUDE}")
if(NOT TARGET Boost::headers)
  add_library(Boost::headers INTERFACE IMPORTED)
  set_target_properties(Boost::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${BOOST_HEADERS_INCLUDE}")
  add_library(Boost::boost ALIAS Boost::headers)
endif()
set(Boost_FOUND TRUE)'
boost_config_version='set(PACKAGE_VERSION 1.85.0)
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()'
# The precompiled header: the standard library's and Boost's headers that SimGrid's sources include most.
pch_headers='algorithm array atomic climits cmath cstdio cstdlib cstring functional limits map memory mutex optional
set sstream string string_view tuple unordered_map unordered_set utility vector boost/intrusive/list.hpp
boost/intrusive_ptr.hpp boost/optional.hpp boost/algorithm/string.hpp boost/core/demangle.hpp
boost/heap/fibonacci_heap.hpp boost/heap/pairing_heap.hpp boost/tokenizer.hpp'
# shellcheck disable=SC2016  # ${...} are for CMake
pch_cmake='# after SimGrid CMakeLists has defined its library (CMAKE_PROJECT_INCLUDE runs at its project() call)
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL
  target_precompile_headers simgrid PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${COURSE_PCH_HEADERS}>")'
recipe="r$(printf '%s\n' "${cmake_flags[@]}" "$boost_version" "$boost_config" "$boost_config_version" \
  "$pch_headers" "$pch_cmake" | sha256_hex | cut -c1-8)"
compiler="$({ c++ --version 2>/dev/null || true; } | head -1 | sha256_hex | cut -c1-6)"
platform="$(uname -s | tr '[:upper:]' '[:lower:]')_$(uname -m)"
cache_root="${COURSE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/distributed-training-course}"
key="simgrid-$version-$platform-cxx$compiler-$recipe"
prefix="$cache_root/simgrid/$key"
tools=(smpicc smpicxx smpirun)

prove() {
  say "checking the build: smpicc compiles an MPI_Allreduce, smpirun runs it on 4 simulated hosts"
  local work out
  work="$(mktemp -d)"
  cat >"$work/check.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, sum = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = rank + 1;
  MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("smpi-check ranks %d sum %d simulated seconds %.6f\n", size, sum, MPI_Wtime());
  MPI_Finalize();
  return 0;
}
C
  cat >"$work/platform.xml" <<'XML'
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <cluster id="c" prefix="h" suffix="" radical="0-3" speed="1Gf" bw="1GBps" lat="10us"/>
</platform>
XML
  printf 'h%s\n' 0 1 2 3 >"$work/hosts"
  out="$(cd "$work" && "$prefix/bin/smpicc" -O2 check.c -o check 2>&1 \
    && with_timeout 120 "$prefix/bin/smpirun" -np 4 -platform platform.xml -hostfile hosts \
         --log=root.thres:warning ./check 2>&1)" \
    || { rm -rf "$work"; printf '%s\n' "$out" | tail -20 >&2; die "the SMPI check failed (output above)."; }
  rm -rf "$work"
  printf '%s\n' "$out" | grep 'smpi-check' | sed 's/^/[simgrid]   /'
  printf '%s\n' "$out" | grep -q 'smpi-check ranks 4 sum 10 ' \
    || { printf '%s\n' "$out" | tail -20 >&2; die "the SMPI check printed a wrong sum (expected 10 on 4 ranks)."; }
}

link_tools() {
  local tool
  for tool in "${tools[@]}"; do
    ln -sfn "$prefix/bin/$tool" "$bin/$tool"
  done
  say "linked ${tools[*]} into $bin (from $prefix)"
}

# One build at a time per cache (two set-ups started together: the second waits, then uses the first's build).
mkdir -p "$cache_root/simgrid"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache_root/simgrid/$key.lock"
  flock -n 9 || { say "another set-up is building SimGrid into $prefix: waiting for it"; flock 9; }
fi
# SimGrid's smpicc and smpicxx name the C and C++ compilers by the paths they were found at when it was built: a
# cached build whose compiler is gone from there (found in a folder since removed) is built again, as if there were
# none. A cached build that fails its check with its compilers in place is left as it is, and the check's failure
# stops the set-up here (a check stopped by a busy machine does not throw a good build away).
gone_compiler() {
  local tool compiler
  for tool in smpicc smpicxx; do
    compiler="$(sed -nE 's/^(CC|CXX)=//p' "$prefix/bin/$tool" 2>/dev/null | head -1)"
    if [ -n "$compiler" ] && [ ! -x "$compiler" ]; then echo "$compiler"; return 0; fi
  done
  return 1
}
broken=""
if [ -x "$prefix/bin/smpirun" ] && [ -f "$prefix/.complete" ]; then
  if gone="$(gone_compiler)"; then
    broken=1
    rm -f "$prefix/.complete"
    say "the cached build names a compiler that is gone ($gone): it is built again"
  else
    say "using the cached build: $prefix"
    link_tools
    prove
    exit 0
  fi
fi
if [ "${COURSE_CACHED_ONLY:-}" = 1 ]; then
  if [ -n "$broken" ]; then
    say "not compiled: the cached build of SimGrid $version names a compiler that is gone ($prefix) and COURSE_CACHED_ONLY=1"
  else
    say "not compiled: no build of SimGrid $version is cached ($prefix) and COURSE_CACHED_ONLY=1"
  fi
  exit 75
fi

for tool in cc c++ make; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing. Install a C and C++ compiler and make:
    Amazon Linux 2023 / RHEL: sudo dnf install -y gcc gcc-c++ make
    Debian/Ubuntu: sudo apt-get install -y gcc g++ make
  then run this again. Lesson 03 skips its simulated cluster without SimGrid; the rest of the course works."
done
jobs="$(cpu_count)"
say "compiling SimGrid $version's SMPI from its source release on PyPI, with Boost's headers from PyPI (boost-headers
          $boost_version), into $prefix: once per machine; about 300 C++ files, 900 CPU-seconds on the course's
          2-core test machine, so about 8 minutes on 2 idle cores (the time is printed at the end)"
start=$(date +%s)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# --no-binary simgrid, not :all: (which pip applies to the build requirements too): pip reads a source release's
# metadata in a build environment of its own, with CMake and pybind11 in it, and :all: had it compile CMake from its
# source there, one job at a time, for 15 minutes and more on a 2-core machine, before SimGrid's own compile began.
"$PY" -m pip download --quiet --no-deps --no-binary simgrid "simgrid==$version" -d "$work" 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; }
[ -f "$work/simgrid-$version.tar.gz" ] \
  || die "could not download the simgrid==$version source release from the package index (no network?)."
[ "$(sha256_hex <"$work/simgrid-$version.tar.gz")" = "$sdist_sha256" ] \
  || die "the downloaded simgrid-$version.tar.gz does not have the expected sha256."
"$PY" -m pip download --quiet --no-deps "boost-headers==$boost_version" -d "$work" 2>&1 \
  | { grep -v "^WARNING: Location 'file:" || true; }
boost_wheel="$work/boost_headers-$boost_version-py3-none-any.whl"
[ -f "$boost_wheel" ] || die "could not download boost-headers==$boost_version from the package index (no network?)."
[ "$(sha256_hex <"$boost_wheel")" = "$boost_sha256" ] \
  || die "the downloaded $(basename "$boost_wheel") does not have the expected sha256."
tar -xzf "$work/simgrid-$version.tar.gz" -C "$work"
"$PY" -c 'import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("boost_headers/include/")])' \
  "$boost_wheel" "$work/boost"
mkdir -p "$work/boost-cmake"
printf '%s\n' "$boost_config" >"$work/boost-cmake/BoostConfig.cmake"
printf '%s\n' "$boost_config_version" >"$work/boost-cmake/BoostConfigVersion.cmake"
printf '%s\n' "$pch_cmake" >"$work/boost-cmake/pch.cmake"
# CMake's list, each header as <name$<ANGLE-R> (a bare > would end the generator expression)
# shellcheck disable=SC2016,SC2086  # $<ANGLE-R> is for CMake; one header per word, on purpose
pch_list="$(printf '<%s$<ANGLE-R>;' $pch_headers)"

mkdir -p "$cache_root" "$work/build"
log="$cache_root/simgrid-build.log"
rm -rf "$prefix"
if ! (cd "$work/build" \
      && "$cmake" "$work/simgrid-$version" "${cmake_flags[@]}" -DCMAKE_INSTALL_PREFIX="$prefix" \
           -DBoost_DIR="$work/boost-cmake" -DBOOST_HEADERS_INCLUDE="$work/boost/boost_headers/include" \
           -DCMAKE_PROJECT_INCLUDE="$work/boost-cmake/pch.cmake" "-DCOURSE_PCH_HEADERS=${pch_list%;}" \
      && make -j"$jobs" && make install) >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  rm -rf "$prefix"
  die "the SimGrid build failed; the last lines of $log are above. Lesson 03 skips its simulated cluster without it;
  the rest of the course works."
fi
touch "$prefix/.complete"
say "built and cached in $(( $(date +%s) - start )) s: $prefix"
link_tools
prove
