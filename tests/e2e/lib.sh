# Shared helpers for end-to-end test scripts (sourced). CTest provides HPCTRAIN_BIN,
# HPCTRAIN_MPIEXEC (mpirun with its flags), HPCTRAIN_SOURCE_DIR, HPCTRAIN_BUILD_DIR and
# HPCTRAIN_TEST_TMP (a private scratch directory, emptied at the start).
set -uo pipefail

: "${HPCTRAIN_BIN:?run through ctest}"
: "${HPCTRAIN_TEST_TMP:?run through ctest}"
rm -rf "$HPCTRAIN_TEST_TMP" && mkdir -p "$HPCTRAIN_TEST_TMP"
TMP=$HPCTRAIN_TEST_TMP
PY=/usr/bin/python3
FAILURES=0

# python_server_socket: the socket of the suite's Python fork server (the `python` fixture,
# tests/e2e/runtime/fixture_python.sh; tests/support/python_fork_server.py says why). While it
# serves, $PY runs the tests' Python in its forks (tests/support/forked_python), without importing
# numpy, h5py and torch each time; HPCTRAIN_TEST_NO_FORK=1 runs the interpreter itself.
python_server_socket() {
  local sock=${HPCTRAIN_BUILD_DIR:?run through ctest}/test-tmp/python-fork.sock
  # A Unix socket's path holds at most 107 bytes.
  ((${#sock} < 100)) || sock=/tmp/hpctrain-python-fork-$(cksum <<<"$HPCTRAIN_BUILD_DIR" | cut -d' ' -f1).sock
  echo "$sock"
}
# python_server_start SOCKET LOG [MODULE...]: a Python fork server of its own session on SOCKET
# (its output in LOG); sets PYTHON_SERVER_PID; fails unless the socket opens within 60 s.
python_server_start() {
  local sock=$1 log=$2
  shift 2
  setsid /usr/bin/python3 "$HPCTRAIN_SOURCE_DIR/tests/support/python_fork_server.py" "$sock" "$@" \
    </dev/null >"$log" 2>&1 &
  PYTHON_SERVER_PID=$!
  local i
  for ((i = 0; i < 600; i++)); do
    [[ -S $sock ]] && return 0
    kill -0 "$PYTHON_SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  fail "the Python fork server did not open $sock: $(cat "$log")"
  return 1
}
if [[ ${HPCTRAIN_TEST_NO_FORK:-0} != 1 && -n ${HPCTRAIN_BUILD_DIR:-} && -n ${HPCTRAIN_SOURCE_DIR:-} ]]; then
  HPCTRAIN_TEST_PYTHON_SERVER=$(python_server_socket)
  if [[ -S $HPCTRAIN_TEST_PYTHON_SERVER ]]; then
    export HPCTRAIN_TEST_PYTHON_SERVER
    PY=$HPCTRAIN_SOURCE_DIR/tests/support/forked_python
  fi
fi

# HPCTRAIN_HEAP_CHECK=PRELOAD (scripts/sanitize.sh): every hpctrain process of the test runs
# under glibc's heap checking (PRELOAD = libc_malloc_debug.so.0, MALLOC_CHECK_=3, freed and new
# memory perturbed), through a wrapper, so the launcher (mpirun) is not checked with it.
if [[ -n ${HPCTRAIN_HEAP_CHECK:-} ]]; then
  printf '#!/bin/sh\nLD_PRELOAD=%s MALLOC_CHECK_=3 MALLOC_PERTURB_=165 exec %s "$@"\n' \
    "$HPCTRAIN_HEAP_CHECK" "$HPCTRAIN_BIN" >"$TMP/hpctrain-heap-checked"
  chmod +x "$TMP/hpctrain-heap-checked"
  HPCTRAIN_BIN=$TMP/hpctrain-heap-checked
fi

fail() {
  echo "FAIL: $*" >&2
  FAILURES=$((FAILURES + 1))
}

# skip_test REASON: reports the test skipped (exit 77, every caller's SKIP_RETURN_CODE) with its
# reason, unless a check already failed: then it fails, so a skip never hides a failure.
skip_test() {
  if ((FAILURES > 0)); then
    echo "FAIL: $FAILURES check(s) failed before the test had to stop: $*" >&2
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}

# mpirun_np N CMD...: runs CMD on N ranks (each rank a fork of the fork server where the test
# started it with `fork_server_start mpi` and CMD is "$HPCTRAIN_BIN" ...).
mpirun_np() {
  mpi_argv "$@"
  "${MPI_ARGV[@]}"
}
# mpi_argv N CMD...: sets MPI_ARGV to the launcher's command line for CMD on N ranks.
mpi_argv() {
  local n=$1
  shift
  if [[ -n ${FORK_SOCKET:-} && ${FORK_MPI:-0} == 1 && $1 == "$HPCTRAIN_BIN" ]]; then
    set -- "${FORKED_HPCTRAIN[@]}" "$@"
    # shellcheck disable=SC2206  # HPCTRAIN_MPIEXEC holds the launcher and its flags
    MPI_ARGV=(env HPCTRAIN_TEST_FORK_SERVER="$FORK_SOCKET" $HPCTRAIN_MPIEXEC -np "$n" "$@")
    return
  fi
  # shellcheck disable=SC2206
  MPI_ARGV=($HPCTRAIN_MPIEXEC -np "$n" "$@")
}

# expect_exit CODE LOGFILE CMD...: runs CMD (which may start with "mpirun_np N") with a 120 s
# guard, stdout+stderr to LOGFILE, and checks its exit status.
expect_exit() {
  local want=$1 log=$2
  shift 2
  if [[ $1 == mpirun_np ]]; then
    shift
    mpi_argv "$@"
    set -- "${MPI_ARGV[@]}"
  else
    forked_argv "$@"
    set -- "${FORKED_ARGV[@]}"
  fi
  timeout 120 "$@" >"$log" 2>&1
  local got=$?
  if [[ $got -ne $want ]]; then
    fail "expected exit $want, got $got from: $*"
    sed 's/^/    | /' "$log" | tail -30 >&2
    return 1
  fi
  return 0
}

# fork_server_start [mpi]: from here on, expect_exit runs one-process commands ("$HPCTRAIN_BIN"
# ..., not mpirun_np) as forks of one loaded hpctrain (src/cli/fork_server.hpp): the same process
# for the command, without the second of loading LibTorch each time. With `mpi`, the ranks of
# `mpirun_np N "$HPCTRAIN_BIN" ...` (in expect_exit or not) are forks too: mpirun starts the
# client (tests/support/fork_client.cpp) on each rank, and each rank's fork gets the client's
# environment (the launcher's variables), directory and streams, so MPI_Init in it joins the job
# as the binary's own process would. Tests that signal, look for hpctrain's processes by name or
# measure their memory must not use it. Call it from the script itself, not a subshell: the
# server ends with the shell that started it. finish stops it.
# HPCTRAIN_TEST_NO_FORK=1: every command a process of its own (to compare, or to rule it out).
fork_server_start() {
  [[ ${HPCTRAIN_TEST_NO_FORK:-0} == 1 ]] && return 0
  FORK_MPI=0
  [[ ${1:-} == mpi ]] && FORK_MPI=1
  FORK_SOCKET=$TMP/fork.sock
  # A Unix socket's path holds at most 107 bytes.
  ((${#FORK_SOCKET} < 100)) || FORK_SOCKET=$(mktemp -u /tmp/hpctrain-fork.XXXXXX)
  FORKED_HPCTRAIN=("$HPCTRAIN_FORK_CLIENT")
  rm -f "$FORK_SOCKET"
  HPCTRAIN_TEST_FORK_SERVER=$FORK_SOCKET "$HPCTRAIN_BIN" >"$TMP/fork-server.txt" 2>&1 &
  FORK_SERVER_PID=$!
  local i
  for ((i = 0; i < 600; i++)); do
    [[ -S $FORK_SOCKET ]] && return 0
    kill -0 "$FORK_SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  fail "the fork server did not open $FORK_SOCKET: $(cat "$TMP/fork-server.txt")"
  FORK_SOCKET=''
}
# forked_argv CMD...: sets FORKED_ARGV to CMD, or, where CMD is "$HPCTRAIN_BIN" ... and a fork
# server runs, to the client that runs it in a fork of the server.
forked_argv() {
  FORKED_ARGV=("$@")
  if [[ -n ${FORK_SOCKET:-} && $1 == "$HPCTRAIN_BIN" ]]; then
    FORKED_ARGV=(env HPCTRAIN_TEST_FORK_SERVER="$FORK_SOCKET" "${FORKED_HPCTRAIN[@]}" "$@")
  fi
}
fork_server_stop() {
  [[ -n ${FORK_SERVER_PID:-} ]] || return 0
  kill "$FORK_SERVER_PID" 2>/dev/null
  wait "$FORK_SERVER_PID" 2>/dev/null
  FORK_SERVER_PID=''
  FORK_SOCKET=''
}
# Independent cases run side by side (single-process commands leave the second core idle):
#   cases_start JOBS; case_run FUNC ARGS...; ...; cases_end
# case_run runs FUNC ARGS in the background, at most JOBS at once; cases_end waits for all, prints
# each case's output in the order the cases were given, and adds their failures to this script's.
# A case must not depend on another's files.
cases_start() {
  CASES_JOBS=$1
  CASES_N=0
  CASES_PIDS=()
  rm -rf "$TMP/.cases" && mkdir -p "$TMP/.cases"
}
case_run() {
  local i=$CASES_N
  CASES_N=$((CASES_N + 1))
  # The cases running: the script's background jobs but the fork server.
  while (($(jobs -pr | grep -cvxF "${FORK_SERVER_PID:-none}") >= CASES_JOBS)); do wait -n; done
  (
    FAILURES=0
    "$@"
    echo "$FAILURES" >"$TMP/.cases/$i.failures"
  ) >"$TMP/.cases/$i.out" 2>&1 &
  CASES_PIDS+=("$!")
}
cases_end() {
  local pid
  for pid in "${CASES_PIDS[@]}"; do wait "$pid"; done
  local i
  for ((i = 0; i < CASES_N; i++)); do
    cat "$TMP/.cases/$i.out"
    # A case that left no count ended early (a signal): it counts as a failure.
    FAILURES=$((FAILURES + $(cat "$TMP/.cases/$i.failures" 2>/dev/null || echo 1)))
  done
}

# expect_grep PATTERN FILE: the file contains the (extended regex) pattern.
expect_grep() {
  if ! grep -Eq -- "$1" "$2"; then
    fail "'$1' not found in $2"
    sed 's/^/    | /' "$2" | tail -30 >&2
  fi
}

finish() {
  fork_server_stop  # its commands' CPU time counts below once it is waited for
  # The CPU time of the script and every process it waited for (user and system, children last):
  # ctest's log then says which tests leave a core idle (scripts/test_times.py reads it).
  # (times runs in this shell: in a pipeline or $(...) it would count a fresh subshell's.)
  times >"$TMP/.cpu-times"
  echo "cpu times: $(tr '\n' ' ' <"$TMP/.cpu-times")"
  if ((FAILURES > 0)); then
    echo "$FAILURES check(s) failed" >&2
    exit 1
  fi
  echo "all checks passed"
}
