#!/usr/bin/env bash
# Hostile configs, run directories, checkpoints and timing for `hpctrain train` (issue 18). Each
# case ends with its documented exit code and a message naming the thing, never exit 1 with a
# library message or a C++ backtrace, and never a hang:
#  - duplicate keys and sections; a huge --set value (the message stays short);
#  - a model input size that does not fit the data (checked before the model is built), a model
#    too large to allocate;
#  - run.dir that cannot be created (a file in the way, a name too long, a read-only mount);
#    ledger.json that cannot be written (warned, exit 1);
#  - metrics.jsonl after a resume from an earlier step: no step recorded twice;
#  - a stop signal while blocked before the step loop (exit 75 at once);
#  - resume: a garbage `latest` is warned about, a corrupted newest checkpoint is skipped with a
#    warning for the previous one, an edited-and-resealed manifest (dtype, trainer_state) is
#    exit 4 naming the field.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
reseal=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/checkpoint/reseal_manifest.py")
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set eval.at_end=false
  --set run.max_steps=20)
no_trace() {  # no_trace LOG: nothing of a C++ exception or a library's raw message reached the user
  if grep -Eq "unexpected failure|Exception raised from|frame #|std::bad_alloc|filesystem error|\[json\.exception" "$1"; then
    fail "$1: a raw exception reached the user: $(grep -Em1 "unexpected failure|Exception raised|frame #|bad_alloc|filesystem error|json.exception" "$1")"
  fi
}

# Duplicate keys: yaml-cpp took the first value, PyYAML the last.
cat >"$TMP/dup.yaml" <<YAML
run:
  max_steps: 5
optim:
  name: adam
  lr: 0.001
  lr: 0.5
YAML
expect_exit 2 "$TMP/dup.txt" "$HPCTRAIN_BIN" train -c "$TMP/dup.yaml" --set "run.dir=$TMP/dup"
expect_grep "key 'optim.lr' is given twice, at line 5 and at line 6" "$TMP/dup.txt"
printf 'optim:\n  lr: 0.001\nrun:\n  max_steps: 5\noptim:\n  lr: 0.5\n' >"$TMP/dupsec.yaml"
expect_exit 2 "$TMP/dupsec.txt" "$HPCTRAIN_BIN" train -c "$TMP/dupsec.yaml" --set "run.dir=$TMP/dup"
expect_grep "section 'optim' is given twice, at line 1 and at line 5" "$TMP/dupsec.txt"
[[ ! -e $TMP/dup ]] || fail "a config with duplicate keys created the run directory"

# Values of the wrong YAML type (issue 32): a float (even a whole one) or null for an integer key.
expect_exit 2 "$TMP/float-int.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/types" \
  --set 'checkpoint.every_steps=!!float 3'
expect_grep "checkpoint.every_steps = !!float '3': expected an integer" "$TMP/float-int.txt"
sed 's/^  batch_size: 500$/  batch_size: ~/' "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" >"$TMP/null.yaml"
grep -q 'batch_size: ~' "$TMP/null.yaml" || fail "tiny-mlp.yaml has no eval.batch_size: 500 to replace"
expect_exit 2 "$TMP/null.txt" "$HPCTRAIN_BIN" train -c "$TMP/null.yaml" --set "data.train=$data/train.h5" \
  --set "data.val=$data/test.h5" --set "run.dir=$TMP/types"
expect_grep "eval.batch_size = null: expected an integer" "$TMP/null.txt"
[[ ! -e $TMP/types ]] || fail "a config with a value of the wrong type created the run directory"

# A 100 KB --set value (the kernel caps one argument at 128 KiB): the error names the key, and
# the line stays short.
big=$(head -c 100000 /dev/zero | tr '\0' x)
expect_exit 2 "$TMP/bigset.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/r" \
  --set "data.batch_size=$big"
expect_grep "data.batch_size = 'x+\.\.\.\(100000 characters\)\.\.\.x+': expected an integer" "$TMP/bigset.txt"
longest=$(awk '{ if (length($0) > n) n = length($0) } END { print n + 0 }' "$TMP/bigset.txt")
((longest < 2000)) || fail "a 100 KB --set value made a $longest-character line"

# Sizes: the input size is checked against the data before the model is built; a model that
# cannot be allocated is a config error naming the model section.
expect_exit 3 "$TMP/infeat.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/r" --set model.in_features=100000000
expect_grep "samples of shape 1 x 28 x 28 \(784 values\) do not fit model.in_features = 100000000: set model.in_features = 784" "$TMP/infeat.txt"
no_trace "$TMP/infeat.txt"
expect_exit 2 "$TMP/hidden.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/r" \
  --set "model.hidden=[100000000000]"
