#!/usr/bin/env bash
# Which rank, which operation (issue 29), on 4 real ranks under mpirun:
#  1. rank 3 stops in backward and stays alive (debug.hang_mode sleep): the job ends with 7 and
#     one message for the job names rank 3, its host and its phase; every rank writes its flight
#     file, and `hpctrain trace flight` names the same rank;
#  2. rank 3 stops itself with SIGSTOP in backward: the same, from the position its heartbeats
#     last carried (it fell silent);
#  3. rank 1 enters a collective the others never enter: named as a desynchronised program;
#  4. SIGUSR2 to one rank makes every rank write its flight file while training goes on, and a
#     stop signal with logging.flight_dump writes them again as the job ends with 75.
source "$(dirname "$0")/../lib.sh"
data=$HPCTRAIN_TEST_DATA/fashion-mnist
host=$(hostname)
train=("$HPCTRAIN_BIN" --collective-timeout 5 --peer-timeout 60 train
  -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set eval.at_end=false
  --set run.max_steps=100000 --set run.epochs=100 --set logging.every_steps=20)
phase='(startup|idle|data wait|forward|backward|optimizer|step end|evaluation|checkpoint save|checkpoint load)'

# one_report LOG: the hang is reported once for the job, not once per waiting rank.
one_report() {
  local n
  n=$(grep -c "error: collective .* has not completed after" "$1")
  ((n == 1)) || fail "$1: $n hang reports, expected one for the job"
}

# flight_files RUN RANKS...: those ranks wrote their flight file.
flight_files() {
  local run=$1 r
  shift
  for r in "$@"; do
    [[ -f $run/flight/rank-$r.json ]] || fail "$run: no flight file of rank $r ($(find "$run/flight" -maxdepth 1 -name 'rank-*' 2>&1 | tr '\n' ' '))"
  done
}

# end_leftovers RUN: a rank of that run still alive (stopped) after the job ended is ended here.
end_leftovers() {
  local p
  for p in $(pgrep -f "run.dir=$1( |\$)" || true); do
    fail "a rank of $1 outlived the job (pid $p)"
    kill -CONT "$p" 2>/dev/null
    kill -KILL "$p" 2>/dev/null
  done
}

# 1. Rank 3 hangs in backward, alive: named with host and phase; four flight files.
expect_exit 7 "$TMP/sleep.txt" mpirun_np 4 "${train[@]}" --set "run.dir=$TMP/sleep" \
  --set debug.hang_step=30 --set debug.hang_rank=3
one_report "$TMP/sleep.txt"
expect_grep "error: collective .*: waiting [0-9.]+ [mu]?s for rank 3 on $host, which is in backward at step 30 since .*Aborting the job" "$TMP/sleep.txt"
expect_grep "Flight records of every rank that could write one: $TMP/sleep/flight/rank-\*\.json" "$TMP/sleep.txt"
flight_files "$TMP/sleep" 0 1 2 3
expect_exit 0 "$TMP/sleep-flight.txt" "$HPCTRAIN_BIN" trace flight "$TMP/sleep"
expect_grep "^hang: .*waiting .* for rank 3 on $host, which is in backward at step 30" "$TMP/sleep-flight.txt"
expect_exit 0 "$TMP/sleep-flight.json" "$HPCTRAIN_BIN" trace flight --json "$TMP/sleep"
$PY - "$TMP/sleep-flight.json" <<'PY' || fail "trace flight --json"
import json, sys
j = json.load(open(sys.argv[1]))
assert sorted(f["rank"] for f in j["files"]) == [0, 1, 2, 3], j["files"]
assert all(f["reason"] == "collective timeout" for f in j["files"]), j["files"]
assert any(h["not_entered"] == [3] for h in j["hangs"]), j["hangs"]
PY
end_leftovers "$TMP/sleep"

# 2. Rank 3 stops itself (SIGSTOP) in backward: named from its last heard position, on the host
# as Slurm names it (SLURMD_NODENAME, here unlike the machine's hostname).
host=sim-node-7
SLURMD_NODENAME=$host expect_exit 7 "$TMP/stop.txt" mpirun_np 4 "${train[@]}" --set "run.dir=$TMP/stop" \
  --set debug.hang_step=150 --set debug.hang_rank=3 --set debug.hang_mode=stop
