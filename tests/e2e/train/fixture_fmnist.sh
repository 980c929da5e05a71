#!/usr/bin/env bash
# Fixture: Fashion-MNIST as HDF5 in $HPCTRAIN_TEST_DATA/fashion-mnist, prepared once per build.
source "$(dirname "$0")/../lib.sh"
out=$HPCTRAIN_TEST_DATA/fashion-mnist
if [[ -f $out/train.h5 && -f $out/test.h5 ]]; then
  echo "already prepared: $out"
  finish
  exit 0
fi
mkdir -p "$HPCTRAIN_TEST_DATA"
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare fashion-mnist --out "$out"
finish
