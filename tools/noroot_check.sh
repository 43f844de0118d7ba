#!/usr/bin/env bash
# make noroot-check: the course set up and run as a learner with no root and no apt-get sets it up (a SageMaker
# notebook instance: Amazon Linux 2023, user ec2-user), on this machine. Run as root (it makes the user):
#   1. the user course-learner, made once (it stays: its home keeps pip's cache and the course's build cache,
#      ~/.cache/distributed-training-course, where Horovod's wheel and SimGrid's build are keyed as
#      tools/build_horovod.sh and tools/build_simgrid.sh say);
#   2. a PATH without apt-get, dpkg and the system's Open MPI and SimGrid (a folder of links to every other program
#      of the system's bin folders, /var/lib/course-noroot/path, root's, kept for the next check as the caches are), so
#      that the set-up takes the route it takes where they do not exist;
#   3. a fresh clone of this checkout's commit (HEAD: what is committed) in the user's home, owned by the user;
#   4. as that user: tools/setup_env.sh twice, each run timed (wall and CPU seconds); then mpirun, smpirun and
#      Horovod with MPI must come from the environment, and Horovod's MPI library must load its libmpi;
#   5. lessons 03, 04 and 07 in smoke mode (as tools/run_tests.sh runs them, in the other order: two at a time,
#      then the one that measures alone), failing on any line of theirs that says a section was skipped, unless the
#      root path's executed copy of the lesson (build/executed/smoke, left by `make test`) says the same;
#   6. the clone removed, and every process the check started as the user stopped.
# NOROOT_LESSONS (default "03 04 07") names the lessons; NOROOT_KEEP=1 keeps the clone (to read the executed copies).
# NOROOT_LESSONS_AFTER=FILE (with NOROOT_WAIT_PID, CI's process) holds the lessons until FILE has make test's exit
# status, and stops the check at once if that is not 0 or CI's process has ended: CI sets the user up while make
# test runs.
# NOROOT_SETUP_NICE=N (CI sets 19) runs the set-up at that niceness: on a new machine its two compiles (Horovod against
# PyPI's Open MPI, SimGrid's SMPI) then take only the CPU that make test, started beside it, leaves idle.
# NOROOT_CACHED_ONLY=1 compiles neither Horovod nor SimGrid: where the user's caches lack either build (a new
# machine, or a changed build recipe), the check says so in one line and stops with status 0.
# Uncached (a new machine: every package downloaded, Horovod and SimGrid compiled) it takes far longer than a
# cached run: docs/notebook_instance.md gives both, measured here.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
user="${NOROOT_USER:-course-learner}"
lessons="${NOROOT_LESSONS:-03 04 07}"
say() { printf '[noroot] %s\n' "$*"; }
die() { printf '[noroot] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run it as root: it makes an unprivileged user and runs the set-up as that user."
command -v runuser >/dev/null 2>&1 || die "runuser (util-linux) is missing."
py="$repo/.venv/bin/python"
[ -x "$py" ] || py="$(command -v python3)"

if ! id "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$user" || die "could not create the user $user"
  say "made the user $user (it stays: its caches make the next check faster)"
fi
home="$(getent passwd "$user" | cut -d: -f6)"
mark="noroot-$$-$(date +%s)"
# Every process the check starts carries the mark (its user's, and its own: the watcher below, git, runuser), so that
# its clean-up stops all of them, and nothing that is not the check's
export COURSE_TEST_SESSION="$mark"
work="$home/$mark"
# shellcheck disable=SC2317,SC2329  # called by the trap
cleanup() {
  # every process of the check carries its mark (COURSE_TEST_SESSION, as tools/run_tests.sh marks its own)
  "$py" -m utils.processes stop COURSE_TEST_SESSION "$mark" >/dev/null 2>&1 || true
  if [ -n "${NOROOT_KEEP:-}" ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
# Where CI started this check beside make test (NOROOT_LESSONS_AFTER=FILE, which CI writes make test's exit status
# into when it ends; NOROOT_WAIT_PID, CI's own process), a watcher stops it as soon as make test has failed or CI
# has ended, whatever step it is at: nothing it started outlives the run.
if [ -n "${NOROOT_LESSONS_AFTER:-}" ]; then
  [ -n "${NOROOT_WAIT_PID:-}" ] || die "NOROOT_LESSONS_AFTER needs NOROOT_WAIT_PID, the process that writes it"
  check_pid=$$
  (
    while kill -0 "$check_pid" 2>/dev/null; do
      if ! kill -0 "$NOROOT_WAIT_PID" 2>/dev/null; then
        say "the run that started this check (process $NOROOT_WAIT_PID) has ended: stopping" >&2
        kill -TERM "$check_pid"
        exit 0
      fi
      if [ -s "$NOROOT_LESSONS_AFTER" ] && [ "$(cat "$NOROOT_LESSONS_AFTER")" != 0 ]; then
        say "make test failed (exit status $(cat "$NOROOT_LESSONS_AFTER")): stopping; no lesson is run as $user" >&2
        kill -TERM "$check_pid"
        exit 0
      fi
      # the clean-up stops this watcher and its sleep: the braces keep bash's note of a killed sleep ("Terminated")
      # out of the check's output
      { sleep 2; } 2>/dev/null
    done
  ) &
fi
runuser -u "$user" -- mkdir -m 700 "$work" "$work/tmp"

# 2. a PATH without apt-get and the system's MPI and SimGrid
hide=" apt apt-get apt-cache dpkg sudo mpirun mpiexec mpicc mpicxx mpic++ mpiCC mpif77 mpif90 mpifort orterun oshrun
  ompi_info ompi-server opal_wrapper prterun prted smpicc smpicxx smpirun smpiff smpif90 smpimain "
hide="$(printf '%s' "$hide" | tr '\n' ' ')"  # one space-separated list: `case` below matches " name "
# The folder stays from one check to the next, root's in a folder of root's alone (not in the user's home, where the
# user could swap it for a link to a folder of root's between root's look and root's writes): a build cached as the
# user records the compilers by the paths it found them at (SimGrid's smpicc names `cc` as found on PATH), so a
# folder of one check's own would leave the cache naming a compiler that is gone once that check has ended. Its links
# are made anew at each check, the first of the system's folders that has a tool giving its link.
bin=/var/lib/course-noroot/path
mkdir -p "$bin"
chmod 755 "$(dirname "$bin")" "$bin"
find "$bin" -mindepth 1 -maxdepth 1 -type l -delete
for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  [ -d "$dir" ] || continue
  for tool in "$dir"/*; do
    [ -e "$tool" ] || [ -L "$tool" ] || continue  # an empty folder's * stays as it is
    name="${tool##*/}"
    case "$hide" in *" $name "*) continue ;; esac
    [ -e "$bin/$name" ] || [ -L "$bin/$name" ] || ln -s "$tool" "$bin/$name"
  done
done

# 3. a fresh clone of this commit, owned by the user (no hard links: the user's files are its own)
commit="$(git -C "$repo" rev-parse HEAD)"
git clone --quiet --no-hardlinks "$repo" "$work/course"
git -C "$work/course" checkout --quiet "$commit"
chown -R "$user:" "$work/course"
say "a fresh clone of $commit in $work/course, as $user, with a PATH that has no $(echo "$hide" | wc -w) tools (apt-get, the system's Open MPI and SimGrid)"

# as_user COMMAND...: run COMMAND as the user, in the clone, with a learner's environment (the machine's
# package-index settings, PIP_*, UV_* and certificates, are kept: they say how this machine reaches PyPI). The command line
# that does it is also left in the array AS, for `timed`.
keep=()
for var in $(compgen -e); do
  case "$var" in PIP_*|UV_*|WHEELHOUSE|SSL_CERT_*|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY)
    keep+=("$var=${!var}") ;;
  esac
