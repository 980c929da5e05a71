#!/usr/bin/env bash
# Positions within one step in hang reports (issue 44, item 5). One of 4 ranks, chosen at random,
# is stopped with SIGSTOP at a random moment of a random step (from outside, as a debugger or a
# suspended job would); the collective watchdog (5 s) ends the job with 7, and its one report must
# name that rank, at a step within 1 of the waiting rank's, and where it is relative to the wait
# that names it: on a collective's channel, the number before the waited one (every member of an
# all-reduce entered the one before, since the waiting rank completed it: the report says so even
# when the stopped rank's last moves never went out; one more before only after a broadcast), or
# that number itself if it entered it and fell silent; on a pipeline's point-to-point batch, whether it entered it.
# Two layouts: data parallel (tiny-mlp, 4 x dp) and a pipeline (gpt, dp = 2 x pp = 2), where the
# rank that reports often waits on a live neighbour stage that itself waits on the stopped rank:
# the report follows the wait from rank to rank ("rank 1, which waits in dp all_reduce #57 at step
# 12 for rank 3 on n1, which is in ...") to the stopped one. Before positions were sent on every
# move, a report named a step and collective tens of steps old; before waits were followed, a
# pipeline report named the live neighbour.
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
[[ -f $fortunes/science ]] || fail "$fortunes/science missing: apt-get install fortunes"
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes/science" \
  --out "$TMP/text" --val-fraction 0.05
pp=("$HPCTRAIN_BIN" --peer-timeout 120 train
  -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set "data.train=$TMP/text/train.h5"
  --set "data.val=$TMP/text/val.h5" --set model.seq_len=32 --set model.width=32
  --set model.heads=2 --set model.layers=2 --set data.batch_size=4 --set optim.grad_accumulation=4
  --set parallel.pp=2 --set run.epochs=1000 --set run.max_steps=0 --set eval.every_steps=0
  --set eval.at_end=false --set logging.every_steps=1 --set logging.progress=off)

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
  local victim_rank=$((RANDOM % 4)) after=$((5 + RANDOM % 15)) pid rc launch=("$@")
  if [[ $name == pp-* ]]; then
    # The pipeline: only the rank that shares no group with the stopped one (world rank ^ 3: the
    # other stage of the other replica) times out after 5 s, the others after 30 s, so the report
    # comes from a rank that waits on the stopped one through a live rank (or directly, when every
    # rank waits in a world collective).
    # shellcheck disable=SC2016  # expanded by the rank's shell
    launch=(bash -c 'if [[ $OMPI_COMM_WORLD_RANK == "$0" ]]; then t=5; else t=30; fi
      HPCTRAIN_COLLECTIVE_TIMEOUT=$t exec "$@"' "$((victim_rank ^ 3))" "$@")
  fi
  # shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds mpirun and its flags
  timeout 150 $HPCTRAIN_MPIEXEC -np 4 "${launch[@]}" --set "run.dir=$TMP/$name" \
    >"$TMP/$name.txt" 2>&1 &
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
  grep -a "error: collective" "$TMP/$name.txt" | head -1 >"$TMP/$name-report.txt"
  echo "$name: stopped rank $victim_rank after step $after: $(cat "$TMP/$name-report.txt")"
  "$PY" - "$TMP/$name-report.txt" "$victim_rank" <<'PY' || fail "$name: the report is wrong (above)"
import re, sys
text, victim = open(sys.argv[1]).read(), int(sys.argv[2])
# "... (timeout 5.0 s). dp all_reduce #57 (step 12) on rank 0" or "... pp send_recv (step 12) ..."
head = re.search(r"\(timeout [^)]*\)\. (.+?) \(step (\d+)\) on rank (\d+)", text)
assert head, f"no hang report: {text!r}"
what, step, waiter = head.group(1), int(head.group(2)), int(head.group(3))
named = re.findall(r"for (?:\d+ ranks: )?rank (\d+) on [^,]+, which is in ([a-z ]+) at step (\d+)", text)
named += re.findall(r"; rank (\d+) on [^,]+, which is in ([a-z ]+) at step (\d+)", text)
ranks = {int(r) for r, _, _ in named}
assert ranks == {victim}, f"the report names ranks {sorted(ranks)}, the stopped one is {victim}"
_, phase, at = next(n for n in named if int(n[0]) == victim)
assert abs(int(at) - step) <= 1, f"rank {victim} reported at step {at}, the waiting rank {waiter} at {step}"
# The wait that names it: a rank on the chain ("rank 1, which waits in dp all_reduce #57 at step
# 12 for rank 3 on ..."), else the reporting rank's own.
link = re.search(rf"which waits in ([^,;#]+?)(?: #(\d+))?(?: with ranks? [0-9, and]+)? at step \d+ "
                 rf"for rank {victim} on ", text)
link_what, seq = (link.group(1), link.group(2)) if link else (what, None)
if not link:
    number = re.search(r" #(\d+)$", what)
    seq = number.group(1) if number else None
after = text[text.index(f"rank {victim} on "):]
silent = re.search(r"it had entered .+? #(\d+) and fell silent in it", after)
last = re.search(r"its last (.+?) collective: (.+?) #(\d+)", after)
if seq is not None:  # a collective: the number it is at
    seq = int(seq)
    if silent and (not last or silent.start() < last.start()):
        assert int(silent.group(1)) == seq, (silent.group(0), seq)
        where = f"in #{seq}, silent"
    else:
        assert last, f"no collective named for rank {victim}: {text!r}"
        # The one before. A rank stopped within the ring's send gap (0.8 ms at 4 ranks) of its
        # last moves, or starved of the processor then, never sent them: control collectives at
        # a step's end come that close together. When the one before needs every member (an
        # all-reduce), the report says the stopped rank entered it ("#N or later"), whatever it
        # was heard at; else (a broadcast before) it may name the one before that.
        inferred = " or later (" in after[last.end():last.end() + 10]
        allowed = (seq - 1,) if inferred else (seq - 1, seq - 2)
        assert int(last.group(3)) in allowed, f"rank {victim}'s last collective #{last.group(3)}, the waited one #{seq}: stale"
        where = f"at #{last.group(3)}" + (" or later" if inferred else "")
else:  # a point-to-point batch: whether it entered it, and the operation it is at
    p2p = re.search(r"(it had entered|it is in|it has not entered)( the)? (pp send_recv[^;.]*)(; [^;.]*)?", after)
    assert p2p, f"no point-to-point position for rank {victim}: {text!r}"
    where = p2p.group(0)
print(f"  -> waiting rank {waiter} in {what} at step {step}"
      + (f", through a rank waiting in {link_what}{' #' + str(seq) if seq else ''}" if link else "")
      + f"; rank {victim} in {phase} at step {at}, {where}")
PY
}

for round in $(seq 1 "$rounds"); do
  freeze "mlp-$round" "${mlp[@]}"
  freeze "pp-$round" "${pp[@]}"
done
finish
