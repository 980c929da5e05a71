#!/usr/bin/env bash
# Opening a dataset of many small shard files (issue 31, item 1: "opening 1,000 files takes seconds,
# not minutes"): writes N shards with h5py, then times how long `hpctrain bench data` takes to open
# and validate them as training does (a glob; the world's ranks split the files and share their
# findings), at 1 and 2 ranks, beside h5py opening the same files and reading their metadata in
# one Python process. Prints a markdown table for docs/BENCHMARKS.md. Never a test: numbers depend
# on the machine.
#
#   scripts/bench_many_files.sh                    # 1,000 token shards and 1,000 image shards
#   FILES=1000 RANKS="1 2" REPEATS=3 KINDS="tokens images" scripts/bench_many_files.sh
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
files=${FILES:-1000}
ranks_list=${RANKS:-1 2}
repeats=${REPEATS:-3}
kinds=${KINDS:-tokens images}
py=/usr/bin/python3

require_bin
mpi_flags --oversubscribe --bind-to none
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d" " -f1 /proc/loadavg); $files shard files per kind, written by h5py"
echo "# command: FILES=$files RANKS=\"$ranks_list\" REPEATS=$repeats scripts/bench_many_files.sh"
echo "# seconds to open and validate every file (hpctrain: the slowest rank; best of $repeats);"
echo "# h5py: open each file, read its shapes and attributes, close, in one process"
echo
echo "| kind | files | bytes per file | h5py open+metadata (s) | $(for r in $ranks_list; do printf 'hpctrain %s rank(s) (s) | ' "$r"; done)"
echo "|---|---:|---:|---:|$(for r in $ranks_list; do printf -- '---:|'; done)"
for kind in $kinds; do
  dir=$tmp/$kind
  mkdir -p "$dir"
  $py - "$dir" "$files" "$kind" <<'PY'
import sys, h5py, numpy as np
out, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
for i in range(n):
    with h5py.File(f"{out}/shard-{i:05d}.h5", "w") as f:
        if kind == "tokens":   # 4,097 uint16 tokens: 256 windows of 16
            f.create_dataset("tokens", data=rng.integers(0, 256, 4097).astype(np.uint16)).attrs["vocab_size"] = 256
        else:                  # 64 images of 1x28x28 uint8 and their labels
            f.create_dataset("inputs", data=rng.integers(0, 256, (64, 1, 28, 28)).astype(np.uint8))
            f.create_dataset("labels", data=rng.integers(0, 10, 64).astype(np.int64)).attrs["num_classes"] = 10
PY
  size=$(stat -c %s "$dir/shard-00000.h5")
  h5py_s=$($py - "$dir" <<'PY'
import glob, sys, time, h5py
paths = sorted(glob.glob(f"{sys.argv[1]}/*.h5"))
best = None
for _ in range(3):
    start = time.perf_counter()
    for p in paths:
        with h5py.File(p, "r") as f:
            for name, d in f.items():
                d.shape, d.dtype, dict(d.attrs)
    t = time.perf_counter() - start
    best = t if best is None else min(best, t)
print(f"{best:.3f}")
PY
)
  cells=""
  for ranks in $ranks_list; do
    best=""
    for ((i = 0; i < repeats; i++)); do
      args=(bench data --file "$dir/*.h5" --batch 4 --steps 1 --warmup 0 --prefetch 0 --json)
      [[ $kind == tokens ]] && args+=(--seq-len 16)
      mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" -q "${args[@]}" >"$tmp/out.json"
      s=$($py -c "import json,sys; j=json.load(open(sys.argv[1])); assert j['files']==$files, j['files']; print(j['open_seconds'])" "$tmp/out.json")
      best=$($py -c "import sys; a=sys.argv[1]; print(min(float(a), $s) if a else $s)" "$best")
    done
    cells+=$(printf '%.3f | ' "$best")
  done
  echo "| $kind | $files | $size | $h5py_s | $cells"
done
