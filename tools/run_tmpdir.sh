# shellcheck shell=bash
# A temporary folder of the run's own, sourced by tools/run_tests.sh and .ci/run: every process of a test run
# (its lessons' kernels, their workers, pytest's folders, Chromium) makes its temporary files in it, and it is
# removed at the end. Processes ended by a signal leave files behind (TensorFlow's `__autograph_generated_file*.py`
# are removed at a clean exit only, MLflow never removes its `db_init_lock-*`): they go with the folder. What the
# system's temporary folder holds is compared before and after, and a run that left anything there fails; an entry
# another program made meanwhile (owned by another user, or held open by a process that is not part of the run) is
# named, not failed. A run killed by SIGKILL cannot remove its folder: the next run removes it (its owner is gone).

# tmp_entries FOLDER: the names of FOLDER's entries, one a line, sorted
tmp_entries() {
  (cd "$1" && find . -mindepth 1 -maxdepth 1) | sed 's|^\./||' | LC_ALL=C sort
}

# run_tmpdir_open: unless a run of the course's already made one (COURSE_RUN_TMPDIR: make test inside .ci/run),
# point TMPDIR at a new folder inside the system's temporary folder, and note what that folder holds.
run_tmpdir_open() {
  if [ -n "${COURSE_RUN_TMPDIR:-}" ] && [ -d "$COURSE_RUN_TMPDIR" ]; then
    return 0
  fi
  RUN_TMP_PARENT="${TMPDIR:-/tmp}"
  run_tmpdir_sweep "$RUN_TMP_PARENT"
  RUN_TMP_BEFORE="$(tmp_entries "$RUN_TMP_PARENT")"
  # a short name: Unix sockets made inside it (Chromium's, Open MPI's, sshd's) take at most 108 characters
  COURSE_RUN_TMPDIR="$(mktemp -d "$RUN_TMP_PARENT/course-run.XXXXXX")" || return 1
  echo "$$" >"$COURSE_RUN_TMPDIR/.owner"
  TMPDIR="$COURSE_RUN_TMPDIR"
  export COURSE_RUN_TMPDIR TMPDIR
  RUN_TMP_OWNER=1
}

# run_tmpdir_sweep PARENT: remove the folders of earlier runs that were killed (SIGKILL leaves no trap to run):
# those whose owner, the process named in their .owner file, no longer runs.
run_tmpdir_sweep() {
  local folder owner
  for folder in "$1"/course-run.*; do
    [ -f "$folder/.owner" ] || continue
    owner="$(cat "$folder/.owner" 2>/dev/null)"
    case "$owner" in ''|*[!0-9]*) continue ;; esac
    kill -0 "$owner" 2>/dev/null && continue
    rm -rf "$folder" && echo "[tmp] removed $folder, left by a run that was killed (process $owner)"
  done
}

# tmp_not_the_runs PATH: true when PATH was made by another program than the run: it belongs to another user, or a
# running process outside the run (its environment lacks this run's COURSE_RUN_TMPDIR) has it open or, for a Unix
# socket, is bound to it (read from /proc, on Linux; elsewhere only the owner is checked).
tmp_not_the_runs() {
  local path="$1" uid inode=""
  uid="$(stat -c %u "$path" 2>/dev/null || stat -f %u "$path" 2>/dev/null)"
  [ -n "$uid" ] && [ "$uid" != "$(id -u)" ] && return 0
  [ -d /proc/self/fd ] || return 1
  [ -S "$path" ] && inode="$(awk -v p="$path" '$NF == p {print $7; exit}' /proc/net/unix 2>/dev/null)"
  [ -n "${RUN_TMP_HELD+set}" ] || RUN_TMP_HELD="$(tmp_held_outside)"
  grep -qxF -e "$path" ${inode:+-e "socket:[$inode]"} <<<"$RUN_TMP_HELD"
}

# tmp_held_outside: what the running processes outside this run have open (their fds' targets), one a line.
tmp_held_outside() {
  local pid
  for pid in /proc/[0-9]*; do
    grep -qzxF "COURSE_RUN_TMPDIR=$COURSE_RUN_TMPDIR" "$pid/environ" 2>/dev/null && continue
    find "$pid/fd" -mindepth 1 -maxdepth 1 -type l -printf '%l\n' 2>/dev/null
  done
}

# run_tmpdir_close: say what the run's processes left in its folder, remove the folder, and return 1 when the
# system's temporary folder holds an entry it did not hold at run_tmpdir_open (something written outside TMPDIR)
# that is not another program's (tmp_not_the_runs).
run_tmpdir_close() {
  [ "${RUN_TMP_OWNER:-0}" = 1 ] || return 0
  RUN_TMP_OWNER=0
  local autograph locks all new entry
  autograph=$(find "$COURSE_RUN_TMPDIR" -maxdepth 1 -name '__autograph_generated_file*' 2>/dev/null | wc -l)
  locks=$(find "$COURSE_RUN_TMPDIR" -maxdepth 1 -name 'db_init_lock-*' 2>/dev/null | wc -l)
  all=$(find "$COURSE_RUN_TMPDIR" -mindepth 1 -maxdepth 1 ! -name .owner 2>/dev/null | wc -l)
  echo "[tmp] the run's temporary folder held $all entries at its end ($autograph TensorFlow autograph files of" \
    "processes ended by a signal, $locks MLflow lock files): removed with it"
  rm -rf "$COURSE_RUN_TMPDIR"
  new="$(LC_ALL=C comm -13 <(printf '%s\n' "$RUN_TMP_BEFORE") <(tmp_entries "$RUN_TMP_PARENT"))"
  local others="" ours=""
  unset RUN_TMP_HELD
  while IFS= read -r entry; do
    [ -n "$entry" ] || continue
    if tmp_not_the_runs "$RUN_TMP_PARENT/$entry"; then others+="$entry"$'\n'; else ours+="$entry"$'\n'; fi
  done <<<"$new"
  if [ -n "$others" ]; then
    echo "[tmp] another program made these in $RUN_TMP_PARENT during the run (another user's, or held by a process" \
      "outside the run): not the run's, left alone:"
    printf '%s' "$others" | while IFS= read -r entry; do echo "  $entry"; done
  fi
  new="${ours%$'\n'}"
  if [ -n "$new" ]; then
    echo "[tmp] ERROR: the run left these in $RUN_TMP_PARENT, outside its own temporary folder (made by a program" \
      "that does not follow TMPDIR, or by another program running at the same time):" >&2
    while IFS= read -r entry; do echo "  $entry"; done <<<"$new" >&2
    return 1
  fi
  echo "[tmp] nothing left in $RUN_TMP_PARENT"
}
