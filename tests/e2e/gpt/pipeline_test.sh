#!/usr/bin/env bash
# Pipeline stages end to end (issue 28): a small gpt on byte-level text trained on one rank (the
# reference) and at pp = 2 (1F1B, traced): the same loss at every step (within 1e-6), the same
# evaluation, the same logical checkpoint tensors under the same names; the ledger records the
# bubble next to the formula's and the trace shows each stage's forward and backward of every
# micro-batch; the pp = 2 checkpoint resumes at pp = 1, pp = 4, dp = 2 and tp = 2 x pp = 2 and
# continues the reference's losses; `hpctrain plan` predicts the bubble; shape errors exit 2; a
# NaN loss on the last stage stops every stage (exit 6).
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

fortunes=/usr/share/games/fortunes
[[ -f $fortunes/science ]] || fail "$fortunes/science missing: apt-get install fortunes"
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes/science" \
  --out "$TMP/text" --val-fraction 0.05

common=(-c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set "data.train=$TMP/text/train.h5"
  --set "data.val=$TMP/text/val.h5" --set model.seq_len=32 --set model.width=32
  --set model.heads=2 --set model.layers=4 --set data.batch_size=4 --set optim.grad_accumulation=4
  --set optim.lr=0.003 --set schedule.warmup_steps=2 --set run.max_steps=8
  --set checkpoint.every_steps=4 --set eval.every_steps=4 --set eval.max_samples=24
  --set eval.batch_size=8 --set logging.every_steps=1 --set logging.progress=plain)

expect_exit 0 "$TMP/ref.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/ref"
expect_exit 0 "$TMP/pp2.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/pp2" --set parallel.pp=2 --set logging.trace.start_step=3 \
  --set logging.trace.steps=2
expect_grep "on dp=1 x pp=2 x tp=1" "$TMP/pp2.txt"
expect_grep "pipeline bubble \(pp=2 1f1b, 4 micro-batches\): measured [0-9.]+% of the schedule, predicted 20.0%" "$TMP/pp2.txt"

# curve_check RUN FIRST TOL: RUN's train and eval losses from step FIRST on match the reference's.
curve_check() {
  $PY - "$TMP/ref/metrics.jsonl" "$1/metrics.jsonl" "$2" "$3" <<'PY'
import json, sys
def records(path):
    return [json.loads(l) for l in open(path)]
ref, run = records(sys.argv[1]), records(sys.argv[2])
first, tol = int(sys.argv[3]), float(sys.argv[4])
for kind in ("train", "eval"):
    a = {r["step"]: r["loss"] for r in ref if r["type"] == kind and r["step"] >= first}
    b = {r["step"]: r["loss"] for r in run if r["type"] == kind and r["step"] >= first}
    assert sorted(a) == sorted(b), (kind, sorted(a), sorted(b))
    worst = max(abs(a[s] - b[s]) for s in a)
    print(f"{sys.argv[2]}: {kind} steps {min(a)}..{max(a)}, max |loss - reference| = {worst:.3g}")
    assert worst <= tol, (kind, worst, tol)
PY
}
curve_check "$TMP/pp2" 1 1e-6 || fail "pp=2 losses differ from one rank's"
for step in 00000004 00000008; do
  $PY "$HPCTRAIN_SOURCE_DIR/tests/e2e/train/compare_checkpoints.py" \
    "$TMP/ref/checkpoints/step_$step" "$TMP/pp2/checkpoints/step_$step" --tol 1e-6 >"$TMP/cmp-$step.txt" ||
    fail "pp=2 checkpoint step_$step: $(tail -3 "$TMP/cmp-$step.txt")"
done

$PY - "$TMP/pp2" <<'PY' || fail "pp=2 manifest, ledger or trace"
import json, sys
run = sys.argv[1]
m = json.load(open(f"{run}/checkpoints/step_00000008/manifest.json"))
assert m["grid"] == {"dp": 1, "tp": 1, "pp": 2} and m["world_size"] == 2, m["grid"]
ref = json.load(open(run.replace("/pp2", "/ref") + "/checkpoints/step_00000008/manifest.json"))
assert sorted(m["tensors"]) == sorted(ref["tensors"]), "tensor names differ from one rank's"
pl = json.load(open(f"{run}/ledger.json"))["pipeline"]
assert pl["pp"] == 2 and pl["schedule"] == "1f1b" and pl["micro_batches"] == 4, pl
assert abs(pl["predicted_bubble_fraction"] - 0.2) < 1e-12, pl
assert 0 < pl["bubble_fraction"] < 1 and len(pl["bubble_seconds_per_rank"]) == 2, pl
print(f"bubble measured {pl['bubble_fraction']:.3f} (per rank {pl['bubble_fraction_per_rank']}), predicted 0.2")
events = json.load(open(f"{run}/trace.json"))["traceEvents"]
lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
         if e.get("ph") == "M" and e["name"] == "thread_name"}
steps = [e for e in events if e.get("ph") == "X" and e["name"] == "step"]
assert len(steps) == 4, steps  # 2 steps x 2 ranks
def in_step(e):  # inside one of its rank's traced steps (the window also holds an evaluation)
    return any(s["pid"] == e["pid"] and s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]
               for s in steps)
for rank in (0, 1):
    lane = [t for (p, t), n in lanes.items() if p == rank and n == f"pipeline stage {rank}"]
    assert len(lane) == 1, (rank, lanes)
    for kind in ("forward", "backward"):
        got = sorted(e["args"]["micro_batch"] for e in events if e.get("ph") == "X"
                     and e["pid"] == rank and e["tid"] == lane[0] and e["name"] == kind
                     and in_step(e))
        assert got == [0, 0, 1, 1, 2, 2, 3, 3], (rank, kind, got)  # 4 micro-batches x 2 steps
    waits = [e for e in events if e.get("ph") == "X" and e["pid"] == rank and e["name"] == "pipeline wait"]
    assert waits, f"no pipeline wait on rank {rank}"
