#!/usr/bin/env bash
# The tests' fork server (src/cli/fork_server.hpp, its client tests/support/fork_client.cpp) against the
# binary's own processes: the same exit code, stdout and stderr for a version, usage, config,
# data and plan command; the client's directory and environment; a stop signal forwarded (75)
# and a deadly one (SIGALRM: the client ends by it too, as the process did); a client killed
# outright takes its command with it. Under mpirun (`fork_server_start mpi`), each rank a fork:
# the same losses as the binary's own ranks, a rank that fails alone ends the job with the same
# code, a stop signal to mpirun reaches the forked ranks (75) and no fork outlives its job. The
# tests that use the server rely on all of this.
source "$(dirname "$0")/../lib.sh"
data=$HPCTRAIN_TEST_DATA/fashion-mnist
tiny=$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml
HPCTRAIN_TEST_NO_FORK=0 fork_server_start  # this test is of the server: never without it
[[ -n ${FORK_SOCKET:-} ]] || finish
client=(env HPCTRAIN_TEST_FORK_SERVER="$FORK_SOCKET" "${FORKED_HPCTRAIN[@]}" "$HPCTRAIN_BIN")

# same NAME ARGS...: the forked command and the binary's own process agree.
same() {
  local name=$1
  shift
  "$HPCTRAIN_BIN" "$@" >"$TMP/$name.own.out" 2>"$TMP/$name.own.err"
  local own=$?
  "${client[@]}" "$@" >"$TMP/$name.forked.out" 2>"$TMP/$name.forked.err"
  local forked=$?
  ((own == forked)) || fail "$name: exit $forked forked, $own as its own process"
  cmp -s "$TMP/$name.own.out" "$TMP/$name.forked.out" ||
    fail "$name: stdout differs: $(diff "$TMP/$name.own.out" "$TMP/$name.forked.out" | head -5)"
  cmp -s "$TMP/$name.own.err" "$TMP/$name.forked.err" ||
    fail "$name: stderr differs: $(diff "$TMP/$name.own.err" "$TMP/$name.forked.err" | head -5)"
  echo "$name: exit $own, the same streams"
}
same version --version
same usage plan --no-such-option
same config plan -c "$TMP/missing.yaml"
same data inspect data "$TMP/missing.h5"
same inspect inspect data "$data/test.h5"
same plan plan -c "$tiny" --devices 2 --set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
"${client[@]}" plan -c "$TMP/missing.yaml" >/dev/null 2>&1
code=$?
((code == 2)) || fail "a missing config: exit $code forked, expected 2"

