# shellcheck shell=bash disable=SC2034  # sourced by the multinode tests, which use the variables
# Helpers for the multinode tests (labels slurm;multinode), sourced after ../lib.sh: each test
# brings up its own two-node Slurm of scripts/slurm-sandbox.sh --nodes 2 (nodes n1 and n2, each a network +
# UTS namespace with its own slurmd) and removes it at exit, leaving no daemon, namespace, bridge
# or state directory behind.
#
# One Slurm at a time: these tests carry the ctest RESOURCE_LOCK "slurm" with the one-node Slurm
# tests, so one ctest never runs them together; against a Slurm someone else runs, the start waits
# (up to 150 s) and the test then skips, saying so. A flock on "$CLUSTER_DIR.users" keeps two
# ctest runs (two build directories) from sharing or stopping each other's cluster.

CLUSTER=${HPCTRAIN_SOURCE_DIR:?run through ctest}/scripts/slurm-sandbox.sh
CLUSTER_DIR=/tmp/hpctrain-cluster-test
CLUSTER_SKIP=77 # SKIP_RETURN_CODE of the slurm tests
# srun with guards: no waiting for resources beyond 20 s, Slurm's 2-minute limit, and timeout.
CSRUN=(timeout 120 srun --immediate=20 --time=2)

# cluster_up: starts the test's cluster and exports SLURM_CONF and HPCTRAIN_CLUSTER_AGENT; skips
# the test (exit 77) where it cannot run: not root, a tool missing, no network namespaces.
cluster_up() {
  local c
  for c in slurmctld slurmd munged srun sbatch ip unshare nsenter flock; do
    if ! command -v "$c" >/dev/null 2>&1; then
      skip_test "'$c' not found (scripts/setup.sh installs slurm-wlm, munge, iproute2 and util-linux)"
    fi
  done
  if [[ $(id -u) -ne 0 ]]; then
    skip_test "the multi-node Slurm needs root (network namespaces, Slurm daemons)"
  fi
  if ! unshare --net --uts true 2>"$TMP/unshare.txt"; then
    skip_test "cannot create network namespaces here: $(cat "$TMP/unshare.txt")"
  fi
  local v
  for v in $(compgen -e); do
    if [[ $v == SLURM_* ]]; then unset "$v"; fi
  done
  exec {CLUSTER_USERS_FD}>"$CLUSTER_DIR.users"
  if ! flock -x -w 300 "$CLUSTER_USERS_FD"; then
    echo "FAIL: another test kept the multi-node cluster ($CLUSTER_DIR.users) for 300 s" >&2
    exit 1
  fi
  trap cluster_down EXIT
  # A cluster left by a test that was killed (the lock says nobody uses it): clear it first.
  if [[ -e $CLUSTER_DIR ]]; then
    timeout 60 "$CLUSTER" stop --nodes 2 --dir "$CLUSTER_DIR" >"$TMP/cluster-clear.txt" 2>&1 ||
      echo "warning: clearing a leftover cluster failed: $(cat "$TMP/cluster-clear.txt")" >&2
  fi
  timeout 200 "$CLUSTER" start --dir "$CLUSTER_DIR" --nodes 2 --wait 150 \
    >"$TMP/cluster-start.txt" 2>&1
  local rc=$?
  if ((rc == 4)); then
    skip_test "another Slurm kept running on this machine for 150 s: $(grep -o 'another Slurm runs[^)]*)' "$TMP/cluster-start.txt")"
  elif ((rc != 0)); then
    echo "FAIL: scripts/slurm-sandbox.sh start failed:" >&2
    sed 's/^/    | /' "$TMP/cluster-start.txt" >&2
    exit 1
  fi
  export SLURM_CONF=$CLUSTER_DIR/slurm.conf
  # Four ranks share the machine's two cores: ranks waiting in MPI yield the core instead of
  # spinning (mpirun --oversubscribe does this itself; srun-started ranks do not know). Without it
  # a 2 x 2 step took ~300 ms, nearly all of it waiting in MPI (jobs/README.md).
  export OMPI_MCA_mpi_yield_when_idle=1
  export HPCTRAIN_CLUSTER_AGENT=$CLUSTER_DIR/mpirun-agent
  echo "cluster: $(sinfo -h -N -p debug -o '%N:%T' | tr '\n' ' ')"
}

# cluster_down (EXIT trap): on failure shows the daemons' logs; stops the cluster and checks that
# nothing of it is left.
cluster_down() {
  local rc=$?
  if ((rc != 0 && rc != CLUSTER_SKIP)) || ((FAILURES > 0)); then
    local f
    for f in "$CLUSTER_DIR"/slurmctld.log "$CLUSTER_DIR"/slurmd-*.log; do
      if [[ -f $f ]]; then
        echo "--- last lines of $f" >&2
        tail -15 "$f" | sed 's/^/    | /' >&2
      fi
    done
  fi
  if ! timeout 90 "$CLUSTER" stop --nodes 2 --dir "$CLUSTER_DIR" >"$TMP/cluster-stop.txt" 2>&1; then
    echo "FAIL: scripts/slurm-sandbox.sh stop failed: $(cat "$TMP/cluster-stop.txt")" >&2
    rc=1
  fi
  local left=""
  [[ -e $CLUSTER_DIR ]] && left+=" $CLUSTER_DIR"
  ip link show hpctrain-br >/dev/null 2>&1 && left+=" bridge hpctrain-br"
  grep -q " $CLUSTER_DIR/" /proc/mounts && left+=" mounts under $CLUSTER_DIR"
  if [[ -n $left ]]; then
    echo "FAIL: the cluster's stop left:$left" >&2
    rc=1
  fi
  exit "$rc"
}

# cluster_wait_job JOBID SECONDS: waits until the job has ended; prints "STATE EXIT" (e.g.
# "COMPLETED 0:0"). Fails when the job has not ended in time.
cluster_wait_job() {
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

# job_field JOBID FIELD: one field of `scontrol show job` (JobState, Restarts, NodeList ...).
job_field() {
  timeout 10 scontrol show job "$1" 2>/dev/null | grep -o " $2=[^ ]*" | head -1 | cut -d= -f2
}

# wait_requeued JOBID RESTARTS SECONDS: waits until the job is PENDING with Restarts >= RESTARTS,
# then releases Slurm's hold on requeued jobs (about 2 minutes, BeginTime) so it starts now.
wait_requeued() {
  local id=$1 want=$2 deadline=$((SECONDS + $3)) state restarts
  while ((SECONDS < deadline)); do
    state=$(job_field "$id" JobState)
    restarts=$(job_field "$id" Restarts)
    if [[ $state == PENDING && ${restarts:-0} -ge $want ]]; then
      # Released at once, the job may be scheduled while the previous run's credential is still
      # being revoked ("Killing non-startable batch job"): give the nodes a moment.
      sleep 3
      timeout 10 scontrol update JobId="$id" StartTime=now
      return 0
    fi
    sleep 0.5
  done
  echo "job $id: not requeued (state $state, restarts ${restarts:-0}) after $3 s" >&2
  return 1
}

# wait_for PATTERN FILE SECONDS: waits until FILE contains the (extended regex) PATTERN.
wait_for() {
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    grep -Eq -- "$1" "$2" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
