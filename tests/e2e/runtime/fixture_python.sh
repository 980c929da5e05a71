#!/usr/bin/env bash
# Fixture `python` (start | stop): the suite's Python fork server (tests/support/python_fork_server.py)
# for the tests that run after `start` and before `stop` (every script test requires the fixture:
# cmake/HpctrainTesting.cmake). `start` imports numpy, h5py and torch once in a server of its own
# session and checks that a Python command runs in its fork with the caller's arguments, streams,
# environment and exit code; `stop` ends it. HPCTRAIN_TEST_NO_FORK=1: no server.
source "$(dirname "$0")/../lib.sh"
sock=$(python_server_socket)
pidfile=$HPCTRAIN_BUILD_DIR/test-tmp/python-fork-server.pid
log=$HPCTRAIN_BUILD_DIR/test-tmp/python-fork-server.log

stop_server() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 0
  if grep -qF python_fork_server.py "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid"
    echo "stopped the Python fork server (pid $pid)"
  fi
  rm -f "$pidfile" "$sock"
}

case ${1:-} in
  start)
    stop_server
    if [[ ${HPCTRAIN_TEST_NO_FORK:-0} == 1 ]]; then
      echo "HPCTRAIN_TEST_NO_FORK=1: the tests run the Python interpreter itself"
      finish
      exit 0
    fi
    python_server_start "$sock" "$log"
    echo "$PYTHON_SERVER_PID" >"$pidfile"
    cat "$log"
    # One command through it: its arguments, standard input, environment and exit code, with torch
    # loaded already (by the server: the command does not import it).
    out=$(HPCTRAIN_TEST_PYTHON_SERVER=$sock PROBE=yes \
      "$HPCTRAIN_SOURCE_DIR/tests/support/forked_python" - one two <<'PY'
import os, sys
print(sys.argv, os.environ["PROBE"], "torch" in sys.modules)
sys.exit(5)
PY
    )
    rc=$?
    [[ $rc == 5 ]] || fail "a Python command through the server exited $rc, not 5: $out"
    [[ $out == "['-', 'one', 'two'] yes True" ]] || fail "a Python command through the server printed: $out"
    ;;
  stop)
    stop_server
    ;;
  *)
    fail "usage: fixture_python.sh start | stop"
    ;;
esac
finish
