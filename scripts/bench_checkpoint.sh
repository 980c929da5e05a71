#!/usr/bin/env bash
# Checkpoint benchmark: `hpctrain bench checkpoint` on 1 and 2 ranks, synchronous and background
# writing, next to `dd if=/dev/zero ... conv=fsync` writing the same number of bytes into the same
# directory in the same run (dd right before each hpctrain measurement). Prints a markdown table
# for docs/BENCHMARKS.md. Never a test: numbers depend on the machine and its load.
# Writing modes: sync (save() writes), background (the writer thread copies and writes; training
# waits for the copy at once), overlap (the same, with OVERLAP_MS of compute standing in for the
# next step's forward and backward before the optimizer waits for the copy).
#
#   scripts/bench_checkpoint.sh                       # 10M and 100M parameters
#   PARAMS="10M" RANKS="1 2" REPEAT=3 OVERLAP_MS=200 DIR=/scratch/me/ckpt-bench scripts/bench_checkpoint.sh
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
params_list=${PARAMS:-10M 100M}
overlap_ms=${OVERLAP_MS:-200}
ranks_list=${RANKS:-1 2}
repeat=${REPEAT:-3}
dir=${DIR:-bench-checkpoint-run}
py=/usr/bin/python3

require_bin
mpi_flags --oversubscribe --bind-to none
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dir/dd.bin"' EXIT

# dd_mbps BYTES: MB/s of dd writing BYTES (4 MiB blocks) with fsync before it exits; the median
# of 3 runs (this filesystem's speed varies from run to run).
dd_mbps() {
  local count=$((($1 + 4194303) / 4194304))
  local runs=() start end
  for _ in 1 2 3; do
    start=$(date +%s.%N)
    dd if=/dev/zero of="$dir/dd.bin" bs=4M count="$count" conv=fsync status=none
    end=$(date +%s.%N)
    rm -f "$dir/dd.bin"
    runs+=("$("$py" -c "print($count * 4194304 / ($end - $start) / 1e6)")")
  done
  printf '%s\n' "${runs[@]}" | sort -g | sed -n 2p
}

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc) cores, $(df -hT "$dir" | awk 'NR==2 {print $2 " on " $1}'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: scripts/bench_checkpoint.sh (PARAMS=\"$params_list\" RANKS=\"$ranks_list\" REPEAT=$repeat OVERLAP_MS=$overlap_ms DIR=$dir)"
echo
echo "| params | checkpoint MB | ranks (dp x tp) | writing | save s | save MB/s | dd MB/s | save / dd | blocked s (copy s) | blocked / save | without copy | load MB/s | verify s |"
echo "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for params in $params_list; do
  for ranks in $ranks_list; do
    for mode in sync background overlap; do
      flags=(--sync)
      [[ $mode == background ]] && flags=(--background)
      [[ $mode == overlap ]] && flags=(--background --overlap-ms "$overlap_ms")
      # The same bytes as the checkpoint: 4 bytes per parameter plus HDF5 metadata (~0.1%).
      bytes=$("$py" -c "
import re
m = re.fullmatch(r'([0-9.]+)([KMG]?)', '$params')
print(int(float(m.group(1)) * {'': 1, 'K': 1e3, 'M': 1e6, 'G': 1e9}[m.group(2)] * 4))")
      dd=$(dd_mbps "$bytes")
      mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" -q bench checkpoint --params "$params" "${flags[@]}" \
        --repeat "$repeat" --dir "$dir/run" --json >"$tmp/out.json"
      label=$mode
      [[ $mode == overlap ]] && label="background, ${overlap_ms} ms compute"
      "$py" - "$tmp/out.json" "$dd" "$label" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
dd, mode = float(sys.argv[2]), sys.argv[3]
for r in j["rows"]:
    print(f"| {r['params'] / 1e6:g}M | {r['bytes'] / 1e6:.1f} | {j['world_size']} ({j['dp']} x {j['tp']}) "
          f"| {mode} | {r['save_s']:.2f} | {r['save_mb_per_s']:.1f} | {dd:.1f} "
          f"| {r['save_mb_per_s'] / dd:.2f} | {r['blocked_s']:.3f} ({r['copy_s']:.3f}) "
          f"| {100 * r['blocked_fraction']:.1f}% | {100 * r['blocked_without_copy_fraction']:.1f}% "
          f"| {r['load_mb_per_s']:.0f} | {r['verify_s']:.2f} |")
PY
    done
  done
done
