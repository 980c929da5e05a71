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
# cores were half idle. A test's PROCESSORS is its ranks; tests that wait on timeouts or clocks run
# alone (RUN_SERIAL, cmake/HpctrainTesting.cmake). docs/BENCHMARKS.md, "The test suite", has the
# measurements.
ctest --output-on-failure -j "${HPCTRAIN_TEST_JOBS:-$((4 * $(nproc)))}" "$@"
