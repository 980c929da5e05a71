# shellcheck shell=bash
# Sourced by the gpt memory benchmarks (scripts/bench_memory.sh, scripts/bench_heap_slack.sh)
# from the repository root: $bin (built if missing), $data (DATA_DIR, default data/text: the
# fortunes prepared if missing), $flags for mpirun on more ranks than cores, one thread per rank.
bin=${BUILD_DIR:-build}/bin/hpctrain
[[ -x $bin ]] || ./scripts/build.sh
data=${DATA_DIR:-data/text}
[[ -f $data/train.h5 ]] || "$bin" prepare text --in /usr/share/games/fortunes/*.u8 --out "$data"
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
