#!/usr/bin/env bash
# prepare text on a real corpus (Debian's fortunes), then configs/gpt-tiny-tp2.yaml on 2 ranks
# (dp=1 x tp=2), shortened: the loss falls, periodic evaluation reports loss and perplexity in
# the log and in metrics.jsonl, and the ledger counts tokens. Then the tp=2 checkpoint is
# resharded on load: `hpctrain eval` at tp=1 (1 rank), tp=2 (2 ranks) and tp=4 (4 ranks) gives
# the evaluation loss of training's last periodic evaluation (bit for bit at tp=2, the grid it
# was trained on; within float32 rounding of the differently split matmuls at tp=1 and 4).
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

fortunes=/usr/share/games/fortunes
inputs=("$fortunes/science" "$fortunes/linux" "$fortunes/wisdom")
for f in "${inputs[@]}"; do [[ -f $f ]] || fail "$f missing: apt-get install fortunes (scripts/setup.sh)"; done

expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "${inputs[@]}" \
  --out "$TMP/text" --val-fraction 0.05
expect_grep "wrote $TMP/text/train.h5" "$TMP/prepare.txt"

# The tiny model as configured, a smaller batch, a short warm-up and a higher learning rate so
# that 30 steps show learning within the test's budget.
run=$TMP/run
expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny-tp2.yaml" \
  --set data.train="$TMP/text/train.h5" --set data.val="$TMP/text/val.h5" \
  --set run.dir="$run" --set run.max_steps=30 --set data.batch_size=4 \
  --set schedule.warmup_steps=5 --set optim.lr=0.003 --set eval.every_steps=15 \
  --set eval.max_samples=16 --set logging.every_steps=1 --set logging.progress=plain \
  --set checkpoint.at_end=true
expect_grep "on dp=1 x tp=2" "$TMP/train.txt"
expect_grep "eval at step 15: loss [0-9.]+, perplexity [0-9.]+, token accuracy" "$TMP/train.txt"
expect_grep "eval at step 30: loss [0-9.]+, perplexity [0-9.]+" "$TMP/train.txt"
expect_grep "stopped after step 30: completed" "$TMP/train.txt"

$PY - "$run" <<'PY' || fail "metrics.jsonl / ledger.json do not show a learning GPT (see above)"
import json, math, sys
run = sys.argv[1]
records = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
train = [r for r in records if r["type"] == "train"]
evals = [r for r in records if r["type"] == "eval"]
assert [r["step"] for r in train] == list(range(1, 31)), [r["step"] for r in train]
first = train[0]["loss"]
last = sum(r["loss"] for r in train[-5:]) / 5
print(f"train loss {first:.3f} at step 1, {last:.3f} over steps 26-30")
assert 5.0 < first < 6.0, first               # about ln(256) = 5.55 from the GPT-2 init
assert last < first - 1.0, (first, last)      # bytes of English are far from uniform
assert [r["step"] for r in evals] == [15, 30], evals
for r in evals:
    assert abs(r["perplexity"] - math.exp(r["loss"])) < 1e-6 * r["perplexity"], r
    assert r["samples"] == 16, r
assert evals[1]["loss"] < evals[0]["loss"], evals
ledger = json.load(open(f"{run}/ledger.json"))
assert ledger["grid"] == {**ledger["grid"], "dp": 1, "tp": 2}, ledger["grid"]
assert ledger["model"]["tokens_per_sample"] == 128, ledger["model"]
assert ledger["throughput"]["train_tokens_per_s"] > 0, ledger["throughput"]
print("eval perplexity", [round(r["perplexity"], 2) for r in evals])
PY

ckpt=$run/checkpoints/step_00000030
[[ -d $ckpt ]] || fail "no checkpoint at step 30"
for tp in 1 2 4; do
  launch=("$HPCTRAIN_BIN")
  ((tp > 1)) && launch=(mpirun_np "$tp" "$HPCTRAIN_BIN")
  expect_exit 0 "$TMP/eval_tp$tp.txt" "${launch[@]}" eval --checkpoint "$ckpt" --tp "$tp" \
    --results "$TMP/eval_tp$tp"
  expect_grep "eval step 30 \\(val\\): loss [0-9.]+" "$TMP/eval_tp$tp.txt"
done
$PY - "$run" "$TMP" <<'PY' || fail "the tp=2 checkpoint evaluates differently at another tp"
import json, sys
run, tmp = sys.argv[1:]
periodic = [r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r["type"] == "eval"][-1]
assert periodic["step"] == 30, periodic
for tp in (1, 2, 4):
    r = json.load(open(f"{tmp}/eval_tp{tp}/step_00000030.json"))
    assert r["samples"] == periodic["samples"] and r["count"] == periodic["count"], (tp, r)
    if tp == 2:
        assert r["loss"] == periodic["loss"], (r["loss"], periodic["loss"])   # the same grid
    assert abs(r["loss"] - periodic["loss"]) < 1e-5 * periodic["loss"], (tp, r["loss"], periodic["loss"])
    assert abs(r["perplexity"] - periodic["perplexity"]) < 1e-4 * periodic["perplexity"], (tp, r)
    print(f"tp={tp}: eval loss {r['loss']!r} (training's periodic eval at tp=2: {periodic['loss']!r})")
PY
finish
