#!/usr/bin/env bash
# Crash safety (docs/ARCHITECTURE.md, invariant 3): a driver saves checkpoints back to back and is killed
# with SIGKILL 20 times: on one rank at each phase of the commit (the test hook
# HPCTRAIN_TEST_CHECKPOINT_CRASH makes it kill itself there) and at random moments, then on two
# ranks at random moments. Every restart checks what it finds before resuming from it: every
# step_<N> directory and the one `latest` names verify, and resume = auto picks a committed
# step_<N> (never a .tmp) holding exactly that step's values. A last check follows the last kill.
source "$(dirname "$0")/../lib.sh"
DRIVER=$1
RUN=$TMP/run
RANDOM=${HPCTRAIN_CRASH_SEED:-5}
KILLS=0
previous="the one-rank kills"

# after_run LABEL: what the run's startup check found about the previous kill.
after_run() {
  local found
  found=$(grep -E -m1 "^(ok|none|FAIL)" "$TMP/loop.log")
  if grep -q "^FAIL" "$TMP/loop.log" || [[ -z $found ]]; then
    fail "restart after $previous: $(grep -E "^FAIL" "$TMP/loop.log" || tail -5 "$TMP/loop.log")"
    ls -la "$RUN/checkpoints" >&2
  else
    echo "restart after $previous: $found"
  fi
  previous=$1
}

# One rank, in forked children of one process (no MPI start-up per kill): killed at each commit
# phase of a save (HPCTRAIN_TEST_CHECKPOINT_CRASH), then 6 times at random moments.
if timeout 60 "$DRIVER" local "$RUN" --kills 6 --seed "$RANDOM" >"$TMP/local.log" 2>&1; then
  sed 's/^/  /' "$TMP/local.log"
else
  fail "one-rank kills: $(grep -E "FAIL" "$TMP/local.log" || tail -5 "$TMP/local.log")"
fi
KILLS=$(grep -c "^restart after" "$TMP/local.log")

# Two ranks under mpirun (tp 1 or 2, background writing): SIGKILL both, or one of them, at a
# random moment while saves run back to back.
for i in $(seq 1 8); do
  np=2
  tp=$((i % 2 + 1))
  rm -rf "$TMP/pids"
  # shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds the launcher and its flags
  $HPCTRAIN_MPIEXEC -np "$np" "$DRIVER" loop "$RUN" --tp "$tp" --pid-dir "$TMP/pids" \
    >"$TMP/loop.log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 600); do  # until every rank has resumed and started saving
    [[ $(find "$TMP/pids" -name '*.pid' 2>/dev/null | wc -l) -ge $np ]] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 4))$((RANDOM % 10))"
  mapfile -t pids < <(cat "$TMP/pids"/*.pid 2>/dev/null)
  victims=("${pids[@]}")
  ((RANDOM % 2)) && ((${#pids[@]} > 1)) && victims=("${pids[RANDOM % ${#pids[@]}]}")
  kill -9 "${victims[@]}" 2>/dev/null
  # The launcher ends the remaining ranks once one died; never wait forever.
  for _ in $(seq 1 200); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$launcher" "${pids[@]}" 2>/dev/null
  wait "$launcher" 2>/dev/null
  KILLS=$((KILLS + 1))
  after_run "random kill $i ($np rank(s), tp $tp, killed ${#victims[@]} of ${#pids[@]})"
done

if timeout 60 "$DRIVER" check "$RUN" >"$TMP/loop.log" 2>&1; then
  after_run "end"
else
  fail "final check: $(cat "$TMP/loop.log")"
fi
echo "$KILLS kills; $(find "$RUN/checkpoints" -maxdepth 1 -name 'step_*' | wc -l) entries in checkpoints/"
grep -q "^ok step_" "$TMP/loop.log" || fail "the run ended without a checkpoint to resume from"
finish
