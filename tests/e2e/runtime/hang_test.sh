#!/usr/bin/env bash
# A collective that one rank never joins: the watchdog names the operation, group, rank and wait,
# and the whole job ends with exit code 7 within seconds instead of hanging.
source "$(dirname "$0")/../lib.sh"
probe=$1

start=$(date +%s)
expect_exit 7 "$TMP/hang.txt" mpirun_np 2 "$probe"
elapsed=$(($(date +%s) - start))
expect_grep "r0/.*collective barrier on the world group .* has not completed after" "$TMP/hang.txt"
expect_grep "Aborting the job" "$TMP/hang.txt"
# The other rank sleeps 60 s: ending well before that shows the job was aborted, not awaited.
((elapsed < 50)) || fail "hung job took ${elapsed}s to end"

# A pipeline receive whose message never comes: a collective timeout naming the pp group and the
# peer it waits for.
start=$(date +%s)
expect_exit 7 "$TMP/recv.txt" mpirun_np 2 "$probe" recv
elapsed=$(($(date +%s) - start))
expect_grep "r0/.*collective send_recv on the pp group \(16 B, recv from group rank 1 = world rank 1\) has not completed after" "$TMP/recv.txt"
((elapsed < 50)) || fail "hung receive took ${elapsed}s to end"
# A host read of a device value that waits behind a reduction the other rank never reaches (the
# gradient norm's .item() on a GPU): reported as that collective, naming the value, exit 7.
start=$(date +%s)
expect_exit 7 "$TMP/host_sync.txt" mpirun_np 2 "$probe" host_sync
elapsed=$(($(date +%s) - start))
expect_grep "r0/.*collective all_reduce on the dp group \(0 B, the host waits on the device for the gradient norm, computed after this collective\) has not completed after" "$TMP/host_sync.txt"
expect_grep "Aborting the job" "$TMP/host_sync.txt"
((elapsed < 50)) || fail "hung host sync took ${elapsed}s to end"
finish
