# shellcheck shell=bash disable=SC2034  # sourced by the slurm tests, which use SRUN
# Helpers for the slurm-label tests (sourced after ../lib.sh): bring up the local one-machine Slurm
# of scripts/slurm-sandbox.sh (one node: this host), run Slurm commands with guards so nothing hangs, and leave the machine
# as it was found.
#
# Sharing one instance: tests of this label carry the ctest RESOURCE_LOCK "slurm", so one ctest
# runs them one at a time; other ctest runs (another build directory) and people may use the same
# instance at the same moment. Each test holds a shared flock on "$SLURM_LOCAL_DIR.users" while it
# uses Slurm. A test that found no instance starts one and marks it "started by a test"; at exit,
# the last test out (the one that gets the lock exclusively) stops a marked instance. An instance
# someone started by hand carries no mark and is left running.

SLURM_LOCAL=${HPCTRAIN_SOURCE_DIR:?run through ctest}/scripts/slurm-sandbox.sh
SLURM_LOCAL_DIR=${HPCTRAIN_SLURM_DIR:-/tmp/hpctrain-slurm}
SLURM_LOCAL_MARK=$SLURM_LOCAL_DIR/started-by-test
SLURM_SKIP=77 # SKIP_RETURN_CODE of the slurm tests

# slurm_up: starts (or joins) the local Slurm and exports SLURM_CONF; skips the test (exit 77) where
# it cannot run: not root, or no Slurm installed.
slurm_up() {
  local c
  for c in slurmctld slurmd munged srun sbatch; do
    if ! command -v "$c" >/dev/null 2>&1; then
      skip_test "'$c' not found (scripts/setup.sh installs slurm-wlm and munge)"
    fi
  done
  if [[ $(id -u) -ne 0 ]]; then
    skip_test "the local Slurm needs root to start its daemons"
  fi
  # A test run inside a real Slurm job must not talk to that cluster's allocation.
  local v
  for v in $(compgen -e); do
    if [[ $v == SLURM_* ]]; then unset "$v"; fi
  done
  export HPCTRAIN_SLURM_DIR=$SLURM_LOCAL_DIR
  exec {SLURM_USERS_FD}>"$SLURM_LOCAL_DIR.users"
  if ! flock -s -w 60 "$SLURM_USERS_FD"; then
    echo "FAIL: $SLURM_LOCAL_DIR.users stayed locked for 60 s (an instance being stopped?)" >&2
    exit 1
  fi
  trap slurm_down EXIT
  local was_running=0
  if "$SLURM_LOCAL" status --nodes host --dir "$SLURM_LOCAL_DIR" >/dev/null 2>&1; then
    was_running=1
  fi
  local started=0
  # --wait: another Slurm on the machine (the multi-node tests' cluster, run by another ctest) ends.
  timeout 250 "$SLURM_LOCAL" start --nodes host --dir "$SLURM_LOCAL_DIR" --timeout 60 --wait 150 \
    >"$TMP/slurm-start.txt" 2>&1 &&
    started=1
  # Marked even when the start failed, so that slurm_down clears what a failed start left behind.
  if ((was_running == 0)) && [[ -f $SLURM_LOCAL_DIR/slurm.conf ]]; then
    touch "$SLURM_LOCAL_MARK"
  fi
  if ((started == 0)); then
    echo "FAIL: scripts/slurm-sandbox.sh start failed:" >&2
    sed 's/^/    | /' "$TMP/slurm-start.txt" >&2
    exit 1
  fi
  export SLURM_CONF=$SLURM_LOCAL_DIR/slurm.conf
  echo "local Slurm: $(sinfo -h -o '%N %T %c CPUs' 2>/dev/null) ($( ((was_running)) && echo joined || echo started))"
}

# slurm_down (EXIT trap): on failure, shows the daemons' logs; stops the instance if a test started
# it and no other test uses it.
slurm_down() {
  local rc=$?
  if ((rc != 0 && rc != SLURM_SKIP)) || ((FAILURES > 0)); then
    local f
    for f in slurmctld.log slurmd.log; do
      if [[ -f $SLURM_LOCAL_DIR/$f ]]; then
        echo "--- last lines of $SLURM_LOCAL_DIR/$f" >&2
        tail -20 "$SLURM_LOCAL_DIR/$f" | sed 's/^/    | /' >&2
      fi
    done
  fi
  if [[ -n ${SLURM_USERS_FD:-} ]] && flock -n -x "$SLURM_USERS_FD" && [[ -f $SLURM_LOCAL_MARK ]]; then
    timeout 60 "$SLURM_LOCAL" stop --nodes host --dir "$SLURM_LOCAL_DIR" >"$TMP/slurm-stop.txt" 2>&1 ||
      echo "warning: scripts/slurm-sandbox.sh stop failed: $(cat "$TMP/slurm-stop.txt")" >&2
  fi
  exit "$rc"
}

# "${SRUN[@]}" ARGS...: srun with guards, usable as the command of expect_exit: the job may not wait
# for resources longer than 20 s (--immediate), Slurm ends it after its 1-minute limit (checked
# every ~30 s) and timeout ends srun (which then cancels its step) after 60 s.
SRUN=(timeout 60 srun --immediate=20 --time=1)

# slurm_wait_job JOBID SECONDS: waits until the job has ended; prints its final JobState and
# ExitCode ("COMPLETED 0:0"). Fails (status 1) when the job has not ended in time.
slurm_wait_job() {
  local id=$1 deadline=$((SECONDS + $2)) info state exit_code
  while ((SECONDS < deadline)); do
    info=$(timeout 10 scontrol show job "$id" 2>/dev/null)
    state=$(grep -o 'JobState=[A-Z_]*' <<<"$info" | cut -d= -f2)
    exit_code=$(grep -o ' ExitCode=[0-9:]*' <<<"$info" | cut -d= -f2)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | BOOT_FAIL | DEADLINE)
        echo "$state $exit_code"
        return 0
        ;;
    esac
    sleep 0.5
  done
  echo "${state:-UNKNOWN} (still not ended after $2 s)"
  return 1
}
