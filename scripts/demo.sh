#!/usr/bin/env bash
# The demo: installs what is missing, builds, and runs the main job on 2 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
bin=${BUILD_DIR:-build}/bin/hpctrain
mpirun_flags=(--oversubscribe --bind-to core)
[[ $(id -u) -eq 0 ]] && mpirun_flags+=(--allow-run-as-root)

echo "== hpctrain env (2 ranks)"
mpirun "${mpirun_flags[@]}" -np 2 "$bin" env
echo "== hpctrain bench allreduce (2 ranks)"
mpirun "${mpirun_flags[@]}" -np 2 "$bin" bench allreduce --min-bytes 64K --max-bytes 16M --factor 4
