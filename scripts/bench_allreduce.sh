#!/usr/bin/env bash
# All-reduce bandwidth of hpctrain's MPI communicator against a plain MPI_Allreduce loop on the
# same buffers, measured in the same run (2 ranks, float32 sum, 64 KiB to 64 MiB). The "ratio"
# column is hpctrain busbw / MPI busbw. Usage: scripts/bench_allreduce.sh [ranks] [extra args].
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
shift || true
bin=${BUILD_DIR:-build}/bin/hpctrain
[[ -x $bin ]] || ./scripts/build.sh
flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
mpirun "${flags[@]}" -np "$ranks" "$bin" bench allreduce --min-bytes 64K --max-bytes 64M \
  --iters 20 --rounds 5 "$@"
