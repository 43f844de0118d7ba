# shellcheck shell=bash
# A temporary folder of the run's own, sourced by tools/run_tests.sh and .ci/run: every process of a test run
# (its lessons' kernels, their workers, pytest's folders, Chromium) makes its temporary files in it, and it is
# removed at the end. Processes ended by a signal leave files behind (TensorFlow's `__autograph_generated_file*.py`
# are removed at a clean exit only, MLflow never removes its `db_init_lock-*`): they go with the folder. What the
# system's temporary folder holds is compared before and after, and a run that left anything there fails.

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
  RUN_TMP_BEFORE="$(tmp_entries "$RUN_TMP_PARENT")"
  # a short name: Unix sockets made inside it (Chromium's, Open MPI's, sshd's) take at most 108 characters
  COURSE_RUN_TMPDIR="$(mktemp -d "$RUN_TMP_PARENT/course-run.XXXXXX")" || return 1
  TMPDIR="$COURSE_RUN_TMPDIR"
  export COURSE_RUN_TMPDIR TMPDIR
  RUN_TMP_OWNER=1
}

# run_tmpdir_close: say what the run's processes left in its folder, remove the folder, and return 1 when the
# system's temporary folder holds an entry it did not hold at run_tmpdir_open (something written outside TMPDIR).
run_tmpdir_close() {
  [ "${RUN_TMP_OWNER:-0}" = 1 ] || return 0
  RUN_TMP_OWNER=0
  local autograph locks all new entry
  autograph=$(find "$COURSE_RUN_TMPDIR" -maxdepth 1 -name '__autograph_generated_file*' 2>/dev/null | wc -l)
  locks=$(find "$COURSE_RUN_TMPDIR" -maxdepth 1 -name 'db_init_lock-*' 2>/dev/null | wc -l)
  all=$(find "$COURSE_RUN_TMPDIR" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  echo "[tmp] the run's temporary folder held $all entries at its end ($autograph TensorFlow autograph files of" \
    "processes ended by a signal, $locks MLflow lock files): removed with it"
  rm -rf "$COURSE_RUN_TMPDIR"
  new="$(LC_ALL=C comm -13 <(printf '%s\n' "$RUN_TMP_BEFORE") <(tmp_entries "$RUN_TMP_PARENT"))"
  if [ -n "$new" ]; then
    echo "[tmp] ERROR: the run left these in $RUN_TMP_PARENT, outside its own temporary folder (made by a program" \
      "that does not follow TMPDIR, or by another program running at the same time):" >&2
    while IFS= read -r entry; do echo "  $entry"; done <<<"$new" >&2
    return 1
  fi
  echo "[tmp] nothing left in $RUN_TMP_PARENT"
}
