#!/usr/bin/env bash
# A FIFO in place of any file hpctrain opens from a run directory, a checkpoint or a data path
# (issue 32): each is refused at once, without being opened, with the exit code of its kind
# (4 checkpoint, 3 data, 2 config, model or run-directory file) and a message naming it. Before,
# open(2) of a FIFO blocked until `timeout` ended the process (exit 124 / 75). Every command runs
# under a short `timeout`, so a regression fails here instead of hanging the suite.
source "$(dirname "$0")/../lib.sh"
fork_server_start  # its one-process commands as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set eval.at_end=false
  --set eval.max_samples=200 --set logging.every_steps=5)

# bounded CODE LOG CMD...: CMD ends with CODE within 30 s (a blocked open would run into the
# timeout: SIGTERM there gives 75 or 124, never the expected code).
bounded() {
  local want=$1 log=$2
  shift 2
  forked_argv "$@"
  expect_exit "$want" "$log" timeout -k 5 30 "${FORKED_ARGV[@]}"
}
# shellcheck disable=SC2206  # HPCTRAIN_MPIEXEC holds the launcher and its flags
mpirun2=($HPCTRAIN_MPIEXEC -np 2)
fifo_in_place() {  # fifo_in_place PATH: PATH becomes a FIFO nobody writes to
  rm -rf "$1" && mkfifo "$1"
}

# A run with checkpoints at steps 5 and 10 and an offline evaluation, copied for each case.
expect_exit 0 "$TMP/base.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set run.max_steps=10 \
  --set checkpoint.every_steps=5 --set "run.dir=$TMP/base" || finish
expect_exit 0 "$TMP/base-eval.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/base/checkpoints/step_00000005"
fresh() {  # fresh NAME: a copy of the base run in $TMP/NAME; prints its step-10 checkpoint
  rm -rf "${TMP:?}/$1" && cp -r "$TMP/base" "$TMP/$1"
  echo "$TMP/$1/checkpoints/step_00000010"
}
more=(--set run.max_steps=15 --set checkpoint.every_steps=5)

# --- Checkpoint files: exit 4 naming the file -----------------------------------------------
ckpt=$(fresh manifest)
fifo_in_place "$ckpt/manifest.json"
fifo_said="checkpoint file '$ckpt/manifest.json' is not a regular file \(a FIFO\)"
bounded 4 "$TMP/m-inspect.txt" "$HPCTRAIN_BIN" inspect checkpoint "$ckpt"
expect_grep "$fifo_said" "$TMP/m-inspect.txt"
bounded 4 "$TMP/m-inspect-run.txt" "$HPCTRAIN_BIN" inspect checkpoint "$TMP/manifest"
expect_grep "step_00000010 +unreadable manifest: $fifo_said" "$TMP/m-inspect-run.txt"
expect_grep "step_00000005 +step 5," "$TMP/m-inspect-run.txt"
bounded 4 "$TMP/m-eval.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
expect_grep "$fifo_said" "$TMP/m-eval.txt"
bounded 4 "$TMP/m-eval-all.txt" "${mpirun2[@]}" "$HPCTRAIN_BIN" eval --checkpoints "$TMP/manifest"
expect_grep "$fifo_said" "$TMP/m-eval-all.txt"
# Resuming: `auto` warns and falls back to step 5; naming the checkpoint is exit 4.
bounded 4 "$TMP/m-resume-named.txt" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" \
  --set "run.dir=$TMP/manifest" --resume "$ckpt"
expect_grep "$fifo_said" "$TMP/m-resume-named.txt"
bounded 0 "$TMP/m-resume.txt" "${mpirun2[@]}" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" \
  --set data.batch_size=16 --set "run.dir=$TMP/manifest"
expect_grep "warning: checkpoint .*step_00000010 \(named by latest\): $fifo_said" "$TMP/m-resume.txt"
expect_grep "resumed from .*step_00000005 at step 5" "$TMP/m-resume.txt"
# --keep-global-batch reads the manifest before the trainer does.
ckpt=$(fresh manifest-keep)
fifo_in_place "$ckpt/manifest.json"
bounded 0 "$TMP/m-keep.txt" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" \
  --set "run.dir=$TMP/manifest-keep" --keep-global-batch
expect_grep "resumed from .*step_00000005 at step 5" "$TMP/m-keep.txt"

# `latest` a FIFO: warned and ignored, the newest checkpoint that verifies is used.
fresh latest >/dev/null
fifo_in_place "$TMP/latest/checkpoints/latest"
bounded 0 "$TMP/latest.txt" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" --set "run.dir=$TMP/latest"
expect_grep "checkpoints/latest holds '\(a FIFO, not a regular file\)', not the name of a checkpoint" "$TMP/latest.txt"
expect_grep "resumed from .*step_00000010 at step 10" "$TMP/latest.txt"
fresh latest-eval >/dev/null
fifo_in_place "$TMP/latest-eval/checkpoints/latest"
bounded 0 "$TMP/latest-eval.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/latest-eval" --force