expect_grep "model.name = mlp: (out of memory while allocating the model's parameters|building the model failed)" "$TMP/hidden.txt"
no_trace "$TMP/hidden.txt"

# run.dir that cannot be created: exit 2 naming run.dir and the cause.
touch "$TMP/afile"
expect_exit 2 "$TMP/infile.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/afile/run"
expect_grep "run.dir = $TMP/afile/run cannot be used: Not a directory \(errno 20\): a file \(not a directory\) is in the way" "$TMP/infile.txt"
no_trace "$TMP/infile.txt"
expect_exit 2 "$TMP/isfile.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/afile"
expect_grep "run.dir = $TMP/afile cannot be used: Not a directory" "$TMP/isfile.txt"
long_name=$(head -c 300 /dev/zero | tr '\0' n)
expect_exit 2 "$TMP/toolong.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/$long_name"
expect_grep "cannot be used: File name too long \(errno 36\)" "$TMP/toolong.txt"
no_trace "$TMP/toolong.txt"
mkdir -p "$TMP/ro"
if mount -t tmpfs -o ro,size=1m tmpfs "$TMP/ro" 2>"$TMP/mount.txt"; then
  expect_exit 2 "$TMP/ro.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/ro/run"
  expect_grep "run.dir = $TMP/ro/run cannot be used: Read-only file system \(errno 30\)" "$TMP/ro.txt"
  umount "$TMP/ro"
else
  echo "note: read-only run.dir case skipped: cannot mount a read-only tmpfs here: $(tr '\n' ' ' <"$TMP/mount.txt")"
fi

# ledger.json that cannot be written (a directory in its place): warned, and the exit is not 0.
mkdir -p "$TMP/ledger/ledger.json/x"
expect_exit 1 "$TMP/ledger.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/ledger"
expect_grep "warning: the compute ledger was not written: cannot rename .*ledger.json.tmp to .*ledger.json" "$TMP/ledger.txt"
expect_grep "stopped after step 20: completed; ledger.json not written" "$TMP/ledger.txt"

# metrics.jsonl after a resume from an earlier step: the run is killed (SIGKILL) during its third
# save (step 30), after logging steps 21..30; the resume from step 20 logs them again. The file
# must hold each step once, the dropped records kept aside.
mrun=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=10 --set eval.max_samples=200
  --set run.max_steps=40 --set checkpoint.every_steps=10 --set logging.every_steps=5
  --set checkpoint.background=false --set "run.dir=$TMP/metrics")
HPCTRAIN_TEST_CHECKPOINT_CRASH=after-create:3 timeout 120 "$HPCTRAIN_BIN" train "${mrun[@]}" \
  >"$TMP/killed.txt" 2>&1
[[ -d $TMP/metrics/checkpoints/step_00000020 && ! -d $TMP/metrics/checkpoints/step_00000030 ]] ||
  fail "the killed run should have committed step 20 and not step 30: $(ls "$TMP/metrics/checkpoints")"
grep -q '"step":30' "$TMP/metrics/metrics.jsonl" || fail "the killed run should have logged step 30"
expect_exit 0 "$TMP/resumed.txt" "$HPCTRAIN_BIN" train "${mrun[@]}"
expect_grep "resumed from .*step_00000020 at step 20" "$TMP/resumed.txt"
expect_grep "metrics.jsonl: moved [0-9]+ record\(s\) of steps after 20" "$TMP/resumed.txt"
$PY - "$TMP/metrics/metrics.jsonl" <<'PY' || fail "metrics.jsonl holds duplicates after the resume"
import collections, json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
seen = collections.Counter((r["type"], r["step"]) for r in records if r["type"] in ("train", "eval"))
dups = {k: n for k, n in seen.items() if n > 1}
steps = sorted(s for (t, s) in seen if t == "train")
assert not dups, f"duplicate records: {dups}"
assert steps == list(range(5, 45, 5)), f"train records of steps {steps}"
PY
[[ -s $TMP/metrics/metrics.jsonl.superseded ]] || fail "the dropped records were not kept aside"

# A stop signal while blocked in a system call before the step loop: the process ends at once
# with 75, instead of running on past the signal. hpctrain refuses FIFOs in its own files, so a
# plugin whose constructor opens one (open(2) blocks until a writer appears) does the blocking.
mkdir -p "$TMP/blocked"
mkfifo "$TMP/blocked/fifo"
printf '#include <fcntl.h>\n__attribute__((constructor)) static void block(void) { open("%s", O_RDONLY); }\n' \
  "$TMP/blocked/fifo" >"$TMP/blocked/block.c"
