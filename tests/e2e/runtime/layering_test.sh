#!/usr/bin/env bash
# The shape docs/ARCHITECTURE.md promises, checked on the sources: raw MPI calls only in runtime/
# and comm/; the control plane's header holds no torch::Tensor (host values only); no layer
# includes a header of a layer above it; code cites no file outside the repository.
source "$(dirname "$0")/../lib.sh"
cd "$HPCTRAIN_SOURCE_DIR" || exit 1

# MPI_Xxx( calls (not types, constants or comments) outside runtime/ and comm/.
calls=$(grep -rnE '\bMPI_[A-Z][a-z_]+\s*\(' src include --include='*.cpp' --include='*.hpp' |
  grep -vE '^(src|include/hpctrain)/(runtime|comm)/' | grep -vE ':\s*//' || true)
[[ -z $calls ]] || fail "raw MPI calls outside runtime/ and comm/ (use comm::ControlPlane):
$calls"

grep -nE 'torch::|Tensor|<torch/' include/hpctrain/comm/control_plane.hpp \
  include/hpctrain/comm/stop_agreement.hpp include/hpctrain/comm/reduce_op.hpp |
  grep -vE '^\S+:[0-9]+:\s*//' >"$TMP/tensor.txt"
[[ -s $TMP/tensor.txt ]] && fail "control plane headers mention tensors: $(cat "$TMP/tensor.txt")"

# Layers, lowest first; a layer may include only its own and lower layers' headers.
# (No subshell per include line: a thousand forks took a minute on a loaded machine.)
layers=(runtime plan comm data parallel model checkpoint eval train report)
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done
for layer in "${layers[@]}"; do
  mine=${rank[$layer]}
  while IFS= read -r line; do
    [[ $line =~ \"hpctrain/([a-z_]+)/ ]] || continue
    used=${BASH_REMATCH[1]}
    [[ $used == compat ]] && continue
    theirs=${rank[$used]:--1}
    if ((theirs > mine)); then fail "layer $layer includes $used (a higher layer): $line"; fi
  done < <(grep -rhE '#include "hpctrain/[a-z_]+/' "src/$layer" "include/hpctrain/$layer" 2>/dev/null)
done

# plan is pure: none of LibTorch, MPI, HDF5 in its sources.
grep -rnE '#include <(torch|mpi|hdf5|H5)' src/plan include/hpctrain/plan && fail "plan includes LibTorch, MPI or HDF5"

outside=$(grep -rlnE 'DESIGN\.md|STYLE\.md|PLATFORM\.md|\.\./shared' src include docs README.md jobs configs || true)
[[ -z $outside ]] || fail "files citing documents outside the repository: $outside"
finish