# Tensor files, the RNG file and the stored config.
for file in model.h5 optimizer.h5 rng.h5 config.yaml; do
  ckpt=$(fresh "f-$file")
  fifo_in_place "$ckpt/$file"
  said="$file: not a regular file \(a FIFO; the manifest lists a file of [0-9]+ bytes\)"
  bounded 4 "$TMP/f-$file-inspect.txt" "$HPCTRAIN_BIN" inspect checkpoint "$ckpt"
  expect_grep "$said" "$TMP/f-$file-inspect.txt"
  bounded 4 "$TMP/f-$file-train.txt" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" \
    --set "run.dir=$TMP/f-$file" --resume "$ckpt"
  expect_grep "$said" "$TMP/f-$file-train.txt"
  bounded 4 "$TMP/f-$file-eval.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
  expect_grep "$said" "$TMP/f-$file-eval.txt"
done

# --- Run-directory files: exit 2 naming the file ------------------------------------------
fresh metrics >/dev/null
fifo_in_place "$TMP/metrics/metrics.jsonl"
bounded 2 "$TMP/metrics.txt" "$HPCTRAIN_BIN" train "${common[@]}" "${more[@]}" --set "run.dir=$TMP/metrics"
expect_grep "metrics file '$TMP/metrics/metrics.jsonl' is not a regular file \(a FIFO\)" "$TMP/metrics.txt"
# The offline evaluation reads metrics.jsonl for the training cost: a FIFO is skipped.
bounded 0 "$TMP/metrics-eval.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/metrics/checkpoints/step_00000010"
bounded 2 "$TMP/metrics-report.txt" "$HPCTRAIN_BIN" report "$TMP/metrics"
expect_grep "run file '$TMP/metrics/metrics.jsonl' is not a regular file \(a FIFO\)" "$TMP/metrics-report.txt"

fresh results >/dev/null
fifo_in_place "$TMP/results/eval/results.jsonl"
bounded 2 "$TMP/results.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/results/checkpoints/step_00000010"
expect_grep "results file '$TMP/results/eval/results.jsonl' is not a regular file \(a FIFO\)" "$TMP/results.txt"
fresh step-result >/dev/null
fifo_in_place "$TMP/step-result/eval/step_00000005.json"
bounded 2 "$TMP/step-result.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/step-result/checkpoints/step_00000005"
expect_grep "results file '$TMP/step-result/eval/step_00000005.json' is not a regular file \(a FIFO\)" "$TMP/step-result.txt"

fresh ledger >/dev/null
fifo_in_place "$TMP/ledger/ledger.json"
bounded 2 "$TMP/ledger-report.txt" "$HPCTRAIN_BIN" report "$TMP/ledger"
expect_grep "run file '$TMP/ledger/ledger.json' is not a regular file \(a FIFO\)" "$TMP/ledger-report.txt"
bounded 2 "$TMP/ledger-plan.txt" "$HPCTRAIN_BIN" plan -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" \
  --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --calibrate "$TMP/ledger"
expect_grep "ledger.json' is not a regular file \(a FIFO\)" "$TMP/ledger-plan.txt"
mkfifo "$TMP/ledger/trace.json"
bounded 2 "$TMP/trace.txt" "$HPCTRAIN_BIN" trace summary "$TMP/ledger"
expect_grep "trace file '$TMP/ledger/trace.json' is not a regular file \(a FIFO\)" "$TMP/trace.txt"

# --- Config, model and plugin files: exit 2 ----------------------------------------------
mkfifo "$TMP/config.yaml" "$TMP/model.pt" "$TMP/plugin.so"
bounded 2 "$TMP/config.txt" "$HPCTRAIN_BIN" train -c "$TMP/config.yaml"
expect_grep "config file '$TMP/config.yaml' is not a regular file \(a FIFO\)" "$TMP/config.txt"
bounded 2 "$TMP/model.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/tests/e2e/model/torchscript.yaml" \
  --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set "model.file=$TMP/model.pt" \
  --set "run.dir=$TMP/ts"
expect_grep "model.file.*is not a regular file \(a FIFO\)" "$TMP/model.txt"
bounded 2 "$TMP/plugin.txt" "$HPCTRAIN_BIN" --plugin "$TMP/plugin.so" env
expect_grep "\-\-plugin = $TMP/plugin.so is not a regular file \(a FIFO\)" "$TMP/plugin.txt"

# --- Data files: exit 3 ------------------------------------------------------------------
mkfifo "$TMP/train.h5"
bounded 3 "$TMP/data.txt" "${mpirun2[@]}" "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "data.train=$TMP/train.h5" --set "run.dir=$TMP/data"
expect_grep "is not a regular file \(a FIFO\)" "$TMP/data.txt"
mkdir -p "$TMP/idx"
mkfifo "$TMP/idx/train-images-idx3-ubyte.gz"
bounded 3 "$TMP/idx.txt" "$HPCTRAIN_BIN" prepare fashion-mnist --from "$TMP/idx" --out "$TMP/idx-out"
expect_grep "IDX file '$TMP/idx/train-images-idx3-ubyte.gz' is not a regular file \(a FIFO\)" "$TMP/idx.txt"
mkfifo "$TMP/text.txt"
bounded 3 "$TMP/text-out.txt" "$HPCTRAIN_BIN" prepare text --in "$TMP/text.txt" --out "$TMP/text-out"
expect_grep "text file '$TMP/text.txt' is not a regular file \(a FIFO\)" "$TMP/text-out.txt"
finish
