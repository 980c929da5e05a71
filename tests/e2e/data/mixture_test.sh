#!/usr/bin/env bash
# A weighted mixture (docs/DATA.md, "Many files and mixtures"): two sources at 0.7 / 0.3. The
# per-source counts in metrics.jsonl match the weights within 1% over 10,000 samples, at 1 and 3
# ranks, and the blend is the same at both (the same counts interval by interval, the same
# positions in the checkpoint); a run stopped mid-epoch and resumed ends bitwise equal to an
# uninterrupted one; a checkpoint of the mixture refuses another mixture.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
compare=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/train/compare_checkpoints.py")
"$PY" "$(dirname "$0")/make_shards.py" "$TMP" >/dev/null || fail "make_shards.py failed"
mix="[{path: \"$TMP/shards/*.h5\", weight: 0.7, name: web}, {path: \"$TMP/other\", weight: 0.3, name: code}]"
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set model.in_features=16
  --set "model.hidden=[8]" --set data.val= --set "data.train=$mix" --set run.epochs=100
  --set logging.every_steps=10 --set checkpoint.every_steps=0)

# 10,020 samples: 334 steps of 30.
for np in 1 3; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  expect_exit 0 "$TMP/mix$np.txt" "${launch[@]}" train "${common[@]}" --set run.max_steps=334 \
    --set data.batch_size=$((30 / np)) --set "run.dir=$TMP/mix$np"
  expect_grep "2 sources" "$TMP/mix$np.txt"
done
$PY - "$TMP/mix1" "$TMP/mix3" <<'PY' || fail "per-source counts are off"
import json, sys
runs = []
for d in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
    runs.append([r["samples_per_source"] for r in rows if r.get("type") == "train"])
a, b = runs
assert a == b, "the blend differs between 1 and 3 ranks"
web = sum(r["web"] for r in a)
code = sum(r["code"] for r in a)
total = web + code
assert total == 10020, total
share = web / total
assert abs(share - 0.7) < 0.01 and abs(code / total - 0.3) < 0.01, share
print(f"web {web} code {code}: shares {share:.4f} / {code / total:.4f} over {total} samples")
PY
"$PY" - "$TMP/mix1" "$TMP/mix3" <<'PY' || fail "checkpoint positions differ"
import json, os, sys
states = []
for d in sys.argv[1:]:
    ck = os.path.join(d, "checkpoints", open(os.path.join(d, "checkpoints", "latest")).read().strip())
    states.append(json.load(open(os.path.join(ck, "manifest.json")))["trainer_state"]["source_consumed"])
assert states[0] == states[1], states
print("source_consumed", states[0])
PY

# Resume mid-epoch: stop at step 37 (one mixture epoch is 820 / 30 = 27 steps), resume, compare.
expect_exit 0 "$TMP/full.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set run.max_steps=80 \
  --set data.batch_size=30 --set "run.dir=$TMP/full"
expect_exit 75 "$TMP/stop.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set run.max_steps=80 \
  --set data.batch_size=30 --set "run.dir=$TMP/part" --set debug.stop_step=37
expect_exit 0 "$TMP/resume1.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set run.max_steps=80 \
  --set data.batch_size=30 --set "run.dir=$TMP/part"
expect_grep "resumed from .*step_00000037" "$TMP/resume1.txt"
"${compare[@]}" "$TMP/full" "$TMP/part" || fail "the resumed mixture run differs"
# Another mixture (one source) on that checkpoint: refused, naming the change.
expect_exit 3 "$TMP/other.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set run.max_steps=90 \
  --set data.batch_size=30 --set "run.dir=$TMP/part" --set "data.train=$TMP/shards"
expect_grep "differs from the files the checkpoint was trained on" "$TMP/other.txt"
finish
