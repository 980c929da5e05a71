#!/usr/bin/env bash
# Failures inside a pipelined step (issue 28), gpt at pp = 4 on 4 ranks: (1) a middle stage killed
# with SIGKILL: the ranks waiting for its activations and gradients do not stay blocked in their
# receives; the job ends within seconds with exit 5 (outcome.json), naming the lost rank. (2) a
# middle stage stopped (SIGSTOP) with the peer monitor's timeout far away: its neighbours'
# receives never complete, and the collective watchdog ends the job with exit 7 naming the pp
# group and the peer it waits for.
source "$(dirname "$0")/../lib.sh"

fortunes=/usr/share/games/fortunes
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes/science" \
  --out "$TMP/text" --val-fraction 0.05
train=("$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml"
  --set "data.train=$TMP/text/train.h5" --set "data.val=$TMP/text/val.h5" --set model.seq_len=32
  --set model.width=32 --set model.heads=2 --set model.layers=4 --set data.batch_size=4
  --set optim.grad_accumulation=8 --set run.epochs=1000 --set run.max_steps=0
  --set eval.every_steps=0 --set eval.at_end=false --set logging.every_steps=1
  --set parallel.pp=4)

# start_job NAME [VAR=VALUE...]: a 4-rank job in the background with those variables in its
# environment (LAUNCHER = its pid); returns once it trains.
start_job() {
  local name=$1
  shift
  # shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds mpirun and its flags
  env "$@" timeout 120 $HPCTRAIN_MPIEXEC -np 4 "${train[@]}" --set "run.dir=$TMP/$name" \
    >"$TMP/$name.txt" 2>&1 &
  LAUNCHER=$!
  for _ in $(seq 1 600); do
    grep -q '"type":"train"' "$TMP/$name/metrics.jsonl" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "$name: the job did not start training"
  return 1
}

# pid_of_rank R: the pid of world rank R of the job LAUNCHER started.
pid_of_rank() {
  local p
  local launcher
  launcher=$(pgrep -P "$LAUNCHER" | head -1)  # env exec'd timeout, which runs mpirun
  for p in $(pgrep -P "$LAUNCHER") $(pgrep -P "$launcher") $(for q in $(pgrep -P "$launcher"); do pgrep -P "$q"; done); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return
    fi
  done
}

# 1. Rank 1 (stage 1: rank 0 waits for its gradients, rank 2 for its activations) killed.
if start_job killed; then
  victim=$(pid_of_rank 1)
  [[ -n $victim ]] || fail "no pid for rank 1"
  kill -KILL "$victim"
  killed_at=$SECONDS
  wait "$LAUNCHER"
  rc=$?
  elapsed=$((SECONDS - killed_at))
  ((elapsed < 30)) || fail "killed stage: the job took ${elapsed}s to end (rc $rc)"
  read -r code reason < <($PY -c 'import json,sys; o=json.load(open(sys.argv[1])); print(o["exit_code"], o["reason"])' \
    "$TMP/killed/outcome.json" 2>/dev/null)
  [[ $code == 5 && $reason == "lost rank 1"* ]] ||
    fail "killed stage: outcome '$code $reason' (mpirun returned $rc), not 5 naming lost rank 1"
  # The other ranks end, none left blocked in a receive from or send to rank 1 (the time above),
  # and say why; the launcher may end the slower ones before they print, once one exited with 5.
  [[ $(grep -Ec "\[hpctrain r[023]/[^]]+\] error: lost rank 1 .*Ending with exit code 5" "$TMP/killed.txt") -ge 1 ]] ||
    fail "killed stage: no surviving rank reported lost rank 1: $(tail -5 "$TMP/killed.txt")"
  echo "killed rank 1: the job ended ${elapsed}s later, outcome $code"
fi

# 2. Rank 1 stopped: no heartbeat loss for 120 s, so the 4 s collective timeout comes first.
if start_job stopped HPCTRAIN_PEER_TIMEOUT=120 HPCTRAIN_COLLECTIVE_TIMEOUT=4; then
  victim=$(pid_of_rank 1)
  [[ -n $victim ]] || fail "no pid for rank 1"
  kill -STOP "$victim"
  stopped_at=$SECONDS
  wait "$LAUNCHER"
  rc=$?
  kill -CONT "$victim" 2>/dev/null
  elapsed=$((SECONDS - stopped_at))
  ((rc == 7)) || fail "stopped stage: exit $rc, expected 7"
  ((elapsed < 60)) || fail "stopped stage: the job took ${elapsed}s to end"
  # Its neighbours wait in a point-to-point exchange with it or, when it stopped between its
  # sends and a host agreement (the norm's sum over the stages, the step's end), in that
  # control-plane collective: either names rank 1. When rank 1 stopped after giving its part
  # of an allreduce, rank 0 may complete it and wait in the next one (a gather) instead.
  grep -Eq "collective send_recv on the pp group \([^)]*(recv from|send to) group rank 1 = world rank 1\) has not completed after" "$TMP/stopped.txt" ||
    expect_grep "collective (allreduce|gather|broadcast|barrier) \(control\) on the [a-z]+ group .* has not completed after .* waiting [0-9.]+ m?s for ([0-9]+ ranks: )?rank 1 on " "$TMP/stopped.txt"
  echo "stopped rank 1: exit $rc ${elapsed}s later: $(grep -o 'collective send_recv on the pp group ([^)]*)' "$TMP/stopped.txt" | head -1)"
fi
finish