done
# shellcheck disable=SC2016  # expanded by the user's shell
AS=(runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user" SHELL=/bin/bash LANG=C.UTF-8
    PATH="$bin" TMPDIR="$work/tmp" COURSE_TEST_SESSION="$mark" ${keep[@]+"${keep[@]}"}
    bash -c 'cd "$0" && exec "$@"' "$work/course")
as_user() { "${AS[@]}" "$@"; }
# timed NAME COMMAND...: run COMMAND, then print its wall and CPU seconds (its processes' user + system time)
timed() {
  local name=$1
  shift
  "$py" - "$name" "$@" <<'PY'
import resource, subprocess, sys, time
name, cmd = sys.argv[1], sys.argv[2:]
t0 = time.monotonic()
rc = subprocess.call(cmd)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"[noroot] {name}: {time.monotonic() - t0:.0f} s, {ru.ru_utime + ru.ru_stime:.0f} CPU-seconds, exit status {rc}",
      flush=True)
sys.exit(rc)
PY
}

# 4. the set-up, twice
status=0
cached_only=""
[ -z "${NOROOT_CACHED_ONLY:-}" ] || [ "$NOROOT_CACHED_ONLY" = 0 ] || cached_only=1  # 1, true, yes: all mean it
# The set-up at a lower priority, where asked (NOROOT_SETUP_NICE): runuser and all it starts inherit it. Where the
# kernel groups processes by session (kernel.sched_autogroup_enabled=1, Debian's default), a niceness ranks processes
# only within their session's group, and the groups share the CPU equally: a Jupyter kernel starts a session of its
# own, so make test's lessons would share the CPU half and half with the whole set-up, however nice (measured here:
# make test's lessons took 663 s beside the compiles, 441 s alone). So the set-up gets a session of its own, and that
# session's group the niceness too (/proc/self/autogroup).
niced=()
if [ -n "${NOROOT_SETUP_NICE:-}" ]; then
  # shellcheck disable=SC2016  # expanded by the new session's shell
  niced=(setsid --wait bash -c '[ ! -w /proc/self/autogroup ] || echo "$0" > /proc/self/autogroup; exec nice -n "$0" "$@"'
         "$NOROOT_SETUP_NICE")
