#!/usr/bin/env bash
# Manifests edited and resealed (issue 32, item 4): each passes the manifest's own checksum, so
# only the checks of its values can catch it. A resume naming it (2 ranks), `inspect checkpoint`
# and `eval` refuse each with exit 4 and one message naming the field, its value and what it must
# be; resume = auto skips each with that message and falls back to the previous checkpoint (one
# rule for every field, issue 44 item 6); the checkpoint is left as it was. A resealed non-UTF-8 config.yaml is exit 4 in `eval` and
# `inspect` alike (it is part of the checkpoint).
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
reseal=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/checkpoint/reseal_manifest.py")
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set eval.at_end=false
  --set data.batch_size=16 --set checkpoint.every_steps=10 --set eval.max_samples=200)
# 2 ranks x 16: a global batch of 32, so step 20 has consumed 640 samples, all in epoch 0.
expect_exit 0 "$TMP/base.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set run.max_steps=20 --set "run.dir=$TMP/base"

# Resealing without an edit keeps a valid checkpoint that resumes.
cp -r "$TMP/base" "$TMP/plain"
"${reseal[@]}" "$TMP/plain/checkpoints/step_00000020"
expect_exit 0 "$TMP/plain-inspect.txt" "$HPCTRAIN_BIN" inspect checkpoint "$TMP/plain/checkpoints/step_00000020"
expect_exit 0 "$TMP/plain.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set run.max_steps=22 \
  --set "run.dir=$TMP/plain" --resume "$TMP/plain/checkpoints/step_00000020"
expect_grep "resumed from .*step_00000020 at step 20" "$TMP/plain.txt"

one_error_line() {  # one_error_line WHAT LOG: 2 ranks printed one error and no launcher noise
  local n
  n=$(grep -c "error:" "$2")
  [[ $n == 1 ]] || fail "$1: $n error lines at 2 ranks, not 1"
  if grep -qE "ORTE_ERROR_LOG|MPI_ABORT|unexpected failure|json.exception|outside the training" "$2"; then
    fail "$1: launcher noise or a raw exception: $(cat "$2")"
  fi
}

# NAME|EDIT (python on the manifest m)|what the message says|does eval check it
cases=(
  "world0|m['world_size'] = 0|world_size is 0 but the grid \{\"dp\":2,\"tp\":1\} says 2 ranks|eval"
  "world3|m['world_size'] = 3|world_size is 3 but the grid \{\"dp\":2,\"tp\":1\} says 2 ranks|eval"
  "dp0|m['grid']['dp'] = 0|grid.dp is 0 but every grid size must be a positive integer|eval"
  "tp7|m['grid'] = {'dp': 2, 'tp': 7}|world_size is 2 but the grid \{\"dp\":2,\"tp\":7\} says 14 ranks|eval"
  "savedtp|m['tensors']['model/fc1.weight']['saved_tp'] = 4|tensors\['model/fc1.weight'\].saved_tp is 4 but the grid says tp=1|eval"
  "rngranks|m['rng']['ranks'] = 3|rng.ranks is 3 but it must be world_size, 2|eval"
  "consumed|m['consumed_samples'] = 10**18|trainer_state.consumed_samples is 640 but the manifest's consumed_samples is 1000000000000000000|"
  "consumed2|m['consumed_samples'] = m['trainer_state']['consumed_samples'] = 10**18|trainer_state.consumed_samples is 1000000000000000000 but epoch 0 of 60000 samples, 640 into it, allows at most 0 x 60000 \+ 640|"
  "rng|m['rng'] = None|rng is null but .train. records the RNG state of each of the 2 ranks|"
  "lr|m['trainer_state']['lr'] = 'fast'|trainer_state.lr is \"fast\" but it must be a finite non-negative number|"
  "batch0|m['trainer_state']['global_batch'] = 0|trainer_state.global_batch is 0 but it must be a positive integer|"
  "epoch|m['epoch'] = 99|trainer_state.epoch is 0 but the manifest's epoch is 99|"
  "epoch2|m['epoch'] = m['trainer_state']['epoch'] = 99|trainer_state.epoch is 99 but with 640 samples into this epoch and 640 consumed in all, at most 0 epochs can have ended|"
  "step|m['trainer_state']['global_step'] = 7|trainer_state.global_step is 7 but every step takes one global batch|"
  "offset|m['trainer_state']['offset_in_epoch'] = 10**9|trainer_state.offset_in_epoch is 1000000000 but an epoch has 60000 samples|"
)
for spec in "${cases[@]}"; do
  IFS='|' read -r name edit message eval_checks <<<"$spec"
  cp -r "$TMP/base" "$TMP/$name"
  ckpt=$TMP/$name/checkpoints/step_00000020
  "${reseal[@]}" "$ckpt" "$edit" || fail "$name: resealing failed"
  before=$(cd "$ckpt" && sha1sum ./*)
  expect_exit 4 "$TMP/$name-train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
    --set run.max_steps=30 --set "run.dir=$TMP/$name" --resume "$ckpt"
  expect_grep "$message" "$TMP/$name-train.txt"
  one_error_line "$name train" "$TMP/$name-train.txt"
  expect_exit 4 "$TMP/$name-inspect.txt" "$HPCTRAIN_BIN" inspect checkpoint "$ckpt"
  expect_grep "$message" "$TMP/$name-inspect.txt"
  if [[ -n $eval_checks ]]; then
    expect_exit 4 "$TMP/$name-eval.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
    expect_grep "$message" "$TMP/$name-eval.txt"
    one_error_line "$name eval" "$TMP/$name-eval.txt"
  fi
  # resume = auto skips it with the reason and falls back to step 10, whichever check found it
  # (issue 44, item 6). The RNG state is required only on the world that saved it: 2 ranks.
  ranks=1
  [[ $name == rng ]] && ranks=2
  expect_exit 0 "$TMP/$name-auto.txt" mpirun_np "$ranks" "$HPCTRAIN_BIN" train "${common[@]}" \
    --set run.max_steps=12 --set "run.dir=$TMP/$name"
  expect_grep "warning: checkpoint .*step_00000020 \(named by latest\): .*$message" "$TMP/$name-auto.txt"
  expect_grep "resumed from .*step_00000010 at step 10" "$TMP/$name-auto.txt"
  [[ $(cd "$ckpt" && sha1sum ./*) == "$before" ]] || fail "$name: the checkpoint was changed"
done

# A non-UTF-8 config.yaml with its checksum and the manifest resealed: part of the checkpoint.
cp -r "$TMP/base" "$TMP/utf8"
ckpt=$TMP/utf8/checkpoints/step_00000020
"${reseal[@]}" "$ckpt" "put('config.yaml', open('$ckpt/config.yaml', 'rb').read() + b'# caf\\xe9\\n')"
expect_exit 4 "$TMP/utf8-eval.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
expect_grep "its config.yaml does not parse: .*byte 0xe9 at line [0-9]+ is not UTF-8" "$TMP/utf8-eval.txt"
one_error_line "utf8 eval" "$TMP/utf8-eval.txt"
expect_exit 4 "$TMP/utf8-inspect.txt" "$HPCTRAIN_BIN" inspect checkpoint "$ckpt"
expect_grep "its config.yaml does not parse: .*byte 0xe9 at line [0-9]+ is not UTF-8" "$TMP/utf8-inspect.txt"
finish
