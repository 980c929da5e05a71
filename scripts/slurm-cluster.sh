#!/usr/bin/env bash
# A real multi-node Slurm on one machine, for tests and demos: each node is a network + UTS
# namespace with its own host name (n1, n2, ...) and address on a private bridge, running its own
# slurmd; slurmctld and a private munged run on the host. Test and demo facility only: it needs
# root, and it is not how a cluster is set up.
set -euo pipefail

usage() {
  cat <<EOF
usage: scripts/slurm-cluster.sh COMMAND [options]

A multi-node Slurm on this machine: nodes n1..nN, each a network + UTS namespace (host name nI,
address 10.200.0.(I+1) on the bridge hpctrain-br, 10.200.0.1 on the host) with its own slurmd;
slurmctld and a private munged on the host. Needs root and 'ip', 'unshare', 'nsenter'.

commands:
  start              create the nodes and start the daemons (ok if already running with the same
                     node count), wait until every node is idle, print the 'export ...' lines
  stop               cancel the jobs, end every daemon and process of the instance, remove the
                     namespaces, veths, bridge and the state directory
  status             exit 0 with sinfo/squeue when running, 3 when not
  env                print the 'export ...' lines only
  kill-node NODE     simulate a node failure: cut NODE's link (no packet leaves or reaches it, as
                     when a node loses power), then SIGKILL every process in it (slurmd,
                     slurmstepd, job processes)
  start-node NODE    bring a killed node back: link up, slurmd started; Slurm returns it to
                     service when it registers
  exec NODE CMD...   run CMD inside NODE's namespaces (its host name and network)

options:
  --nodes N     node count for start (default \$HPCTRAIN_CLUSTER_NODES, else 2; 1 to 9)
  --dir DIR     state directory (default \$HPCTRAIN_CLUSTER_DIR, else /tmp/hpctrain-cluster)
  --timeout S   how long start waits for the nodes to become idle (default 60)
  --wait S      how long start waits for another Slurm on this machine to end before refusing
                (default 0: refuse at once; exit status 4)

environment:
  HPCTRAIN_CLUSTER_CONF_EXTRA  extra slurm.conf lines appended at start (later keys win)

Only one Slurm runs on the machine at a time (the one-node scripts/slurm-local.sh or this):
start refuses, with exit status 4, while another slurmctld or slurmd runs.

mpirun without ssh: the state directory holds an agent that enters a node's namespaces;
  mpirun --mca plm_rsh_agent \$HPCTRAIN_CLUSTER_AGENT -H n1:2,n2:2 ...

Typical use:
  eval "\$(scripts/slurm-cluster.sh start | grep '^export')"
  srun -N 2 -n 4 --mpi=pmix build/bin/hpctrain env
  scripts/slurm-cluster.sh stop
EOF
}

die() {
  echo "slurm-cluster: error: $*" >&2
  exit 1
}
log() { echo "slurm-cluster: $*" >&2; }

cmd=${1:-}
[[ -n $cmd ]] || {
  usage >&2
  exit 2
}
shift
dir=${HPCTRAIN_CLUSTER_DIR:-/tmp/hpctrain-cluster}
nodes=${HPCTRAIN_CLUSTER_NODES:-2}
nodes_given=0
timeout_s=60
wait_other_s=0
node_arg=""
exec_args=()
case $cmd in
  kill-node | start-node)
    node_arg=${1:-}
    [[ -n $node_arg && $node_arg != -* ]] || die "$cmd needs a node name (n1, n2, ...)"
    shift
    ;;
  exec)
    node_arg=${1:-}
    [[ -n $node_arg && $node_arg != -* ]] || die "exec needs a node name and a command"
    shift
    (($# > 0)) || die "exec needs a command after the node name"
    exec_args=("$@")
    set --
    ;;
esac
while (($# > 0)); do
  case $1 in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --dir=*) dir=${1#--dir=}; shift ;;
    --nodes) nodes=${2:?--nodes needs a value}; nodes_given=1; shift 2 ;;
    --nodes=*) nodes=${1#--nodes=}; nodes_given=1; shift ;;
    --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
    --timeout=*) timeout_s=${1#--timeout=}; shift ;;
    --wait) wait_other_s=${2:?--wait needs a value}; shift 2 ;;
    --wait=*) wait_other_s=${1#--wait=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "slurm-cluster: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case $cmd in
  -h | --help | help) usage; exit 0 ;;
  start | stop | status | env | kill-node | start-node | exec) ;;
  *) echo "slurm-cluster: unknown command '$cmd'" >&2; usage >&2; exit 2 ;;
