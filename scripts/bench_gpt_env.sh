# shellcheck shell=bash
# Sourced by the gpt memory benchmarks (scripts/bench_memory.sh, scripts/bench_heap_slack.sh)
# from the repository root: $bin (built if missing), $data (DATA_DIR, default data/text: the
# fortunes prepared if missing), MPI_FLAGS for mpirun on more ranks than cores, one thread per
# rank. Needs scripts/lib.sh sourced first.
build_if_missing
data=${DATA_DIR:-data/text}
fortunes_text "$data"
mpi_flags --oversubscribe --bind-to none
one_thread_per_rank
