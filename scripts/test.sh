#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (all labels: unit, mpi,
# e2e, slurm, gpu; gpu tests skip with a reason where no GPU is present).
# Extra arguments go to ctest (e.g. -L unit, -R comm, -E slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd "${BUILD_DIR:-build}"
# Tests run side by side, twice as many processes as cores: measured on 2 cores at -j 2 with every
# script test exclusive, the processes kept the cores busy 46% of the suite's time (single-process
# steps, MPI start-up, waits). A test's PROCESSORS is its ranks; tests that wait on timeouts or
# clocks run alone (RUN_SERIAL, cmake/HpctrainTesting.cmake).
ctest --output-on-failure -j "${HPCTRAIN_TEST_JOBS:-$((2 * $(nproc)))}" "$@"
