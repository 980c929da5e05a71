#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test (all labels: unit, mpi,
# e2e, slurm, gpu; gpu tests skip with a reason where no GPU is present).
# Extra arguments go to ctest (e.g. -L unit, -R comm, -E slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${HPCTRAIN_TEST_JOBS:-2}" "$@"
