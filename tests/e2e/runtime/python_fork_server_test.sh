#!/usr/bin/env bash
# The suite's Python fork server (tests/support/python_fork_server.py, run through
# tests/support/forked_python) against the interpreter itself: the same commands (a script on
# stdin, a script file, -c, -m) give the same standard output, standard error and exit code: the
# arguments, __name__, __file__, sys.path[0] and PYTHONPATH, the directory and the environment, an
# exception's traceback (the script's frames only), sys.exit with a code or a message, a file left
# open at exit (flushed), atexit functions. Beyond that: a preloaded module is there in a fork and
# not where the server must exec the interpreter (-m, OMP_NUM_THREADS changed); two forks draw
# different numpy random numbers; SIGTERM to the client ends the command with SIGTERM; a client
# killed outright takes its command with it. A server of its own, numpy preloaded.
source "$(dirname "$0")/../lib.sh"
real=/usr/bin/python3
client=$HPCTRAIN_SOURCE_DIR/tests/support/forked_python
sock=$TMP/py.sock
((${#sock} < 100)) || sock=$(mktemp -u /tmp/hpctrain-pytest.XXXXXX)
python_server_start "$sock" "$TMP/server.txt" numpy || finish
server=$PYTHON_SERVER_PID
forked() { HPCTRAIN_TEST_PYTHON_SERVER=$sock "$client" "$@"; }

mkdir -p "$TMP/dir/lib" "$TMP/cwd"
echo 'VALUE = "from PYTHONPATH"' >"$TMP/dir/lib/extra_module.py"
cat >"$TMP/dir/script.py" <<'PY'
import atexit, os, sys
print(sys.argv, __name__, __file__, sys.path[0], os.getcwd(), os.environ.get("PROBE"))
import extra_module
print(extra_module.VALUE)
kept = open(sys.argv[1], "w")
kept.write("written, never closed")
atexit.register(lambda: print("atexit ran"))
if sys.argv[2] == "raise":
    raise ValueError("on purpose")
if sys.argv[2] == "message":
    sys.exit("a message to stderr")
sys.exit(int(sys.argv[2]))
PY
# same NAME CMD...: CMD run by the interpreter and through the server: the same outputs and code.
same() {
  local name=$1
  shift
  local how
  for how in real forked; do
    if [[ $how == real ]]; then
      (cd "$TMP/cwd" && PROBE=yes PYTHONPATH=$TMP/dir/lib "$real" "$@") \
        >"$TMP/$name.$how.out" 2>"$TMP/$name.$how.err" <"$TMP/stdin.py"
    else
      (cd "$TMP/cwd" && PROBE=yes PYTHONPATH=$TMP/dir/lib forked "$@") \
        >"$TMP/$name.$how.out" 2>"$TMP/$name.$how.err" <"$TMP/stdin.py"
    fi
    echo $? >"$TMP/$name.$how.code"
    [[ ! -e $TMP/$name.kept ]] || mv "$TMP/$name.kept" "$TMP/$name.$how.kept"
  done
  local part
  for part in out err code kept; do
    [[ ! -e $TMP/$name.real.$part ]] && continue
    cmp -s "$TMP/$name.real.$part" "$TMP/$name.forked.$part" ||
      fail "$name: $part differs: interpreter: $(cat "$TMP/$name.real.$part"); server: $(cat "$TMP/$name.forked.$part")"
  done
  echo "--- $name: exit $(cat "$TMP/$name.real.code"), $(wc -l <"$TMP/$name.real.out") lines out, $(wc -l <"$TMP/$name.real.err") lines err"
}
cp "$TMP/dir/script.py" "$TMP/stdin.py"
same stdin-exit3 - "$TMP/stdin-exit3.kept" 3
same file-exit0 "$TMP/dir/script.py" "$TMP/file-exit0.kept" 0
same file-raise "$TMP/dir/script.py" "$TMP/file-raise.kept" raise
same file-message "$TMP/dir/script.py" "$TMP/file-message.kept" message
same c-code -c 'import sys; print(sys.argv, __name__, sys.path[0]); sys.exit(4)' x y
echo '{"b": [1, 2], "a": null}' >"$TMP/dir/data.json"
same m-json -m json.tool --sort-keys "$TMP/dir/data.json"
[[ $(cat "$TMP/stdin-exit3.forked.code") == 3 ]] || fail "the stdin script's exit code"
[[ $(cat "$TMP/file-exit0.forked.kept" 2>/dev/null) == "written, never closed" ]] ||
  fail "a file left open at exit was not flushed"
expect_grep 'File "[^"]*script.py", line 9' "$TMP/file-raise.forked.err"
grep -q python_fork_server.py "$TMP/file-raise.forked.err" && fail "the traceback shows the server's frames"

# Forked, or the interpreter exec'd: a module the server preloaded is there only in a fork.
probe='import sys; print("numpy" in sys.modules)'
[[ $(forked -c "$probe") == True ]] || fail "a -c command did not run in a fork of the server"
[[ $(OMP_NUM_THREADS=3 forked -c "$probe") == False ]] ||
  fail "a changed OMP_NUM_THREADS (read once, while libraries load) ran in a fork"
[[ $(forked -m this 2>/dev/null | head -1) == "The Zen of Python, by Tim Peters" ]] ||
  fail "-m through the server"
draw='import numpy; print(numpy.random.rand())'
[[ $(forked -c "$draw") != $(forked -c "$draw") ]] || fail "two forks drew the same random number"

# Signals: SIGTERM to the client ends the command with it; a client killed outright takes its
# command with it. (The client itself in the background, not a subshell running it.)
export HPCTRAIN_TEST_PYTHON_SERVER=$sock
"$client" -c 'import time; time.sleep(60)' &
pid=$!
sleep 1
kill -TERM "$pid"
wait "$pid"
rc=$?
[[ $rc == 143 ]] || fail "SIGTERM to the client: exit $rc, not 143 (SIGTERM)"
"$client" -c "import os, time; open('$TMP/sleeper.pid', 'w').write(str(os.getpid())); time.sleep(60)" &
pid=$!
for _ in $(seq 1 100); do [[ -s $TMP/sleeper.pid ]] && break; sleep 0.1; done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
child=$(cat "$TMP/sleeper.pid" 2>/dev/null)
[[ -n $child ]] || fail "the sleeping command never wrote its pid"
for _ in $(seq 1 50); do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done
[[ -n $child ]] && kill -0 "$child" 2>/dev/null && fail "a killed client's command ($child) still runs"

kill "$server"
wait "$server" 2>/dev/null
finish
