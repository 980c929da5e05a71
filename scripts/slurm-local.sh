#!/usr/bin/env bash
# A real one-machine Slurm (munged, slurmctld, slurmd on this host) for tests and demos.
# Test and demo facility only: it needs root, and it is not how a cluster is set up.
set -euo pipefail

usage() {
  cat <<EOF
usage: scripts/slurm-local.sh start|stop|status|env [--dir DIR] [--timeout S]

Brings up a real one-machine Slurm for tests and demos: munged (system socket), slurmctld and
slurmd on $(hostname), configured by a generated slurm.conf in a state directory. Needs root
(it starts daemons and writes /run/munge); it is a test/demo facility, not a cluster setup.

  start    start the daemons (ok if already running), wait until the node is idle, print the
           'export SLURM_CONF=...' line the Slurm client commands need
  stop     cancel the instance's jobs, stop the daemons this script started (by the pid files
           in the state directory) and remove the state directory
  status   say whether the instance runs (exit 0) or not (exit 3), with sinfo and squeue
  env      print the 'export SLURM_CONF=...' line only

options:
  --dir DIR    state directory (default \$HPCTRAIN_SLURM_DIR, else /tmp/hpctrain-slurm): slurm.conf,
               pid files, logs (slurmctld.log, slurmd.log), spool, job completion log
  --timeout S  how long start waits for the node to become idle (default 60)

environment:
  HPCTRAIN_SLURM_DIR         default state directory
  HPCTRAIN_SLURM_CONF_EXTRA  extra slurm.conf lines appended when the instance is started
                             (e.g. \$'KillWait=30\\nMinJobAge=300'); later keys win

Typical use:
  eval "\$(scripts/slurm-local.sh start | grep '^export')"
  srun -n 2 --mpi=pmix build/bin/hpctrain env
  scripts/slurm-local.sh stop
EOF
}

die() {
  echo "slurm-local: error: $*" >&2
  exit 1
}
log() { echo "slurm-local: $*" >&2; }

cmd=${1:-}
[[ -n $cmd ]] || {
  usage >&2
  exit 2
}
shift
dir=${HPCTRAIN_SLURM_DIR:-/tmp/hpctrain-slurm}
timeout_s=60
while (($# > 0)); do
  case $1 in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --dir=*) dir=${1#--dir=}; shift ;;
    --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
    --timeout=*) timeout_s=${1#--timeout=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "slurm-local: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case $cmd in
  -h | --help | help) usage; exit 0 ;;
  start | stop | status | env) ;;
  *) echo "slurm-local: unknown command '$cmd'" >&2; usage >&2; exit 2 ;;
esac
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}
conf=$dir/slurm.conf
host=$(hostname -s)
export SLURM_CONF=$conf

# alive PIDFILE NAME: the pid in PIDFILE is a running process whose command is NAME. Checking the
# name guards against a stale pid file whose number the kernel has since given to another process.
alive() {
  local pid comm
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$2" ]]
}

# stop_pid PIDFILE NAME: SIGTERM the daemon, wait up to 10 s, then SIGKILL it.
stop_pid() {
  local pidfile=$1 name=$2 pid i
  alive "$pidfile" "$name" || return 0
  pid=$(<"$pidfile")
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    alive "$pidfile" "$name" || return 0
    sleep 0.1
  done
  log "$name (pid $pid) ignored SIGTERM for 10 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

controller_up() { timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"; }

running() {
  alive "$dir/slurmctld.pid" slurmctld && alive "$dir/slurmd.pid" slurmd
}

print_env() { echo "export SLURM_CONF=$conf"; }

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root: it starts munged, slurmctld and slurmd (test/demo facility; on a cluster use the site's Slurm)"
}

# spawn CMD...: starts a daemon with no file descriptors of ours but stdin/out/err, which go to
# /dev/null and daemons.out. A daemon that inherited the lock below, or the pipe ctest reads a
# test's output from, would hold it open for as long as it runs (ctest would wait for it).
spawn() {
  (
    local fd_path fd
    for fd_path in /proc/"$BASHPID"/fd/*; do
      fd=${fd_path##*/}
      if ((fd > 2)); then eval "exec $fd>&-"; fi
    done
    exec "$@" </dev/null >>"$dir/daemons.out" 2>&1
  )
}

# Serialize start and stop (ctest, a developer and a demo may race). The lock file sits beside the
# state directory because stop removes the directory.
take_lock() {
  mkdir -p "$(dirname "$dir")"
  exec {lock_fd}>"$dir.lock"
  flock -w 120 "$lock_fd" || die "another slurm-local.sh holds $dir.lock for more than 120 s"
}

start_munge() {
  if timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; then
    log "munged already runs (not started by this script; stop leaves it)"
    return 0
  fi
  # Debian's package creates the key at install time; a stripped image may lack it.
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  chmod 0755 /run/munge
  # --force: start despite a stale socket left by a munged that was killed.
  spawn runuser -u munge -- munged --force || die "munged did not start; see /var/log/munge/munged.log"
  local i
  for ((i = 0; i < 50; i++)); do
    if [[ -s /run/munge/munged.pid ]] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
      cp /run/munge/munged.pid "$dir/munged.pid"
      return 0
    fi
    sleep 0.1
  done
  die "munged started but 'munge -n | unmunge' fails; see /var/log/munge/munged.log"
}

write_conf() {
  # slurmd -C reports this machine's sockets, cores, threads and memory exactly as slurmd will
  # see them; a node configured with more than that would be marked invalid.
  local node_line mem cpus
  node_line=$(slurmd -C 2>/dev/null | head -1)
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
  cpus=$(nproc)
  [[ -n $mem ]] || mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024))
  if [[ $node_line =~ (CPUs=[0-9]+.*ThreadsPerCore=[0-9]+) ]]; then
    node_line="NodeName=$host ${BASH_REMATCH[1]} RealMemory=$((mem * 95 / 100))"
  else
    node_line="NodeName=$host CPUs=$cpus RealMemory=$((mem * 95 / 100))"
  fi
  cat >"$conf" <<EOF