esac
[[ $nodes =~ ^[1-9]$ ]] || die "--nodes $nodes: give a node count from 1 to 9"
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}
conf=$dir/slurm.conf
nsdir=$dir/ns
agent=$dir/mpirun-agent
host=$(hostname -s)
bridge=hpctrain-br
subnet_prefix=10.200.0
ctld_port=6827 # the one-node scripts/slurm-local.sh uses Slurm's defaults, 6817 and 6818
slurmd_port=6828
munge_socket=$dir/munge/munge.socket
export SLURM_CONF=$conf

# The running instance's node count is recorded at start; other commands use it.
if [[ -s $dir/nodes && $cmd != start ]]; then nodes=$(<"$dir/nodes"); fi
node_names() {
  local i
  for ((i = 1; i <= nodes; i++)); do echo "n$i"; done
}
node_addr() { echo "$subnet_prefix.$((${1#n} + 1))"; }
veth_of() { echo "hpctrain-$1"; }
check_node() {
  if [[ ! $1 =~ ^n[1-9]$ ]] || ((${1#n} > nodes)); then
    die "no node '$1' (this instance has n1..n$nodes)"
  fi
}

# alive PIDFILE NAME: the pid in PIDFILE is a running process whose command is NAME.
alive() {
  local pid comm
  # The daemon removes its pid file as it exits: a read that fails is "not alive", not an error.
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
  [[ $comm == "$2" ]]
}

# stop_pid PIDFILE NAME: SIGTERM the daemon, wait up to 10 s, then SIGKILL it.
stop_pid() {
  local pidfile=$1 name=$2 pid i
  alive "$pidfile" "$name" || return 0
  pid=$(cat "$pidfile" 2>/dev/null) || return 0
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
  alive "$dir/slurmctld.pid" slurmctld || return 1
  local n
  for n in $(node_names); do
    [[ -f $dir/killed-$n ]] && continue
    alive "$dir/slurmd-$n.pid" slurmd || return 1
  done
}

# is_ours: the state directory is one this script made (its slurm.conf says so) or an empty one.
is_ours() {
  [[ -d $dir ]] || return 1
  if [[ -f $conf ]]; then
    head -1 "$conf" | grep -q "^# Generated by scripts/slurm-cluster.sh"
  else
    [[ -z $(ls -A "$dir") ]]
  fi
}

print_env() {
  echo "export SLURM_CONF=$conf"
  echo "export HPCTRAIN_CLUSTER_AGENT=$agent"
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root: it creates network namespaces and starts Slurm daemons (test/demo facility; on a cluster use the site's Slurm)"
}

# spawn CMD...: starts a daemon with no file descriptors of ours but stdin/out/err (see
# scripts/slurm-local.sh: an inherited lock or ctest pipe would be held for the daemon's life).
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

take_lock() {
  mkdir -p "$(dirname "$dir")"
  exec {lock_fd}>"$dir.lock"
  flock -w 120 "$lock_fd" || die "another slurm-cluster.sh holds $dir.lock for more than 120 s"
}

in_ns() {
  local n=$1
  shift
  nsenter --net="$nsdir/net-$n" --uts="$nsdir/uts-$n" -- "$@"
}

# ns_inode NODE: the inode of NODE's network namespace ("" when it does not exist).
ns_inode() {
  [[ -e $nsdir/net-$1 ]] || return 0
  grep -q " $nsdir/net-$1 " /proc/mounts || return 0
  stat -L -c %i "$nsdir/net-$1" 2>/dev/null || true
}

# ns_pids NODE: every process in NODE's network namespace (all of them ours: the namespace is).
ns_pids() {
  local inode p
  inode=$(ns_inode "$1")
  [[ -n $inode ]] || return 0
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/net" 2>/dev/null) == "net:[$inode]" ]] && echo "${p#/proc/}"
  done
  return 0
}

# kill_ns_processes NODE SIGNALS...: sends each signal in turn (1 s apart) to NODE's processes.
kill_ns_processes() {
  local n=$1 sig pids
  shift
  for sig in "$@"; do
    pids=$(ns_pids "$n" | tr '\n' ' ')
    [[ -n ${pids// /} ]] || return 0
    # shellcheck disable=SC2086  # one pid per word
    kill -"$sig" $pids 2>/dev/null || true
    if [[ $sig == KILL ]]; then sleep 0.2; else sleep 1; fi
  done
}

# other_slurm: prints the first slurmctld or slurmd on the machine that is not this instance's.
other_slurm() {
  local p cmdline mine=" "
  mine+="$(cat "$dir/slurmctld.pid" "$dir"/slurmd-*.pid 2>/dev/null | tr '\n' ' ') "
  for p in $(pgrep -x slurmctld) $(pgrep -x slurmd); do
    [[ $mine == *" $p "* ]] && continue
    cmdline=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
    [[ -n $cmdline ]] || continue # exiting
    echo "pid $p: $cmdline"
    return 0
  done
  return 1
}

start_munge() {
  if alive "$dir/munge/munged.pid" munged &&
    timeout 5 munge -n --socket="$munge_socket" 2>/dev/null | timeout 5 unmunge --socket="$munge_socket" >/dev/null 2>&1; then
    return 0
  fi
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  mkdir -p "$dir/munge"
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir/munge"
  # A private munged: its socket is a file, so it serves every node's namespace, and stop ends it
  # without touching a munged that other Slurm instances use.
  spawn runuser -u munge -- munged --force --socket="$munge_socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" || die "munged did not start; see $dir/munge/munged.log"
  local i
  for ((i = 0; i < 50; i++)); do
    if alive "$dir/munge/munged.pid" munged &&
      munge -n --socket="$munge_socket" 2>/dev/null | unmunge --socket="$munge_socket" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  die "munged started but 'munge -n | unmunge' fails; see $dir/munge/munged.log"
}

# make_node NODE: its namespaces (host name NODE), a veth pair into the bridge, address, routes.
make_node() {
  local n=$1 addr veth
  addr=$(node_addr "$n")
  veth=$(veth_of "$n")
  : >"$nsdir/net-$n"
  : >"$nsdir/uts-$n"
  unshare --net="$nsdir/net-$n" --uts="$nsdir/uts-$n" hostname "$n" ||
    die "cannot create the namespaces of $n (unshare --net --uts)"
  ip link add "$veth" type veth peer name eth0 netns "$nsdir/net-$n" ||
    die "cannot create the veth pair of $n"
  ip link set "$veth" master "$bridge" up
  in_ns "$n" ip link set lo up
  in_ns "$n" ip addr add "$addr/24" dev eth0
  in_ns "$n" ip link set eth0 up
  in_ns "$n" ip route add default via "$subnet_prefix.1"
}

make_network() {
  if ip link show "$bridge" >/dev/null 2>&1; then
    die "a network interface named $bridge exists but this instance has no state; remove it ('ip link del $bridge') if it is left over"
  fi
  if ip -4 addr show | grep -q "inet $subnet_prefix\."; then
    die "$subnet_prefix.0/24 is in use on this machine ($(ip -4 -o addr show | grep "inet $subnet_prefix\." | awk '{print $2}' | head -1)); the cluster needs it"
  fi
  mkdir -p "$nsdir"
  ip link add "$bridge" type bridge || die "cannot create the bridge $bridge (ip link add type bridge)"
  ip addr add "$subnet_prefix.1/24" dev "$bridge"
  ip link set "$bridge" up
  local n
  for n in $(node_names); do make_node "$n"; done
}

remove_network() {
  local f n
  for f in "$nsdir"/net-* "$nsdir"/uts-*; do
    [[ -e $f ]] || continue
    n=${f##*-}
    ip link del "$(veth_of "$n")" 2>/dev/null || true
    if grep -q " $f " /proc/mounts; then umount "$f" 2>/dev/null || umount -l "$f" || true; fi
  done
  if ip link show "$bridge" >/dev/null 2>&1; then ip link del "$bridge" || true; fi
}

write_conf() {
  local node_line mem cpus
  node_line=$(slurmd -C 2>/dev/null | head -1)
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
  cpus=$(nproc)
  [[ -n $mem ]] || mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024))
  local hw="CPUs=$cpus"
  if [[ $node_line =~ (CPUs=[0-9]+.*ThreadsPerCore=[0-9]+) ]]; then hw=${BASH_REMATCH[1]}; fi
  local n node_lines="" list
  for n in $(node_names); do
    node_lines+="NodeName=$n NodeHostname=$n NodeAddr=$(node_addr "$n") $hw RealMemory=$((mem * 95 / 100)) State=UNKNOWN"$'\n'
  done
  list=$(node_names | paste -sd, -)
  cat >"$conf" <<EOF
# Generated by scripts/slurm-cluster.sh: a $nodes-node Slurm on one machine for tests and demos.
ClusterName=hpctrain-cluster
SlurmctldHost=$host($subnet_prefix.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
MailProg=/bin/true
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
# One slurmd per node, each in its namespace; %n is the node name.
SlurmdSpoolDir=$dir/spool-%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/slurmd-%n.log
# Each node its own job temporary directory: the nodes share one file system, and PMIx makes the
# same /tmp/spmix_appdir_* name on every node.
TmpFS=$dir/tmp-%n
SlurmctldDebug=info
SlurmdDebug=info
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1
MessageTimeout=5
KillWait=10
MinJobAge=120
InactiveLimit=0
Waittime=0
# A node that stops answering is DOWN 30-40 s later (pings every SlurmdTimeout/3): after hpctrain's
# ranks have noticed (--peer-timeout 20 s), as on clusters, where SlurmdTimeout is minutes.
SlurmdTimeout=30
# Preemption: a job in partition urgent requeues the debug jobs it needs the nodes of.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
$node_lines
PartitionName=debug Nodes=$list Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1
PartitionName=urgent Nodes=$list MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=10
EOF
  if [[ -n ${HPCTRAIN_CLUSTER_CONF_EXTRA:-} ]]; then
    printf '# From HPCTRAIN_CLUSTER_CONF_EXTRA\n%s\n' "$HPCTRAIN_CLUSTER_CONF_EXTRA" >>"$conf"
  fi
}

write_agent() {
  # mpirun calls its rsh agent as "AGENT HOST COMMAND...": run the command in HOST's namespaces.
  cat >"$agent" <<EOF
#!/bin/sh
# mpirun launcher agent of scripts/slurm-cluster.sh: runs the command in the named node.
node=\$1
shift
[ -e "$nsdir/net-\$node" ] || { echo "mpirun-agent: no node '\$node' in $dir" >&2; exit 1; }
exec nsenter --net="$nsdir/net-\$node" --uts="$nsdir/uts-\$node" -- /bin/sh -c "\$*"
EOF
  chmod 0755 "$agent"
}

start_failed() {
  local f
  for f in "$dir"/daemons.out "$dir"/slurmctld.log "$dir"/slurmd-*.log; do
    if [[ -s $f ]]; then
      echo "--- last lines of $f" >&2
      tail -10 "$f" >&2
    fi
  done
  die "$1; the lines above say why, 'scripts/slurm-cluster.sh stop --dir $dir' cleans up"
}

start_slurmd() {
  local n=$1
  mkdir -p "$dir/spool-$n" "$dir/tmp-$n"
  spawn nsenter --net="$nsdir/net-$n" --uts="$nsdir/uts-$n" -- slurmd -f "$conf" -N "$n" ||
    start_failed "slurmd of $n did not start"
}

wait_idle() {
  local deadline=$((SECONDS + timeout_s)) states="" idle n
  while ((SECONDS < deadline)); do
    states=$(timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null) || true
    idle=0
    for n in $(node_names); do
      [[ -f $dir/killed-$n ]] && { idle=$((idle + 1)); continue; }
      grep -Eq "^$n (idle|mixed|allocated|completing)$" <<<"$states" && idle=$((idle + 1))
    done
    ((idle == nodes)) && return 0
    alive "$dir/slurmctld.pid" slurmctld || break
    sleep 0.5
  done
  start_failed "not every node became idle within ${timeout_s}s (sinfo: $(tr '\n' ';' <<<"$states"))"
}

do_start() {
  need_root
  local c
  for c in munged slurmctld slurmd sinfo srun sbatch scontrol ip unshare nsenter; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found: run scripts/setup.sh (Debian packages slurm-wlm, munge, iproute2, util-linux)"
  done
  take_lock
  local asked=$nodes have=""
  [[ -s $dir/nodes ]] && have=$(cat "$dir/nodes")
  if [[ -n $have && -f $conf ]]; then
    nodes=$have # whether the instance runs, by the node count it was started with
    if running && controller_up; then
      if ((nodes_given && have != asked)); then
        die "already running with $have nodes; 'stop' first to start with $asked"
      fi
      log "already running ($dir, $nodes nodes)"
      wait_idle
      print_env
      return 0
    fi
    nodes=$asked
  fi
  if [[ -e $dir ]]; then
    is_ours || die "$dir exists and is not a slurm-cluster.sh state directory; choose another --dir"
    log "clearing a stale instance in $dir"
    [[ -s $dir/nodes ]] && nodes_saved=$(<"$dir/nodes")
    stop_everything "${nodes_saved:-$nodes}"
  fi
  # One Slurm at a time on this machine.
  local other deadline=$((SECONDS + wait_other_s)) noted=0
  while other=$(other_slurm); do
    if ((SECONDS >= deadline)); then
      echo "slurm-cluster: error: another Slurm runs on this machine ($other); only one may run at a time: wait for it to end (start --wait S), or stop it ('scripts/slurm-local.sh stop' for the one-node Slurm)" >&2
      exit 4
    fi
    ((noted)) || log "another Slurm runs ($other); waiting up to ${wait_other_s}s for it to end"
    noted=1
    sleep 2
  done
  mkdir -p "$dir/state"
  chmod 0755 "$dir"
  echo "$nodes" >"$dir/nodes"
  write_conf
  write_agent
  make_network
  start_munge
  spawn slurmctld -f "$conf" || start_failed "slurmctld did not start"
  local n i
  for n in $(node_names); do start_slurmd "$n"; done
  for ((i = 0; i < 50; i++)); do
    running && break
    sleep 0.1
  done
  wait_idle
  log "running: nodes $(node_names | paste -sd' ' -) ($(sinfo -h -o %c | head -1) CPUs each, sharing this machine's cores), partition debug (state in $dir)"
  print_env
}

# stop_everything NODES: cancels the jobs, ends the daemons and every process in the nodes, removes
# the network and the namespaces. Only this instance's: pid files and namespaces, never by name.
stop_everything() {
  local saved=$nodes n
  nodes=$1
  if alive "$dir/slurmctld.pid" slurmctld && [[ -f $conf ]]; then
    local jobs i
    jobs=$(timeout 10 squeue -h -o %i 2>/dev/null) || true
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086  # one job id per word
      timeout 10 scancel --full $jobs 2>/dev/null || true
      # Jobs of a dead node stay COMPLETING: wait a little, not for them.
      for ((i = 0; i < 10; i++)); do
        [[ -z $(timeout 10 squeue -h -t running,completing -o %i 2>/dev/null) ]] && break
        sleep 0.5
      done
    fi
  fi
  for n in $(node_names); do stop_pid "$dir/slurmd-$n.pid" slurmd; done
  stop_pid "$dir/slurmctld.pid" slurmctld
  # slurmstepd and job processes outlive slurmd (proctrack/linuxproc): end them in each node.
  for n in $(node_names); do kill_ns_processes "$n" TERM KILL; done
  stop_pid "$dir/munge/munged.pid" munged
  remove_network
  nodes=$saved
  rm -rf "$dir"
}

do_stop() {
  need_root
  if [[ ! -e $dir ]]; then
    # Nothing of ours can be left without the state directory, but say so if the bridge is.
    if ip link show "$bridge" >/dev/null 2>&1; then
      log "warning: $dir does not exist but the interface $bridge does (removed)"
      ip link del "$bridge" || true
    fi
    log "not running ($dir does not exist)"
    return 0
  fi
  is_ours || die "$dir is not a slurm-cluster.sh state directory; not touching it"
  take_lock
  stop_everything "$nodes"
  log "stopped; removed $dir, the namespaces and $bridge"
}

do_status() {
  if [[ -f $conf ]] && running && controller_up; then
    echo "slurm-cluster: running ($dir, $nodes nodes, slurmctld pid $(cat "$dir/slurmctld.pid" 2>/dev/null))"
    print_env
    timeout 10 sinfo -N || true
    timeout 10 squeue || true
    return 0
  fi
  if [[ -e $dir ]]; then
    echo "slurm-cluster: not running (stale state in $dir; 'stop' clears it)"
  else
    echo "slurm-cluster: not running"
  fi
  return 3
}

do_kill_node() {
  need_root
  [[ -f $conf ]] || die "not running ($dir has no slurm.conf)"
  check_node "$node_arg"
  local n=$node_arg
  # The link first, so that nothing the node's processes send as they die (FIN, RST) reaches the
  # others: they see silence, as after a power loss.
  ip link set "$(veth_of "$n")" down
  touch "$dir/killed-$n"
  kill_ns_processes "$n" KILL KILL
  local left
  left=$(ns_pids "$n" | wc -l)
  ((left == 0)) || log "warning: $left process(es) of $n survived SIGKILL"
  log "killed $n: link down, every process in it ended"
}

do_start_node() {
  need_root
  [[ -f $conf ]] || die "not running ($dir has no slurm.conf)"
  check_node "$node_arg"
  local n=$node_arg
  ip link set "$(veth_of "$n")" up
  rm -f "$dir/killed-$n"
  if ! alive "$dir/slurmd-$n.pid" slurmd; then start_slurmd "$n"; fi
  log "started $n (Slurm returns it to service when its slurmd registers)"
}

do_exec() {
  [[ -f $conf ]] || die "not running ($dir has no slurm.conf)"
  check_node "$node_arg"
  exec nsenter --net="$nsdir/net-$node_arg" --uts="$nsdir/uts-$node_arg" -- "${exec_args[@]}"
}

case $cmd in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) print_env ;;
  kill-node) do_kill_node ;;
  start-node) do_start_node ;;
  exec) do_exec ;;
esac
