#!/usr/bin/env bash
# No function in src/ over 120 lines (issue 41): scripts/long_functions.py, which measures each
# function's extent with Universal Ctags, lists none. It must see functions at all: with a limit
# of 60 lines it lists some and exits 1.
source "$(dirname "$0")/../lib.sh"
command -v ctags >/dev/null 2>&1 || fail "ctags missing: apt-get install universal-ctags (scripts/setup.sh)"
script=$HPCTRAIN_SOURCE_DIR/scripts/long_functions.py
expect_exit 0 "$TMP/limit.txt" "$PY" "$script" "$HPCTRAIN_SOURCE_DIR/src"
expect_grep "^0 function\(s\) over 120 lines" "$TMP/limit.txt"
expect_exit 1 "$TMP/short.txt" "$PY" "$script" --max 60 "$HPCTRAIN_SOURCE_DIR/src"
expect_grep "^[1-9][0-9]* function\(s\) over 60 lines" "$TMP/short.txt"
finish
