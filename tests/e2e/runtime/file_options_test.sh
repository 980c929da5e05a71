#!/usr/bin/env bash
# Every file-taking option of every command (issue 44), one table: each is given a FIFO, a
# directory (or, where it takes a directory, a regular file), a missing path and an unreadable
# one, and must end within 30 s (a FIFO that is opened blocks forever) with the exit code README.md
# documents for its kind (2 config, model, plugin or run-directory file; 3 data; 4 checkpoint) and
# a message naming the path. As root, permissions do not stop reading: the unreadable case runs
# the command as user nobody (setpriv).
source "$(dirname "$0")/../lib.sh"
fork_server_start  # its one-process commands as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
tiny=$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml
T=$TMP/t  # where the bad paths live; readable by nobody
mkdir -p "$T"
chmod 755 "$TMP" && chmod 1777 "$T"  # the unreadable cases run as nobody, who writes outputs here

# A run with a checkpoint, arrays and a token file for the options that need one beside the bad one.
expect_exit 0 "$TMP/base.txt" "$HPCTRAIN_BIN" train -c "$tiny" --set "data.train=$data/train.h5" \
  --set "data.val=$data/test.h5" --set run.max_steps=2 --set checkpoint.at_end=true \
  --set eval.every_steps=0 --set eval.at_end=false --set "run.dir=$T/run" || finish
ckpt=$T/run/checkpoints/step_00000002
"$PY" -c "
import numpy as np
np.save('$T/x.npy', np.zeros((4, 3), np.float32)); np.save('$T/y.npy', np.zeros(4, np.int64))
" || fail "writing the arrays failed"
cat >"$T/ts.yaml" <<EOF
model: {name: torchscript, file: $T/model.pt}
EOF
chmod -R a+rwX "$T"

# NAME|CODE|KIND (file: the option takes a file; dir: a directory)|COMMAND, @ = the path
table=(
  "train -c|2|file|train -c @"
  "train data.train|3|file|train -c $tiny --set data.train=@ --set data.val=$data/test.h5"
  "train data.val|3|file|train -c $tiny --set data.train=$data/train.h5 --set data.val=@"
  "train model.init_from|4|file|train -c $tiny --set data.train=$data/train.h5 --set data.val=$data/test.h5 --set model.init_from=@"
  "train model.plugin|2|file|train -c $tiny --set data.train=$data/train.h5 --set data.val=$data/test.h5 --set model.plugin=@"
  "train model.file|2|file|train -c $T/ts.yaml --set data.train=$data/train.h5 --set model.file=@"
  "--plugin|2|file|--plugin @ env"
  "train --resume|4|dir|train -c $tiny --set data.train=$data/train.h5 --set data.val=$data/test.h5 --set run.dir=$T/resumed --resume @"
  "prepare text|3|file|prepare text --in @ --out $T/out-text"
  "prepare tokens|3|file|prepare tokens @ --vocab 300 --out $T/out-tokens"
  "prepare numpy --inputs|3|file|prepare numpy --inputs @ --labels $T/y.npy --out $T/out-numpy"
  "prepare numpy --labels|3|file|prepare numpy --inputs $T/x.npy --labels @ --out $T/out-numpy"
  "prepare numpy --targets|3|file|prepare numpy --inputs $T/x.npy --targets @ --out $T/out-numpy"
  "prepare fashion-mnist --from|3|dir|prepare fashion-mnist --from @ --out $T/out-fm"
  "inspect data|3|file|inspect data @"
  "inspect checkpoint|4|dir|inspect checkpoint @"
  "eval --checkpoint|4|dir|eval --checkpoint @"
  "eval --checkpoints|4|dir|eval --checkpoints @"
  "eval --data|3|file|eval --checkpoint $ckpt --data @ --results $T/out-eval"
  "export|4|dir|export @ --out $T/out-model.pt"
  "compress|4|dir|compress @ --out $T/out-compressed --quantize int8"
  "plan -c|2|file|plan -c @"
  "plan --calibrate|2|dir|plan -c $tiny --calibrate @"
  "bench train -c|2|file|bench train -c @"
  "bench data --file|3|file|bench data --file @ --steps 2"
  "trace summary|2|dir|trace summary @"
  "trace flight|2|dir|trace flight @"
  "report|2|dir|report @"
)

# The four bad paths for a KIND: a FIFO, the wrong kind of file, a missing path, an unreadable one.
rm -rf "$T/bad" && mkdir -p "$T/bad/dir" && mkfifo "$T/bad/fifo" && echo x >"$T/bad/file"
mkdir -p "$T/bad/locked-dir" && echo x >"$T/bad/locked-file"
chmod 000 "$T/bad/locked-dir" "$T/bad/locked-file"
as_nobody=()
[[ $(id -u) == 0 ]] && as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)

# check_case NAME CODE WHAT PATH N WORDS...: one option given one bad path.
check_case() {
  local name=$1 code=$2 what=$3 path=$4 n=$5
  shift 5
  local words=("$@") runner=()
  if [[ $what == unreadable ]]; then
    runner=("${as_nobody[@]}")
    # A run directory of its own: the earlier variants' (made by root) are not nobody's to write.
    [[ ${words[0]} == train ]] && words+=(--set "run.dir=$T/nobody-$n")
  fi
  local log=$TMP/$n.txt
  # As nobody, a process of its own (the fork server's children are root's).
  local argv=("$HPCTRAIN_BIN" "${words[@]}")
  ((${#runner[@]} > 0)) || { forked_argv "${argv[@]}" && argv=("${FORKED_ARGV[@]}"); }
  (cd "$T" && HOME=$T timeout -k 5 30 "${runner[@]}" "${argv[@]}") >"$log" 2>&1
  local got=$?
  if ((got != code)); then
    fail "$name given a $what ($path): exit $got, expected $code"
    sed 's/^/    | /' "$log" | tail -5 >&2
  elif ! grep -qF "$path" "$log"; then
    fail "$name given a $what: the message does not name $path: $(tail -2 "$log")"
  fi
  printf '%-28s %-10s exit %s  %s\n' "$name" "$what" "$got" "$(grep -m1 'error' "$log" | cut -c1-150)"
}

# Each case is one process: two at a time (the cases share nothing but the inputs made above).
cases_start 2
n=0
for row in "${table[@]}"; do
  IFS='|' read -r name code kind command <<<"$row"
  if [[ $kind == file ]]; then
    variants=("FIFO:$T/bad/fifo" "directory:$T/bad/dir" "missing:$T/bad/none.h5" "unreadable:$T/bad/locked-file")
  else
    variants=("FIFO:$T/bad/fifo" "file:$T/bad/file" "missing:$T/bad/none" "unreadable:$T/bad/locked-dir")
  fi
  for variant in "${variants[@]}"; do
    what=${variant%%:*}
    path=${variant#*:}
    # shellcheck disable=SC2206  # the command is split into words on purpose
    words=(${command//@/$path})
    case_run check_case "$name" "$code" "$what" "$path" "$n" "${words[@]}"
    n=$((n + 1))
  done
done
cases_end
finish
