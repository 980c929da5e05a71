#!/usr/bin/env bash
# Runs `mpirun ARGS...` so that a stop signal to this script ends it with the ranks' exit code.
#
#   jobs/mpirun-stop.sh -np 4 build/bin/hpctrain train -c configs/gpt-small.yaml
#   timeout 4h jobs/mpirun-stop.sh -np 4 build/bin/hpctrain train ...   # 75 at the limit
#
# OpenMPI's mpirun treats SIGTERM and SIGINT as an abort: it forwards them, the ranks save and exit
# 75, and mpirun itself returns 1. SIGUSR1 it forwards without aborting, and then returns the
# ranks' code (75). hpctrain takes SIGUSR1, SIGTERM and SIGINT alike (save, then exit 75), so this
# script turns a TERM, INT or HUP it receives into a USR1 for mpirun and returns mpirun's status.
# The ranks' code is also in RUN_DIR/outcome.json whatever the launcher returns (README.md).
set -u
launcher=${HPCTRAIN_MPIRUN:-mpirun}
"$launcher" "$@" &
child=$!
# shellcheck disable=SC2317  # called through the trap
stop() { kill -USR1 "$child" 2>/dev/null; }
trap stop TERM INT HUP
# A trapped signal makes `wait` return early (128 + the signal): wait again while mpirun runs. A
# status over 128 with mpirun gone may still be the interrupted wait's: one more wait reports
# mpirun's own (127 when it was already reported).
while true; do
  wait "$child"
  rc=$?
  ((rc > 128)) && kill -0 "$child" 2>/dev/null && continue
  break
done
if ((rc > 128)); then
  wait "$child" 2>/dev/null
  again=$?
  ((again != 127)) && rc=$again
fi
exit "$rc"