# Generated by scripts/slurm-local.sh: a one-machine Slurm for tests and demos.
ClusterName=hpctrain-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
MailProg=/bin/true
# State, pids, logs and spool in the state directory, so an instance is one removable folder.
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No slurmdbd: sacct has no data. Finished jobs stay visible to 'scontrol show job' for MinJobAge
# seconds, and every finished job gets a line (JobState, ExitCode, ...) in the completion log.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
# Short intervals so tests are quick: schedule at submit time without the 3 s batch delay, rerun
# the scheduler every few seconds (requeued jobs wait for it), time out messages quickly, and
# give a job KillWait seconds between SIGTERM and SIGKILL (time limit, scancel).
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1
MessageTimeout=5
KillWait=10
MinJobAge=60
InactiveLimit=0
Waittime=0
SlurmdTimeout=60
$node_line State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  if [[ -n ${HPCTRAIN_SLURM_CONF_EXTRA:-} ]]; then
    printf '# From HPCTRAIN_SLURM_CONF_EXTRA\n%s\n' "$HPCTRAIN_SLURM_CONF_EXTRA" >>"$conf"
  fi
}

wait_idle() {
  local deadline=$((SECONDS + timeout_s)) state=""
  while ((SECONDS < deadline)); do
    state=$(timeout 10 sinfo -h -n "$host" -o %T 2>/dev/null | head -1) || true
    case $state in
      idle | mixed | allocated | completing) return 0 ;;
    esac
    alive "$dir/slurmctld.pid" slurmctld || break
    alive "$dir/slurmd.pid" slurmd || break
    sleep 0.5
  done
  log "the node did not become idle within ${timeout_s}s (state: '${state:-no answer}')"
  local f
  for f in slurmctld.log slurmd.log; do
    [[ -f $dir/$f ]] && { echo "--- last lines of $dir/$f" >&2; tail -15 "$dir/$f" >&2; }
  done
  die "start failed; the logs above say why, 'scripts/slurm-local.sh stop --dir $dir' cleans up"
}

do_start() {
  need_root
  for c in munged slurmctld slurmd sinfo srun sbatch scontrol; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found: run scripts/setup.sh (Debian packages slurm-wlm, munge)"
  done
  take_lock
  if running && controller_up; then
    log "already running ($dir)"
    wait_idle
    print_env
    return 0
  fi
  if [[ -e $dir ]]; then
    # A half-started or crashed instance: clear it before starting afresh.
    log "clearing a stale instance in $dir"
    stop_daemons
    rm -rf "$dir"
  fi
  mkdir -p "$dir/state" "$dir/spool"
  chmod 0755 "$dir"
  start_munge
  write_conf
  spawn slurmctld -f "$conf" || die "slurmctld did not start; see $dir/slurmctld.log"
  spawn slurmd -f "$conf" || die "slurmd did not start; see $dir/slurmd.log"
  # Both daemons fork into the background and write their pid files a moment later.
  local i
  for ((i = 0; i < 50; i++)); do
    running && break
    sleep 0.1
  done
  wait_idle
  log "running: $host, $(sinfo -h -o '%c CPUs, partition %P') (state in $dir)"
  print_env
}

# Cancels what is left of the instance's jobs so their slurmstepd processes end with them, then
# stops the daemons recorded in the state directory. Only those: never by name.
stop_daemons() {
  if alive "$dir/slurmctld.pid" slurmctld && [[ -f $conf ]]; then
    if [[ -n $(timeout 10 squeue -h -o %i 2>/dev/null) ]]; then
      timeout 10 scancel --full --partition=debug 2>/dev/null || true
      local i
      for ((i = 0; i < 30; i++)); do
        [[ -z $(timeout 10 squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.5
      done
    fi
  fi
  stop_pid "$dir/slurmd.pid" slurmd
  stop_pid "$dir/slurmctld.pid" slurmctld
  if [[ -f $dir/munged.pid ]]; then
    stop_pid "$dir/munged.pid" munged
  fi
}

do_stop() {
  need_root
  [[ -e $dir ]] || {
    log "not running ($dir does not exist)"
    return 0
  }
  [[ -f $conf ]] || [[ -f $dir/slurmctld.pid ]] || die "$dir does not look like a slurm-local.sh state directory; not touching it"
  take_lock
  stop_daemons
  rm -rf "$dir"
  log "stopped; removed $dir"
}

do_status() {
  if running && controller_up; then
    echo "slurm-local: running ($dir, slurmctld pid $(<"$dir/slurmctld.pid"), slurmd pid $(<"$dir/slurmd.pid"))"
    print_env
    timeout 10 sinfo || true
    timeout 10 squeue || true
    return 0
  fi
  if [[ -e $dir ]]; then
    echo "slurm-local: not running (stale state in $dir; 'stop' clears it)"
  else
    echo "slurm-local: not running"
  fi
  return 3
}

case $cmd in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) print_env ;;
esac
