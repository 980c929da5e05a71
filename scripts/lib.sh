# shellcheck shell=bash
# What hpctrain's scripts share, sourced first thing:   source "$(dirname "$0")/lib.sh"
# It stops on errors (set -euo pipefail), moves to the repository root, and gives:
#   $bin                  the hpctrain binary: HPCTRAIN_BIN, else ${BUILD_DIR:-build}/bin/hpctrain
#   build_if_missing      build $bin (the executable only) when it is missing
#   require_bin           fail, saying how to get it, when $bin is missing
#   mpi_flags BINDING...  MPI_FLAGS=(BINDING... [--allow-run-as-root as root]) for mpirun
#   one_thread_per_rank   one BLAS/OpenMP thread per rank (ranks = cores: no oversubscribed BLAS)
#   fashion_mnist DIR     DIR/{train,test}.h5 of Fashion-MNIST, prepared when missing
#   fortunes_text DIR     DIR/{train,val}.h5 of Debian's fortunes (byte-level), prepared when missing
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=${HPCTRAIN_BIN:-${BUILD_DIR:-build}/bin/hpctrain}

build_if_missing() {
  [[ -x $bin ]] || HPCTRAIN_BUILD_TARGET=${HPCTRAIN_BUILD_TARGET:-hpctrain} ./scripts/build.sh
}

require_bin() {
  [[ -x $bin ]] && return 0
  echo "no hpctrain binary at $bin: run scripts/build.sh (or set HPCTRAIN_BIN)" >&2
  exit 1
}

mpi_flags() {
  MPI_FLAGS=("$@")
  [[ $(id -u) -eq 0 ]] && MPI_FLAGS+=(--allow-run-as-root)
  return 0
}

one_thread_per_rank() {
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
}

fashion_mnist() {
  local dir=$1
  [[ -f $dir/train.h5 && -f $dir/test.h5 ]] || "$bin" -q prepare fashion-mnist --out "$dir"
}

fortunes_text() {
  local dir=$1
  [[ -f $dir/train.h5 ]] || "$bin" -q prepare text --in /usr/share/games/fortunes/*.u8 --out "$dir"
}
