#!/usr/bin/env bash
# The memory-safety run (README, "Sanitizers"): the checkpoint, eval and data tests
#   1. under AddressSanitizer + UndefinedBehaviorSanitizer: a build of hpctrain and those tests
#      with -DHPCTRAIN_SANITIZE=ON in ${ASAN_BUILD_DIR:-build-asan};
#   2. under glibc's heap checking (MALLOC_CHECK_=3 with libc_malloc_debug preloaded, which
#      glibc >= 2.34 needs for MALLOC_CHECK_ to act) with the normal build in ${BUILD_DIR:-build}:
#      the hpctrain processes only, not mpirun (OpenMPI 4.1's mpirun itself crashes with freed
#      memory perturbed when a rank aborts).
# Any report fails the run (a sanitizer report ends the process with exit 1, glibc aborts).
# Extra arguments go to both ctest runs (e.g. -R checkpoint). Not part of ./scripts/test.sh: the
# instrumented build takes longer than CI's budget on two cores (docs/TESTING.md says so).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
tests=(checkpoint_unit_test checkpoint_mpi_test checkpoint_driver data_unit_test data_mpi_test
       eval_mpi_test)
run_selection() {
  local dir=$1
  shift
  (cd "$dir" && ctest --output-on-failure -j "${HPCTRAIN_TEST_JOBS:-2}" -R 'checkpoint' "$@" &&
    ctest --output-on-failure -j "${HPCTRAIN_TEST_JOBS:-2}" -L 'data|eval' -E checkpoint "$@")
}

asan_dir=${ASAN_BUILD_DIR:-build-asan}
echo "sanitize: building $asan_dir (ASan + UBSan, RelWithDebInfo)"
BUILD_DIR=$asan_dir BUILD_TYPE=RelWithDebInfo HPCTRAIN_WERROR=OFF \
  HPCTRAIN_BUILD_TARGET="hpctrain ${tests[*]}" ./scripts/build.sh -DHPCTRAIN_SANITIZE=ON
# Leaks are not the point (LibTorch and MPI keep allocations until exit); corruption is.
# allocator_may_return_null: an impossible allocation (a hostile size the tests give on purpose)
# fails as it does without ASan (std::bad_alloc, reported by hpctrain) instead of aborting.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0:exitcode=1:check_initialization_order=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "sanitize: checkpoint, eval and data tests under ASan + UBSan"
run_selection "$asan_dir" "$@"
unset ASAN_OPTIONS UBSAN_OPTIONS

build_dir=${BUILD_DIR:-build}
echo "sanitize: building $build_dir"
HPCTRAIN_BUILD_TARGET="hpctrain ${tests[*]}" ./scripts/build.sh
debug_malloc=$(ldconfig -p | awk '/libc_malloc_debug\.so\.0/ {print $NF; exit}')
[[ -n $debug_malloc ]] || { echo "sanitize: libc_malloc_debug.so.0 not found (glibc >= 2.34)" >&2; exit 1; }
echo "sanitize: the same tests with MALLOC_CHECK_=3 ($debug_malloc)"
# The e2e tests wrap each hpctrain process (tests/e2e/lib.sh), so mpirun itself runs unchecked;
# the GoogleTest binaries run under it directly.
HPCTRAIN_HEAP_CHECK=$debug_malloc run_selection "$build_dir" -L e2e "$@"
(
  export LD_PRELOAD=$debug_malloc MALLOC_CHECK_=3 MALLOC_PERTURB_=165
  run_selection "$build_dir" -LE e2e "$@"
)
echo "sanitize: no report"
