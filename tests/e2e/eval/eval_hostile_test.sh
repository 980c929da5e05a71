#!/usr/bin/env bash
# Hostile checkpoints for `hpctrain eval` (issue 18): the checkpoint's stored config is verified
# against the manifest before it is parsed, so a config.yaml with a non-UTF-8 byte, pointing the
# split at /dev/null, or replaced by a FIFO is a damaged checkpoint (exit 4), not a JSON library
# message (exit 1), an unknown split (exit 2) or a hang. An edited-and-resealed manifest (dtype)
# is refused too, and a stop signal ends an evaluation command at once with 75.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # its commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
run=$TMP/run
reseal=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/checkpoint/reseal_manifest.py")
expect_exit 0 "$TMP/train.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" \
  --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set "run.dir=$run" \
  --set run.max_steps=10 --set eval.every_steps=0 --set eval.at_end=false \
  --set checkpoint.every_steps=10 --set eval.max_samples=500

damaged() {  # damaged NAME: a copy of the run; prints its checkpoint directory
  cp -r "$run" "$TMP/$1"
  echo "$TMP/$1/checkpoints/step_00000010"
}
ckpt=$(damaged utf8)
printf '# caf\xe9\n' >>"$ckpt/config.yaml"
expect_exit 4 "$TMP/utf8.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
expect_grep "does not verify: config.yaml: (size|checksum)" "$TMP/utf8.txt"
ckpt=$(damaged devnull)
sed -i "s|^  val: .*|  val: /dev/null|" "$ckpt/config.yaml"
expect_exit 4 "$TMP/devnull.txt" timeout 60 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
expect_grep "does not verify: config.yaml: (size|checksum)" "$TMP/devnull.txt"
ckpt=$(damaged fifo)
rm "$ckpt/config.yaml" && mkfifo "$ckpt/config.yaml"
expect_exit 4 "$TMP/fifo.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
expect_grep "does not verify: config.yaml: not a regular file" "$TMP/fifo.txt"
for log in utf8 devnull fifo; do
  if grep -Eq "json.exception|unexpected failure|unknown split" "$TMP/$log.txt"; then
    fail "$log: the damaged config was parsed before the checkpoint was verified"
  fi
done

# A config that is not UTF-8 where no manifest covers it (the run's own config.yaml, with the
# checkpoint's copy removed from the checkpoint and its manifest): a config error naming the line.
ckpt=$(damaged runconfig)
rm "$ckpt/config.yaml"
"${reseal[@]}" "$ckpt" "del m['files']['config.yaml']"
printf 'run:\n  name: caf\xe9\n' >"$TMP/runconfig/config.yaml"
expect_exit 2 "$TMP/runconfig.txt" timeout 60 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
expect_grep "config.yaml: byte 0xe9 at line 2 is not UTF-8" "$TMP/runconfig.txt"

# A manifest dtype that disagrees with the file, resealed: inspect and eval refuse it (exit 4).
ckpt=$(damaged dtype)
"${reseal[@]}" "$ckpt" "m['tensors']['model/fc1.weight']['dtype'] = 'float64'"
expect_exit 4 "$TMP/dtype.txt" timeout 60 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt"
expect_grep "tensor 'model/fc1.weight' holds float32 but the manifest says dtype float64" "$TMP/dtype.txt"
expect_exit 4 "$TMP/dtype-inspect.txt" timeout 60 "$HPCTRAIN_BIN" inspect checkpoint "$ckpt"
expect_grep "holds float32 but the manifest says dtype float64" "$TMP/dtype-inspect.txt"

# A stop signal during an evaluation-only command (a watch waiting between polls) ends it at
# once with 75 (before: SIGTERM's default action, killed by the signal, no documented code).
cp -r "$run" "$TMP/watched" && rm "$TMP/watched/training_complete.json"  # training "goes on"
"$HPCTRAIN_BIN" eval --watch "$TMP/watched" --poll 60 --timeout 600 >"$TMP/watch.txt" 2>&1 &
watcher=$!
# Once step 10 is evaluated, the watcher sleeps until its next poll.
for _ in $(seq 1 300); do grep -q "step 10" "$TMP/watch.txt" && break; sleep 0.1; done
sleep 0.5
kill -TERM "$watcher"
for _ in $(seq 1 100); do kill -0 "$watcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$watcher" 2>/dev/null; then
  fail "eval --watch still runs 10 s after SIGTERM"
  kill -9 "$watcher"
fi
wait "$watcher"
got=$?
[[ $got == 75 ]] || fail "eval --watch after SIGTERM: exit $got, expected 75"
expect_grep "eval: SIGTERM received outside the training step loop" "$TMP/watch.txt"
finish