fi
timed "set-up, first run" ${niced[@]+"${niced[@]}"} "${AS[@]}" env COURSE_REQUIRE_HOROVOD=1 COURSE_CACHED_ONLY="$cached_only" \
  bash tools/setup_env.sh || status=$?
if [ "$status" = 75 ]; then
  say "NOT CHECKED: Horovod's or SimGrid's build is not cached for $user on this machine (above), and" \
    "NOROOT_CACHED_ONLY=1 compiles neither; run make noroot-check once here (docs/notebook_instance.md gives its time)"
  exit 0
fi
[ "$status" = 0 ] || die "the set-up failed as $user (above)"
timed "set-up, second run" "${AS[@]}" env COURSE_REQUIRE_HOROVOD=1 bash tools/setup_env.sh \
  || die "the set-up's second run failed as $user (above)"
# shellcheck disable=SC2016  # expanded by the user's shell
as_user bash -c '
  fail() { echo "[noroot] ERROR: $*" >&2; exit 1; }
  for tool in mpirun mpicc smpicc smpirun horovodrun; do
    [ -x ".venv/bin/$tool" ] || fail "$tool is not in the environment (.venv/bin)"
  done
  PATH="$PWD/.venv/bin:$PATH"
  echo "[noroot] $(mpirun --version | head -1); smpirun: $(.venv/bin/python -c "import os; print(os.path.realpath(\".venv/bin/smpirun\"))"); $(.venv/bin/python -c "import horovod, horovod.tensorflow as h; print(\"Horovod\", horovod.__version__, \"MPI built:\", h.mpi_built(), \"Gloo built:\", h.gloo_built())")"
  .venv/bin/python -c "import horovod.tensorflow as h, sys; sys.exit(not h.mpi_built())" || fail "Horovod was built without MPI"
  # SimGrid'"'"'s own check again (smpicc compiles, smpirun runs 4 ranks): links in place are not a working SMPI
  COURSE_CACHED_ONLY=1 bash tools/build_simgrid.sh .venv/bin/python >/dev/null || fail "SimGrid'"'"'s SMPI fails its check"
' || die "the environment lacks what the root path has (above)"

# 5. the lessons, in smoke mode, as run_tests.sh runs them
paths=()
for n in $lessons; do
  found=("$work/course/notebooks/${n}_"*.ipynb)
  [ -f "${found[0]}" ] || die "no lesson $n in notebooks/"
  paths+=("notebooks/$(basename "${found[0]}")")
done
# Started beside make test (NOROOT_LESSONS_AFTER), the lessons wait for it to pass: they run as its lessons do, and
# their skipped sections are compared with its executed copies (the watcher above stops the check if it fails).
if [ -n "${NOROOT_LESSONS_AFTER:-}" ]; then
  say "set up; the lessons wait for make test to end"
  waited=$(date +%s)
  until [ -s "$NOROOT_LESSONS_AFTER" ]; do
    kill -0 "$NOROOT_WAIT_PID" 2>/dev/null || die "the run that started this check (process $NOROOT_WAIT_PID) has ended"
    sleep 2
  done
  read -r test_status < "$NOROOT_LESSONS_AFTER"
  [ "$test_status" = 0 ] || die "make test failed (exit status $test_status): no lesson is run as $user"
  say "make test passed $(( $(date +%s) - waited )) s later; the lessons start"
fi
# As make test runs them, in the other order: the lessons that do not measure, two at a time, first; then those that
# measure in smoke mode (marked `alone`), one at a time, by when the checks CI runs beside this one have mostly
# ended (pytest exits 5 where a group is empty).
rc=0
nbmake=("${AS[@]}" env COURSE_SMOKE=1 JUPYTER_PATH="$work/course/.venv/share/jupyter" TF_CPP_MIN_LOG_LEVEL=2
  PYTHONDONTWRITEBYTECODE=1 .venv/bin/python -m pytest --nbmake "${paths[@]}" -p utils.nbmake_plugin
  -p no:cacheprovider --nbmake-timeout 600 --nbmake-kernel python3 --executed-copies "$work/course/build/executed"
  -v --no-header)
for group in "not alone" alone; do
  parallel=()
  [ "$group" = alone ] || parallel=(-n 2 --dist worksteal)
  group_rc=0
  timed "lessons ${lessons// /, } (smoke mode), those marked $group" "${nbmake[@]}" -m "$group" \
    ${parallel[@]+"${parallel[@]}"} || group_rc=$?
  case $group_rc in 0 | 5) ;; *) rc=1 ;; esac
