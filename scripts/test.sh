#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (all labels: unit, mpi,
# e2e, slurm, gpu; gpu tests skip with a reason where no GPU is present).
# Extra arguments go to ctest (e.g. -L unit, -R comm, -E slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd "${BUILD_DIR:-build}"
# Tests run side by side, four processes per core: on 2 cores with two tests at a time (-j 4) the
# script tests used 0.5-0.7 of a core each (MPI start-up, the ranks' waits, process exits), so the
# cores were half idle. A test's PROCESSORS is its ranks, and the longest start first
# (tests/test_costs.txt). The tests that wait on timeouts or clocks (label `timing`: hang,
# peer-loss, straggler and signal tests, Slurm) run after the others, two at a time: beside the
# others a busy core would skew their clocks, and alone, one at a time, they left a core idle for
# ten minutes (cmake/HpctrainTesting.cmake). docs/BENCHMARKS.md, "The test suite", has the
# measurements. Each pass's ctest log is kept (Testing/Temporary/LastTest-PASS.log) for
# scripts/test_times.py.
start=$SECONDS
status=0
ctest --output-on-failure -j "${HPCTRAIN_TEST_JOBS:-$((4 * $(nproc)))}" -LE '^timing$' "$@" || status=$?
cp Testing/Temporary/LastTest.log Testing/Temporary/LastTest-parallel.log 2>/dev/null || true
parallel_s=$((SECONDS - start))
ctest --output-on-failure -j 4 -L '^timing$' "$@" || status=$?
cp Testing/Temporary/LastTest.log Testing/Temporary/LastTest-timing.log 2>/dev/null || true
echo "test.sh: the suite took $((SECONDS - start)) s ($parallel_s s for the tests side by side," \
  "$((SECONDS - start - parallel_s)) s for the timing tests); exit $status"
exit "$status"
