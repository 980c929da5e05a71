#!/usr/bin/env bash
# Every documented example is a test (issue 44): each config block of README.md and docs/*.md is
# written to a file verbatim and read by `hpctrain plan` as a config file (with the sections of
# configs/tiny-mlp.yaml it leaves out), and trained on for two steps where the suite has what it
# needs (data paths it names are made to hold the suite's Fashion-MNIST); a documented form that
# does not parse fails here. Then every config key the parsers read (HPCTRAIN_CONFIG_KEYS, over
# every shipped config and every block) and every command of `hpctrain --help` must appear in the
# docs: the test lists the differences.
source "$(dirname "$0")/../lib.sh"
fork_server_start  # its one-process commands as forks of one loaded hpctrain (lib.sh)
src=$HPCTRAIN_SOURCE_DIR
helper=("$PY" "$src/tests/e2e/runtime/docs_examples.py")
export HPCTRAIN_CONFIG_KEYS=$TMP/keys.txt

"${helper[@]}" blocks "$src" "$TMP/blocks" "$src/configs/tiny-mlp.yaml" "$HPCTRAIN_TEST_DATA" \
  >"$TMP/blocks.tsv" || fail "extracting the documented config blocks failed"
# block_case NAME WHERE MODE: one documented block planned, and trained where MODE is run. Its
# own keys file: the cases run two at a time.
block_case() {
  local name=$1 where=$2 mode=$3 full=$TMP/blocks/$1.full.yaml
  export HPCTRAIN_CONFIG_KEYS=$TMP/keys-block-$name.txt
  (cd "$TMP/blocks/work" && expect_exit 0 "$TMP/plan-$name.txt" "$HPCTRAIN_BIN" plan -c "$full" \
    --devices 2) ||
    fail "$where: the documented block does not load as a config (above; the file: $full)"
  if [[ $mode == run ]]; then
    (cd "$TMP/blocks/work" && expect_exit 0 "$TMP/train-$name.txt" "$HPCTRAIN_BIN" train -c "$full" \
      --set run.max_steps=2 --set eval.every_steps=0 --set eval.at_end=false \
      --set logging.every_steps=1 --set "run.dir=$TMP/run-$name") ||
      fail "$where: training on the documented block failed (above; the file: $full)"
  fi
  echo "$where: loads$([[ $mode == run ]] && echo ", trains")"
}
cases_start 2
n=0
while IFS=$'\t' read -r name where mode; do
  n=$((n + 1))
  case_run block_case "$name" "$where" "$mode"
done <"$TMP/blocks.tsv"
cases_end
((n >= 8)) || fail "only $n config blocks found in the docs"
# The mixture, written as a block, trained on both of its sources.
mixture=$(grep -l "weight: 0.7" "$TMP"/blocks/*[0-9].yaml | head -1)
[[ -n $mixture ]] || fail "no block mixture found in docs/DATA.md"

# Every shipped config loads too (they are examples as well), and adds the keys it reads; the
# epoch's size is given, as their data is not the suite's (a TorchScript config gets a model).
sizes=(--samples 10000 --eval-samples 1000)
config_case() {  # config_case CONFIG
  local config=$1 sets=()
  export HPCTRAIN_CONFIG_KEYS=$TMP/keys-config-$(basename "$config").txt
  grep -q "name: torchscript" "$config" && sets=(--set "model.file=$TMP/blocks/work/my_model.pt")
  # (from the directory that holds data/fashion-mnist: a TorchScript model reads its input's shape)
  (cd "$TMP/blocks/work" && expect_exit 0 "$TMP/plan-$(basename "$config").txt" "$HPCTRAIN_BIN" \
    plan -c "$config" --devices 4 "${sizes[@]}" "${sets[@]}") || fail "shipped config $config"
}
cases_start 2
for config in "$src"/configs/*.yaml; do case_run config_case "$config"; done
cases_end
cat "$TMP"/keys-block-*.txt "$TMP"/keys-config-*.txt >>"$TMP/keys.txt" 2>/dev/null
# Keys read only in some configurations: pipelines, sharding, loss scaling, debug aids.
expect_exit 0 "$TMP/plan-extra.txt" "$HPCTRAIN_BIN" plan -c "$src/configs/gpt-tiny.yaml" --devices 4 \
  "${sizes[@]}" \
  --set parallel.pp=2 --set parallel.pp_schedule=interleaved --set parallel.pp_virtual=2 \
  --set parallel.shard=optimizer --set parallel.shard_group=2 --set optim.grad_accumulation=2
expect_exit 0 "$TMP/plan-shard.txt" "$HPCTRAIN_BIN" plan -c "$src/configs/gpt-tiny.yaml" --devices 4 \
  "${sizes[@]}" \
  --set parallel.shard=full --set parallel.param_dtype=bfloat16 --set parallel.reduce_dtype=bfloat16 \
  --set parallel.reshard_after_forward=false
"${helper[@]}" keys "$src" "$TMP/keys.txt" || fail "config keys missing from the docs (above)"
echo "$(sort -u "$TMP/keys.txt" | wc -l) config keys read, each documented"

# Every command of `hpctrain --help`, groups (bench, inspect, ...) expanded.
unset HPCTRAIN_CONFIG_KEYS
"$HPCTRAIN_BIN" --help >"$TMP/help.txt" 2>&1
subcommands() {  # subcommands HELP_FILE: the names under "Subcommands:"
  sed -n '/^Subcommands:/,$p' "$1" | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p'
}
: >"$TMP/commands.txt"
for c in $(subcommands "$TMP/help.txt"); do
  "$HPCTRAIN_BIN" "$c" --help >"$TMP/help-$c.txt" 2>&1
  leaves=$(subcommands "$TMP/help-$c.txt")
  if [[ -z $leaves ]]; then
    echo "$c" >>"$TMP/commands.txt"
  else
    for l in $leaves; do echo "$c $l" >>"$TMP/commands.txt"; done
  fi
done
(($(wc -l <"$TMP/commands.txt") >= 15)) || fail "too few commands in --help: $(cat "$TMP/commands.txt")"
"${helper[@]}" commands "$src" "$TMP/commands.txt" || fail "commands missing from the docs (above)"
echo "$(wc -l <"$TMP/commands.txt") commands in --help, each documented"
finish
