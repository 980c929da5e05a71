#!/usr/bin/env bash
# Dynamic loss scaling (issue 12), on CPU with float32 arithmetic: the scaler's path is the fp16
# one (scale the loss, unscale the gradients, agree on overflow, skip, back off, grow), and power-
# of-two scales make it exact, so without overflow it must equal the unscaled run bit for bit.
# fp16 itself needs CUDA: on CPU it is refused with exit 2. Also: the GPU's staged input path.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set eval.at_end=false
  --set run.max_steps=12 --set logging.every_steps=1 --set optim.grad_clip=0.5)
scaled=(--set optim.loss_scale=dynamic --set optim.loss_scale_init=1024
  --set optim.loss_scale_window=4)

expect_exit 2 "$TMP/fp16.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/fp16" --set run.precision=fp16
expect_grep "run.precision = fp16 needs a CUDA device: LibTorch's CPU autocast has bfloat16 only" \
  "$TMP/fp16.txt"
[[ ! -e $TMP/fp16/checkpoints ]] || fail "the refused fp16 run wrote checkpoints"

expect_exit 0 "$TMP/plain.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/plain"
expect_exit 0 "$TMP/scaled.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" "${scaled[@]}" \
  --set "run.dir=$TMP/scaled"
# Overflow after the all-reduce on one rank only (rank 1 here, rank 0 in the twin run): every
# rank must skip step index 5 (logged as step 6), or the ranks' parameters part ways.
for r in 0 1; do
  expect_exit 0 "$TMP/over$r.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" "${scaled[@]}" \
    --set "run.dir=$TMP/over$r" --set debug.overflow_step=5 --set debug.overflow_rank=$r
done
# Stopped at step 7 and resumed: the scaler's state comes back from the checkpoint.
expect_exit 75 "$TMP/stop.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" "${scaled[@]}" \
  --set "run.dir=$TMP/resumed" --set debug.overflow_step=5 --set debug.overflow_rank=1 \
  --set debug.stop_step=7
expect_exit 0 "$TMP/resume.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" "${scaled[@]}" \
  --set "run.dir=$TMP/resumed" --set debug.overflow_step=5 --set debug.overflow_rank=1
expect_grep "step 6 .*loss scale 1024 \(1 skipped\)" "$TMP/over1.txt"
# The GPU input path on CPU: batches handed over by the reader thread in a fresh buffer (pinned
# memory on a GPU) and copied non-blocking: the training must not change at all.
expect_exit 0 "$TMP/staged.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/staged" --set debug.stage_inputs=true

/usr/bin/python3 - "$TMP" "$(dirname "$0")" <<'PY' || fail "loss scaling results differ (see above)"
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import run_records
from run_records import same
def records(run):
    return run_records.records(f"{tmp}/{run}")
def params(run):
    return run_records.params(f"{tmp}/{run}", 12)
bad = []
plain, scaled = records("plain"), records("scaled")
if [plain[s]["loss"] for s in plain] != [scaled[s]["loss"] for s in scaled]:
    bad.append("scaled fp32 losses differ from unscaled ones")
if [plain[s]["grad_norm"] for s in plain] != [scaled[s]["grad_norm"] for s in scaled]:
    bad.append("scaled fp32 gradient norms differ from unscaled ones")
staged = records("staged")
if [plain[s]["loss"] for s in plain] != [staged[s]["loss"] for s in staged] or not same(params("plain"), params("staged")):
    bad.append("staged input batches (the GPU hand-over path) changed the training")
if "loss_scale" in plain[1]:
    bad.append("a run without loss scaling records a loss scale")
want = {s: 1024 * 2 ** (s // 4) for s in range(1, 13)}
got = {s: scaled[s]["loss_scale"] for s in scaled}
if got != want:
    bad.append(f"loss scale by step {got}, expected growth every 4 good steps {want}")
if not same(params("plain"), params("scaled")):
    bad.append("scaled fp32 final parameters differ from unscaled ones")
# Overflow at step index 5: 4 good steps grew 1024 -> 2048, the overflow halves it to 1024; then
# the window restarts: steps 7-10 grow it to 2048 at step 10.
over = {r: records(f"over{r}") for r in (0, 1)}
for r in (0, 1):
    scales = {s: over[r][s]["loss_scale"] for s in over[r]}
    want = {1: 1024, 2: 1024, 3: 1024, 4: 2048, 5: 2048, 6: 1024, 7: 1024, 8: 1024, 9: 1024,
            10: 2048, 11: 2048, 12: 2048}
    if scales != want:
        bad.append(f"overflow on rank {r}: loss scale by step {scales}, expected {want}")
    skipped = [s for s in over[r] if over[r][s]["skipped_steps"]]
    if skipped != [6]:
        bad.append(f"overflow on rank {r}: skipped steps logged at {skipped}, expected [6]")
    ledger = json.load(open(f"{tmp}/over{r}/ledger.json"))
    if ledger["skipped_steps"] != 1 or ledger["loss_scale"] != 2048 or ledger["precision"] != "fp32":
        bad.append(f"overflow on rank {r}: ledger {ledger['skipped_steps']} skipped, scale {ledger.get('loss_scale')}")
if not same(params("over0"), params("over1")):
    bad.append("an overflow seen by rank 1 only did not skip the step on rank 0 as on rank 1")
if same(params("over1"), params("scaled")):
    bad.append("the overflowed step was not skipped (parameters equal the run without overflow)")
resumed = records("resumed")
if {s: resumed[s]["loss_scale"] for s in resumed} != {s: over[1][s]["loss_scale"] for s in over[1]}:
    bad.append(f"resumed loss scales {[resumed[s]['loss_scale'] for s in resumed]} differ from the uninterrupted run's")
if [resumed[s]["loss"] for s in resumed] != [over[1][s]["loss"] for s in over[1]]:
    bad.append("resumed losses differ from the uninterrupted run's")
if not same(params("resumed"), params("over1")):
    bad.append("resumed final parameters differ from the uninterrupted run's")
st = json.load(open(f"{tmp}/resumed/checkpoints/step_00000007/manifest.json"))["trainer_state"]["loss_scaler"]
if st != {"scale": 1024.0, "good_steps": 1, "skipped": 1}:
    bad.append(f"the stop checkpoint's scaler state is {st}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
finish
