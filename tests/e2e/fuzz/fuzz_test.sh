#!/usr/bin/env bash
# ctest label `fuzz`: seeded, bounded mutations of configs (200), data files (100) and
# checkpoints (100) through the real binary (tests/e2e/fuzz/fuzz.py says how). Every case ends
# with a documented exit code and a message, never a signal, exit 1, an exception trace or a
# hang. HPCTRAIN_FUZZ_SEED picks another seed; failing cases are kept under the test's
# directory in failures/.
source "$(dirname "$0")/../lib.sh"
seed=${HPCTRAIN_FUZZ_SEED:-18}
"$PY" -u "$(dirname "$0")/fuzz.py" "$HPCTRAIN_BIN" "$TMP/work" --seed "$seed" --jobs 3 \
  --case-timeout 30 || fail "fuzz cases failed (seed $seed; kept in $TMP/work/failures)"
finish
