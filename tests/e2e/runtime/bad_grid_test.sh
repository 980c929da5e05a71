#!/usr/bin/env bash
# A world size that tp does not divide: every rank reports it, the job exits 2, nothing hangs.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # its commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

expect_exit 2 "$TMP/np3.txt" mpirun_np 3 "$HPCTRAIN_BIN" env --tp 2
expect_grep "world size 3 is not divisible by parallel.tp = 2" "$TMP/np3.txt"
expect_grep "mpirun -np 4" "$TMP/np3.txt"

expect_exit 2 "$TMP/np1.txt" "$HPCTRAIN_BIN" env --tp 4
expect_grep "error: world size 1 is not divisible by parallel.tp = 4" "$TMP/np1.txt"

expect_exit 2 "$TMP/tp0.txt" mpirun_np 2 "$HPCTRAIN_BIN" bench allreduce --tp 0
expect_grep "tp" "$TMP/tp0.txt"
finish
