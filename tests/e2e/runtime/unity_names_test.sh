#!/usr/bin/env bash
# The unity batches' rule, checked on the sources (cmake/HpctrainTargets.cmake): among the sources
# of a target compiled in batches, no name with internal linkage (anonymous namespace, `static`)
# or macro is defined by two files. Which files share a batch follows their names, so a duplicate
# anywhere in the target breaks the build as soon as a file is added. Arguments: --target NAME
# FILE... per target (hpctrain_unity_sources_args).
source "$(dirname "$0")/../lib.sh"
(($# > 0)) || fail "no unity-built target given (hpctrain_unity registers them)"
$PY "$(dirname "$0")/unity_names.py" "$@" >"$TMP/names.txt" 2>&1 || fail "$(cat "$TMP/names.txt")"
cat "$TMP/names.txt"
finish