one_report "$TMP/stop.txt"
expect_grep "error: collective .* for rank 3 on $host, which is in $phase at step [0-9]+ since [^;]*last heard [0-9.]+ s ago: it stopped sending heartbeats" "$TMP/stop.txt"
flight_files "$TMP/stop" 0 1 2
expect_exit 0 "$TMP/stop-flight.txt" "$HPCTRAIN_BIN" trace flight "$TMP/stop"
expect_grep "^hang: .* for rank 3 on $host, which is in $phase at step [0-9]+" "$TMP/stop-flight.txt"
end_leftovers "$TMP/stop"
host=$(hostname)

# 3. Rank 1 enters a world barrier where the others enter the stop agreement's all-reduce.
expect_exit 7 "$TMP/desync.txt" mpirun_np 4 "${train[@]}" --set "run.dir=$TMP/desync" \
  --set debug.desync_step=40 --set debug.desync_rank=1
one_report "$TMP/desync.txt"
expect_grep "error: collective .*desynchronised program: rank [0-9] on $host entered (barrier|allreduce) \(control\) #[0-9]+ where rank [0-9] entered (barrier|allreduce) \(control\) #[0-9]+" "$TMP/desync.txt"
expect_grep "(rank 1 on $host entered barrier \(control\)|where rank 1 entered barrier \(control\))" "$TMP/desync.txt"
expect_exit 0 "$TMP/desync-flight.txt" "$HPCTRAIN_BIN" trace flight "$TMP/desync"
expect_grep "^hang: .*desynchronised program: .*barrier \(control\)" "$TMP/desync-flight.txt"
end_leftovers "$TMP/desync"

# 4. SIGUSR2 to rank 1 while training: every rank writes its file, training goes on; SIGUSR1
# (a stop) with logging.flight_dump: every rank writes it again, the job ends with 75.
# shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds mpirun and its flags
timeout 120 $HPCTRAIN_MPIEXEC -np 4 "${train[@]}" --set "run.dir=$TMP/usr2" \
  --set logging.flight_dump=true >"$TMP/usr2.txt" 2>&1 &
launcher=$!
for _ in $(seq 1 300); do
  grep -q '"type":"train"' "$TMP/usr2/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
declare -A pid_of=()
for p in $(pgrep -f "run.dir=$TMP/usr2( |\$)" || true); do
  r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  [[ -n $r ]] && pid_of[$r]=$p
done
if ((${#pid_of[@]} != 4)); then
  fail "usr2: expected 4 rank pids, found ${#pid_of[@]}"
  kill "$launcher" 2>/dev/null
else
  kill -USR2 "${pid_of[1]}"
  for _ in $(seq 1 200); do
    (($(find "$TMP/usr2/flight" -maxdepth 1 -name 'rank-*.json' 2>/dev/null | wc -l) == 4)) && break
    sleep 0.1
  done
  flight_files "$TMP/usr2" 0 1 2 3
  kill -0 "$launcher" 2>/dev/null || fail "usr2: the job ended after SIGUSR2"
  $PY - "$TMP/usr2/flight" <<'PY' || fail "usr2: reasons"
import json, sys
reasons = {r: json.load(open(f"{sys.argv[1]}/rank-{r}.json"))["reason"] for r in range(4)}
assert reasons[1] == "SIGUSR2", reasons
assert all(reasons[r] == "requested by another rank" for r in (0, 2, 3)), reasons
records = json.load(open(f"{sys.argv[1]}/rank-2.json"))["records"]
assert len(records) > 10 and any(r["op"] == "all_reduce" and r["channel"] == "dp" for r in records), records[:3]
# On the CPU every record is timed by the host (the GPU's come from CUDA events: "device").
assert all(r["clock"] == "host" for r in records), records[:3]
done = [r for r in records if r["state"] == "completed"]
assert done and all(r["enqueued"] <= r["started"] <= r["ended"] for r in done), done[:3]
PY
  rm -f "$TMP"/usr2/flight/rank-*.json
  kill -USR1 "${pid_of[@]}"
  wait "$launcher"
  rc=$?
  ((rc == 75)) || fail "usr2: exit $rc after SIGUSR1, expected 75"
  flight_files "$TMP/usr2" 0 1 2 3
  grep -q '"reason": "stop signal"' "$TMP/usr2/flight/rank-0.json" || fail "usr2: rank 0's file is not the stop signal's"
  expect_exit 0 "$TMP/usr2-flight.txt" "$HPCTRAIN_BIN" trace flight "$TMP/usr2"
  expect_grep "no rank was waiting in a collective" "$TMP/usr2-flight.txt"
fi
end_leftovers "$TMP/usr2"
finish