done

# every line that says a section was skipped, in the user's executed copies and in the root path's
"$py" - "$work/course/build/executed" "$repo/build/executed" "${paths[@]}" <<'PY' || rc=1
import json, re, sys
from pathlib import Path

mine, roots, names = Path(sys.argv[1]), Path(sys.argv[2]), [Path(p).name for p in sys.argv[3:]]
SKIP = re.compile(
    r"^skipped\b|\bskip(ped|s)\b.*\b(needs?|missing|not installed|without)\b|no real mpirun here|no network lab here"
    r"|\bno lab here\b|^network lab: none|SimGrid is not installed|not on PATH|Horovod is not installed|cannot build",
    re.I,
)

def skips(path: Path) -> list[str]:
    lines = []
    for cell in json.loads(path.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or "".join(out.get("data", {}).get("text/plain", ""))
            text = "".join(text) if isinstance(text, list) else text
            lines += [line.strip() for line in text.splitlines() if SKIP.search(line.strip())]
    return lines

bad = 0
for name in names:
    found = sorted(mine.rglob(name))
    if not found:
        print(f"[noroot] ERROR: no executed copy of {name}: it did not run to the end", file=sys.stderr)
        bad = 1
        continue
    root = sorted(roots.rglob(name)) if roots.exists() else []
    root_lines = set(skips(root[0])) if root else set()
    extra = [line for line in skips(found[0]) if line not in root_lines]
    basis = "the root path's copy skips none of them" if root else "no root-path copy here (make test): none allowed"
    if extra:
        bad = 1
        print(f"[noroot] ERROR: {name} skipped {len(extra)} section(s) without root ({basis}):", file=sys.stderr)
        for line in extra:
            print(f"[noroot]   {line}", file=sys.stderr)
    else:
        print(f"[noroot] {name}: nothing skipped" + (f" beyond the root path's own {len(root_lines)}" if root_lines else ""))
sys.exit(bad)
PY
[ "$rc" = 0 ] && say "OK: as $user, with no root and no apt-get, the set-up gave mpirun, smpirun and Horovod with MPI, and lessons ${lessons// /, } skipped nothing the root path runs"
exit $rc
