#!/usr/bin/env bash
# Memory of full sharding (parallel.shard: full) on configs/gpt-medium.yaml at 4 ranks (2 sequences
# per rank: the state is the same, the activations a quarter of batch 8's, the work too), with the
# unsharded run (none) measured beside it, both recomputing blocks (model.recompute: block, so
# that the activations do not hide the state and the gathered units): each rank's measured peak of live tensors (the
# ledger's peak_tensor_bytes_per_rank) lies within 10% of `hpctrain plan`'s prediction for its
# mode (16/4 bytes per parameter of state, the gathered units, the activations); the state the
# ledger counts is 16/4 bytes per parameter (padding aside); and full holds less than none.
source "$(dirname "$0")/../lib.sh"

fortunes=/usr/share/games/fortunes
inputs=("$fortunes/science" "$fortunes/linux")
for f in "${inputs[@]}"; do [[ -f $f ]] || fail "$f missing: apt-get install fortunes (scripts/setup.sh)"; done
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "${inputs[@]}" \
  --out "$TMP/text" --val-fraction 0.05

config=$HPCTRAIN_SOURCE_DIR/configs/gpt-medium.yaml
common=(--set "data.train=$TMP/text/train.h5" --set "data.val=$TMP/text/val.h5"
  --set run.max_steps=2 --set eval.every_steps=0 --set eval.at_end=false
  --set checkpoint.at_end=false --set model.recompute=block --set data.batch_size=2)
for mode in none full; do
  expect_exit 0 "$TMP/$mode.txt" mpirun_np 4 "$HPCTRAIN_BIN" --threads 1 train -c "$config" \
    "${common[@]}" --set "parallel.shard=$mode" --set "run.dir=$TMP/$mode"
  expect_exit 0 "$TMP/$mode.plan.json" "$HPCTRAIN_BIN" plan -c "$config" "${common[@]:0:4}" --set model.recompute=block --set data.batch_size=2 \
    --set "parallel.shard=$mode" --devices 4 --samples 100000 --json
done

$PY - "$TMP" <<'PY' || fail "memory per shard mode"
import json, sys
tmp = sys.argv[1]
MiB = 2 ** 20
peaks = {}
for mode in ("none", "full"):
    ledger = json.load(open(f"{tmp}/{mode}/ledger.json"))
    plan = json.load(open(f"{tmp}/{mode}.plan.json"))["memory"]["host"]["tensor_bytes"]
    m = ledger["memory_per_rank"]
    assert m["shard"] == mode, m
    state = m["parameter_bytes"] + m["gradient_bytes"] + m["optimizer_state_bytes"]
    params = ledger["model"]["parameters"]
    want = 16 * params / (4 if mode == "full" else 1)
    assert abs(state - want) <= 0.01 * want, (mode, "state", state, "want", want)
    for rank, t in enumerate(ledger["peak_tensor_bytes_per_rank"]):
        assert abs(t - plan) <= 0.1 * t, (mode, "rank", rank, "peak", t, "plan", plan)
    peaks[mode] = max(ledger["peak_tensor_bytes_per_rank"])
    print(f"{mode}: state {state / MiB:.0f} MiB, peak tensors {peaks[mode] / MiB:.0f} MiB, "
          f"plan {plan / MiB:.0f} MiB")
assert peaks["full"] < peaks["none"], peaks
PY
finish
