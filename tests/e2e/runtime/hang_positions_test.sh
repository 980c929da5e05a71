#!/usr/bin/env bash
# Positions within one step in hang reports (issue 44, item 5). One of 4 ranks, chosen at random,
# is stopped with SIGSTOP at a random moment of a random step (from outside, as a debugger or a
# suspended job would); the collective watchdog (5 s) ends the job with 7, and its one report must
# name that rank, at a step within 1 of the waiting rank's, and at the collective number it is
# at: on the waiting collective's channel, the number before the waited one (every member of an
# all-reduce entered the one before, since the waiting rank completed it), or that number itself
# if it entered it and fell silent. Before the fix, positions travelled with the once-a-second
# heartbeat only, and a report named a step and collective tens of steps old. The same with a
# pipeline: gpt at dp = 2 x pp = 2.
# Argument (optional): how many rounds per layout (default 1).
source "$(dirname "$0")/../lib.sh"
rounds=${1:-1}
data=$HPCTRAIN_TEST_DATA/fashion-mnist
mlp=("$HPCTRAIN_BIN" --collective-timeout 5 --peer-timeout 120 train
  -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5"
  --set eval.every_steps=0 --set eval.at_end=false --set run.max_steps=100000
  --set run.epochs=100 --set logging.every_steps=1 --set logging.progress=off)
fortunes=/usr/share/games/fortunes
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes/science" \
  --out "$TMP/text" --val-fraction 0.05
gpt=("$HPCTRAIN_BIN" --collective-timeout 5 --peer-timeout 120 train
  -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set "data.train=$TMP/text/train.h5"
  --set "data.val=$TMP/text/val.h5"
  --set model.seq_len=32 --set model.width=32 --set model.heads=2 --set model.layers=4
  --set data.batch_size=4 --set optim.grad_accumulation=4 --set run.epochs=1000
  --set run.max_steps=100000 --set eval.every_steps=0 --set eval.at_end=false
  --set logging.every_steps=1 --set logging.progress=off --set parallel.pp=2)

# pid_of_rank LAUNCHER_PID RANK: the pid of that world rank of the job.
pid_of_rank() {
  local p
  for p in $(pgrep -f "run.dir=$TMP/$1( |\$)"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return
    fi
  done
}

# freeze NAME CMD...: runs CMD on 4 ranks, stops a random rank at a random moment after a random
# step, and checks the report.
freeze() {
  local name=$1
  shift
  local victim_rank=$((RANDOM % 4)) after=$((5 + RANDOM % 25)) pid rc
  # shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds mpirun and its flags
  timeout 150 $HPCTRAIN_MPIEXEC -np 4 "$@" --set "run.dir=$TMP/$name" >"$TMP/$name.txt" 2>&1 &
  local launcher=$!
  for _ in $(seq 1 900); do
    [[ $(grep -c '"type":"train"' "$TMP/$name/metrics.jsonl" 2>/dev/null) -ge $after ]] && break
    sleep 0.1
  done
  sleep "0.$((RANDOM % 10))"
  pid=$(pid_of_rank "$name" "$victim_rank")
  if [[ -z $pid ]]; then
    fail "$name: no pid for rank $victim_rank"
    kill "$launcher" 2>/dev/null
    wait "$launcher"
    return
  fi
  kill -STOP "$pid"
  wait "$launcher"
  rc=$?
  kill -CONT "$pid" 2>/dev/null
  kill -KILL "$pid" 2>/dev/null
  ((rc == 7)) || fail "$name: exit $rc, expected 7 (the collective timeout)"
  grep "error: collective" "$TMP/$name.txt" | head -1 >"$TMP/$name-report.txt"
  echo "$name: stopped rank $victim_rank after step $after: $(cat "$TMP/$name-report.txt")"
  "$PY" - "$TMP/$name-report.txt" "$victim_rank" <<'PY' || fail "$name: the report is wrong (above)"
import re, sys
text, victim = open(sys.argv[1]).read(), int(sys.argv[2])
head = re.search(r"error: collective (.+?) #(\d+) \(step (\d+)\) on rank (\d+)", text)
assert head, f"no hang report: {text!r}"
channel_op, seq, step, waiter = head.group(1), int(head.group(2)), int(head.group(3)), int(head.group(4))
named = re.findall(r"for (?:\d+ ranks: )?rank (\d+) on [^,]+, which is in ([a-z ]+) at step (\d+)", text)
named += re.findall(r"; rank (\d+) on [^,]+, which is in ([a-z ]+) at step (\d+)", text)
ranks = {int(r) for r, _, _ in named}
assert ranks == {victim}, f"the report names ranks {sorted(ranks)}, the stopped one is {victim}"
_, phase, at = next(n for n in named if int(n[0]) == victim)
assert abs(int(at) - step) <= 1, f"rank {victim} reported at step {at}, the waiting rank {waiter} at {step}"
silent = re.search(r"it had entered .+? #(\d+) and fell silent in it", text)
last = re.search(r"its last (.+?) collective: (.+?) #(\d+)", text)
if silent:
    assert int(silent.group(1)) == seq, (silent.group(0), seq)
    where = f"in #{seq}, silent"
else:
    assert last, f"no collective named for rank {victim}: {text!r}"
    number = int(last.group(3))
    assert number == seq - 1, f"rank {victim}'s last collective #{number}, the waited one #{seq}: stale"
    where = f"at #{number}"
print(f"  -> waiting rank {waiter} in {channel_op} #{seq} at step {step}; "
      f"rank {victim} in {phase} at step {at}, {where}")
PY
}

for round in $(seq 1 "$rounds"); do
  freeze "mlp-$round" "${mlp[@]}"
  freeze "gpt-$round" "${gpt[@]}"
done
finish