PY
expect_exit 0 "$TMP/summary.json" "$HPCTRAIN_BIN" -q trace summary "$TMP/pp2" --json
$PY - "$TMP/summary.json" <<'PY' || fail "trace summary of the pipeline"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 4, rows
for r in rows:
    parts = r["compute_ms"] + r["exposed_ms"] + r["data_wait_ms"] + r["bubble_ms"] + r["other_ms"]
    assert r["bubble_ms"] > 0 and abs(parts - r["step_ms"]) < 1e-6 * max(1, r["step_ms"]), r
PY

# The pp=2 checkpoint of step 4 resumed on other grids: the reference's losses of steps 5..8.
# resume NAME RANKS ARGS...: a run directory holding that checkpoint, trained to step 8.
resume() {
  local name=$1 ranks=$2
  shift 2
  mkdir -p "$TMP/$name/checkpoints"
  cp -r "$TMP/pp2/checkpoints/step_00000004" "$TMP/$name/checkpoints/"
  echo step_00000004 >"$TMP/$name/checkpoints/latest"
  expect_exit 0 "$TMP/$name.txt" mpirun_np "$ranks" "$HPCTRAIN_BIN" train "${common[@]}" \
    --set "run.dir=$TMP/$name" "$@"
  expect_grep "resumed from .*step_00000004 at step 4" "$TMP/$name.txt"
  curve_check "$TMP/$name" 5 1e-5 || fail "resumed at $name: losses differ from the reference's"
}
resume pp1 1
resume pp4 4 --set parallel.pp=4
resume dp2 2 --set data.batch_size=2  # dp = 2: the same 16 samples per step
resume tp2pp2 4 --set parallel.pp=2 --set parallel.tp=2
expect_grep "written on a dp=1 x pp=2 x tp=1 grid, this run is dp=1 x pp=4 x tp=1" "$TMP/pp4.txt"

# The plan predicts the bubble: pp = 4, 8 micro-batches: 3/11 with 1F1B, 3/19 interleaved V = 2.
plan=(-q plan "${common[@]}" --set model.layers=8 --set optim.grad_accumulation=8 --devices 4
  --samples 100000 --json)
expect_exit 0 "$TMP/plan.json" "$HPCTRAIN_BIN" "${plan[@]}" --set parallel.pp=4
expect_exit 0 "$TMP/plan-v2.json" "$HPCTRAIN_BIN" "${plan[@]}" --set parallel.pp=4 \
  --set parallel.pp_schedule=interleaved --set parallel.pp_virtual=2
$PY - "$TMP/plan.json" "$TMP/plan-v2.json" <<'PY' || fail "plan's pipeline bubble"
import json, sys
a, b = (json.load(open(p))["pipeline"] for p in sys.argv[1:])
assert abs(a["predicted_bubble_fraction"] - 3 / 11) < 1e-12 and a["stage_blocks"] == [2, 2, 2, 2], a
assert abs(b["predicted_bubble_fraction"] - 3 / 19) < 1e-12 and b["virtual_stages"] == 2, b
PY

# Shape errors, on every rank before any collective: exit 2 naming the fix.
expect_exit 2 "$TMP/mlp.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set model.name=mlp \
  --set model.in_features=32 --set parallel.pp=2 --set "run.dir=$TMP/bad-mlp"
expect_grep "model.name = mlp cannot be cut into pipeline stages \(parallel.pp = 2\)" "$TMP/mlp.txt"
expect_exit 2 "$TMP/stages.txt" mpirun_np 4 "$HPCTRAIN_BIN" train "${common[@]}" --set parallel.pp=4 \
  --set parallel.pp_schedule=interleaved --set parallel.pp_virtual=2 --set "run.dir=$TMP/bad-stages"
expect_grep "8 model stages but model.layers = 4 blocks.*use at most 4 stages" "$TMP/stages.txt"
expect_exit 2 "$TMP/micro.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set parallel.pp=2 \
  --set parallel.pp_schedule=interleaved --set parallel.pp_virtual=2 \
  --set optim.grad_accumulation=3 --set "run.dir=$TMP/bad-micro"
expect_grep "multiple of parallel.pp = 2" "$TMP/micro.txt"
expect_exit 2 "$TMP/world.txt" mpirun_np 3 "$HPCTRAIN_BIN" train "${common[@]}" --set parallel.pp=2 \
  --set "run.dir=$TMP/bad-world"
expect_grep "world size 3 is not divisible by parallel.pp x parallel.tp = 2 x 1 = 2" "$TMP/world.txt"

# A NaN loss on the last stage (rank 1) at step 3: every stage stops before the update (exit 6,
# one message), as at pp = 1 (tests/e2e/train/train_errors_test.sh).
expect_exit 6 "$TMP/nan.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set parallel.pp=2 \
  --set "run.dir=$TMP/nan" --set debug.nan_step=3 --set debug.nan_rank=1
# The last stage computes the loss and shares it: the message names its rank, not rank 0.
expect_grep "non-finite gradient norm at step 3 \(the loss was nan on rank 1, the lowest such rank\)" "$TMP/nan.txt"
[[ $(grep -c "error:" "$TMP/nan.txt") == 1 ]] || fail "NaN at pp = 2: not one error line: $(cat "$TMP/nan.txt")"
finish