cc -shared -fPIC -o "$TMP/blocked/libblock.so" "$TMP/blocked/block.c" || fail "cannot build the blocking plugin"
timeout --preserve-status -k 20 -s TERM 8 "$HPCTRAIN_BIN" --plugin "$TMP/blocked/libblock.so" train \
  "${common[@]}" --set "run.dir=$TMP/blocked" >"$TMP/blocked.txt" 2>&1
got=$?
[[ $got == 75 ]] || fail "SIGTERM while blocked before the loop: exit $got, expected 75"
expect_grep "SIGTERM received outside the training step loop: nothing to save, exiting now with 75" "$TMP/blocked.txt"

# Resume choices. A run with checkpoints at steps 10 and 20, copied for each case.
expect_exit 0 "$TMP/base.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set checkpoint.every_steps=10 \
  --set "run.dir=$TMP/base"
resume_case() {  # resume_case NAME: a fresh copy of the base run in $TMP/NAME
  rm -rf "${TMP:?}/$1" && cp -r "$TMP/base" "$TMP/$1"
}
more=(--set run.max_steps=30 --set checkpoint.every_steps=10)

# `latest` holding garbage, or a path out of the run: warned, then the newest that verifies.
resume_case latest
printf '../../etc\n' >"$TMP/latest/checkpoints/latest"
expect_exit 0 "$TMP/latest.txt" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" --set "run.dir=$TMP/latest"
expect_grep "warning: checkpoint .*checkpoints/latest holds '\.\./\.\./etc', not the name of a checkpoint" "$TMP/latest.txt"
expect_grep "resumed from .*step_00000020 at step 20" "$TMP/latest.txt"

# The newest checkpoint corrupted (one byte of model.h5): a warning, and the previous one.
resume_case corrupt
$PY - "$TMP/corrupt/checkpoints/step_00000020/model.h5" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(os.path.getsize(sys.argv[1]) - 64)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))
PY
expect_exit 0 "$TMP/corrupt.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" \
  --set data.batch_size=16 --set "run.dir=$TMP/corrupt"
expect_grep "warning: checkpoint .*step_00000020 \(named by latest\): model.h5: checksum mismatch.*falling back" "$TMP/corrupt.txt"
expect_grep "resumed from .*step_00000010 at step 10" "$TMP/corrupt.txt"
expect_grep "stopped after step 30: completed" "$TMP/corrupt.txt"

# Manifests edited and resealed: each passes the manifest's own checksum and must still be
# refused, naming the field. First, resealing without an edit keeps a valid checkpoint.
resume_case sealed
"${reseal[@]}" "$TMP/sealed/checkpoints/step_00000020"
expect_exit 0 "$TMP/sealed.txt" "$HPCTRAIN_BIN" inspect checkpoint "$TMP/sealed/checkpoints/step_00000020"
for edit in float64 int8 quaternion null-state empty-state; do
  resume_case "m-$edit"
  ckpt=$TMP/m-$edit/checkpoints/step_00000020
  # shellcheck disable=SC2016  # Python, not shell
  case $edit in
    float64 | int8 | quaternion) "${reseal[@]}" "$ckpt" "m['tensors']['model/fc1.weight']['dtype'] = '$edit'" ;;
    null-state) "${reseal[@]}" "$ckpt" "m['trainer_state'] = None" ;;
    empty-state) "${reseal[@]}" "$ckpt" "m['trainer_state'] = {}" ;;
  esac
  # resume = auto skips it for step 10 with a warning; naming it explicitly is exit 4.
  expect_exit 4 "$TMP/m-$edit.txt" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" \
    --set "run.dir=$TMP/m-$edit" --resume "$ckpt"
  case $edit in
    float64 | int8) expect_grep "model.h5: tensor 'model/fc1.weight' holds float32 but the manifest says dtype $edit" "$TMP/m-$edit.txt" ;;
    quaternion) expect_grep "tensor 'model/fc1.weight' has dtype 'quaternion', which is none of the dtypes checkpoints store" "$TMP/m-$edit.txt" ;;
    null-state) expect_grep "\"trainer_state\" should be an object" "$TMP/m-$edit.txt" ;;
    empty-state) expect_grep "trainer_state.step should be a non-negative integer" "$TMP/m-$edit.txt" ;;
  esac
  no_trace "$TMP/m-$edit.txt"
done
finish