# The client's directory and environment.
mkdir -p "$TMP/cwd" && cp "$tiny" "$TMP/cwd/relative.yaml"
(cd "$TMP/cwd" && HPCTRAIN_CONFIG_KEYS=$TMP/keys.txt "${client[@]}" plan -c relative.yaml \
  --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" >"$TMP/cwd.txt" 2>&1) ||
  fail "plan of a relative path in the client's directory failed: $(tail -3 "$TMP/cwd.txt")"
grep -q "^model.name$" "$TMP/keys.txt" 2>/dev/null ||
  fail "HPCTRAIN_CONFIG_KEYS of the client's environment was not seen"

# Signals: a watch waits between polls; SIGTERM is forwarded (75, as its own process), SIGALRM
# ends the command by the signal and the client the same way (128 + 14).
expect_exit 0 "$TMP/run.txt" "$HPCTRAIN_BIN" train -c "$tiny" --set "data.train=$data/train.h5" \
  --set "data.val=$data/test.h5" --set run.max_steps=2 --set checkpoint.at_end=true \
  --set eval.every_steps=0 --set eval.at_end=false --set "run.dir=$TMP/run"
rm -f "$TMP/run/training_complete.json"  # training "goes on": the watch waits
watch_then() {  # watch_then SIGNAL NAME CMD...: CMD watching, then SIGNAL; prints its exit code
  local signal=$1 name=$2
  shift 2
  "$@" eval --watch "$TMP/run" --poll 60 --timeout 600 --results "$TMP/results-$name" \
    >"$TMP/watch-$name.txt" 2>&1 &
  local pid=$! i
  for ((i = 0; i < 300; i++)); do grep -q "step 2" "$TMP/watch-$name.txt" && break; sleep 0.1; done
  sleep 0.5
  kill "-$signal" "$pid"
  wait "$pid"
  echo $?
}
for signal in TERM ALRM; do
  own=$(watch_then "$signal" "own-$signal" "$HPCTRAIN_BIN")
  forked=$(watch_then "$signal" "forked-$signal" "${client[@]}")
  if ((own == forked)); then
    echo "SIG$signal during a watch: exit $own both ways"
  else
    fail "SIG$signal during a watch: exit $forked forked, $own as its own process"
  fi
done
[[ $(watch_then TERM own-term2 "$HPCTRAIN_BIN") == 75 ]] || fail "SIGTERM did not end the watch with 75"

# Ranks under mpirun: each rank's client asks for a fork with the launcher's environment.
# mpi_run FORK NAME WANT ARGS...: `mpirun_np 2 "$HPCTRAIN_BIN" ARGS...`, its ranks forks or not.
mpi_run() {
  local fork=$1 name=$2 want=$3
  shift 3
  FORK_MPI=$fork expect_exit "$want" "$TMP/mpi-$name.txt" mpirun_np 2 "$HPCTRAIN_BIN" "$@"
}
train2=(train -c "$tiny" --set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
  --set run.max_steps=6 --set logging.every_steps=1 --set eval.every_steps=3)
for fork in 0 1; do
  mpi_run "$fork" "train-$fork" 0 "${train2[@]}" --set "run.dir=$TMP/mpi-run-$fork"
  mpi_run "$fork" "fail-$fork" 1 "${train2[@]}" --set "run.dir=$TMP/mpi-fail-$fork" \
    --set debug.fail_step=3 --set debug.fail_rank=1
done
losses() { grep -oE '"(loss|val_loss)":[^,]*' "$1/metrics.jsonl"; }
[[ -n $(losses "$TMP/mpi-run-0") ]] || fail "no losses in $TMP/mpi-run-0/metrics.jsonl"
[[ $(losses "$TMP/mpi-run-0") == "$(losses "$TMP/mpi-run-1")" ]] ||
  fail "2 ranks: forked losses differ: $(diff <(losses "$TMP/mpi-run-0") <(losses "$TMP/mpi-run-1") | head -4)"
# A 2-rank watch, then SIGTERM to mpirun: the forks are the server's grandchildren (a handler
# each) while it runs; mpirun passes the signal on, the ranks end with 75 as the binary's ranks
# do, mpirun with the same code both ways (its own: 1), and no fork is left.
mpi_watch() {  # mpi_watch FORK: prints the exit code, and the forks seen running
  mpi_argv 2 "$HPCTRAIN_BIN" eval --watch "$TMP/run" --poll 60 --timeout 600 \
    --results "$TMP/results-mpi-$1"
  FORK_MPI=$1 "${MPI_ARGV[@]}" >"$TMP/mpi-watch-$1.txt" 2>&1 &
  local pid=$! i
  for ((i = 0; i < 300; i++)); do grep -q "step 2" "$TMP/mpi-watch-$1.txt" && break; sleep 0.1; done
  sleep 0.5
  local forks=0 handler
  for handler in $(pgrep -P "$FORK_SERVER_PID"); do forks=$((forks + $(pgrep -c -P "$handler"))); done
  kill -TERM "$pid"
  wait "$pid"
  echo "$? $forks"
}
FORK_MPI=1
read -r forked forks < <(mpi_watch 1)
FORK_MPI=0
read -r own _ < <(mpi_watch 0)
((forks == 2)) || fail "a 2-rank watch ran as $forks forks of the server, not 2"
((own == forked)) || fail "SIGTERM to mpirun during a 2-rank watch: exit $forked forked, $own as the binary's ranks"
for fork in 0 1; do
  expect_grep "SIGTERM received outside the training step loop: nothing to save, exiting now with 75" \
    "$TMP/mpi-watch-$fork.txt"
done
echo "2 ranks as forks: the same losses; a failed rank: exit 1 both ways; SIGTERM to mpirun: ranks 75, mpirun $own both ways"

# A client killed outright: its command goes too (the server keeps no child).
watch_then KILL killed "${client[@]}" >/dev/null
for ((i = 0; i < 50; i++)); do [[ -z $(pgrep -P "$FORK_SERVER_PID") ]] && break; sleep 0.1; done
[[ -z $(pgrep -P "$FORK_SERVER_PID") ]] ||
  fail "a killed client's command still runs: $(pgrep -a -P "$FORK_SERVER_PID")"
finish
