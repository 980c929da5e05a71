#!/usr/bin/env bash
# Configures and builds hpctrain into ${BUILD_DIR:-build}. Extra arguments go to cmake's configure
# step (e.g. -DTorch_DIR=... on a cluster). Used by test.sh and demo.sh.
# A ccache on PATH is used as the compiler launcher (faster rebuilds, e.g. of a fresh clone).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build_dir/CMakeCache.txt" || -f "$build_dir/build.ninja" ]]; then
  generator=(-G Ninja)
fi
jobs=${HPCTRAIN_BUILD_JOBS:-$(nproc)}
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build_dir" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DHPCTRAIN_WERROR="${HPCTRAIN_WERROR:-ON}" "$@" >"$build_dir.configure.log" 2>&1 || {
  cat "$build_dir.configure.log" >&2
  exit 1
}
# HPCTRAIN_BUILD_TARGET (e.g. hpctrain, or several separated by spaces): build only those targets
# and what they need; the demo builds the executable alone, the test command everything.
target=()
# shellcheck disable=SC2206  # word splitting is the point: a list of target names
[[ -n ${HPCTRAIN_BUILD_TARGET:-} ]] && target=(--target ${HPCTRAIN_BUILD_TARGET})
cmake --build "$build_dir" -j "$jobs" "${target[@]}"
