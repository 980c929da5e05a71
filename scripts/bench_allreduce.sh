#!/usr/bin/env bash
# All-reduce bandwidth of hpctrain's MPI communicator against a plain MPI_Allreduce loop on the
# same buffers, measured in the same run (2 ranks, float32 sum, 64 KiB to 64 MiB). The "ratio"
# column is hpctrain busbw / MPI busbw. Usage: scripts/bench_allreduce.sh [ranks] [extra args].
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
ranks=${1:-2}
shift || true
build_if_missing
mpi_flags --oversubscribe
mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" bench allreduce --min-bytes 64K --max-bytes 64M \
  --iters 20 --rounds 5 "$@"
