#!/usr/bin/env bash
# A real Slurm on this one machine, for tests and demos: one node (this host itself) or several
# (n1, n2, ..., each a network + UTS namespace with its own host name and address on a private
# bridge, running its own slurmd). Test and demo facility only: it needs root, and it is not how a
# cluster is set up.
set -euo pipefail

usage() {
  cat <<EOF
usage: scripts/slurm-sandbox.sh COMMAND [--nodes host|N] [options]

A real Slurm on this machine for tests and demos. Needs root (it starts daemons, and with nodes
in namespaces creates them); not a cluster setup.

  --nodes host  (default) one node, this machine: munged (system socket), slurmctld and slurmd
                on $(hostname -s) with Slurm's default ports; state in /tmp/hpctrain-slurm
  --nodes N     nodes n1..nN (1 to 9), each a network + UTS namespace (host name nI, address
                10.200.0.(I+1) on the bridge hpctrain-br, 10.200.0.1 on the host) with its own
                slurmd; slurmctld and a private munged on the host; ports 6827 and 6828; state in
                /tmp/hpctrain-cluster. Needs 'ip', 'unshare', 'nsenter'

commands:
  start              start the daemons (ok if already running with the same nodes), wait until
                     every node is idle, print the 'export ...' lines the Slurm clients need
  stop               cancel the jobs, end every daemon and process of the instance (its pid
                     files and namespaces only, never by name), remove its network and state
  status             exit 0 with sinfo/squeue when running, 3 when not
  env                print the 'export ...' lines only
  kill-node NODE     (nodes in namespaces) simulate a node failure: cut NODE's link (no packet
                     leaves or reaches it, as when a node loses power), then SIGKILL every process
                     in it (slurmd, slurmstepd, job processes)
  start-node NODE    bring a killed node back: link up, slurmd started; Slurm returns it to
                     service when it registers
  exec NODE CMD...   run CMD inside NODE's namespaces (its host name and network)

options:
  --dir DIR     state directory (default: \$HPCTRAIN_SLURM_DIR or /tmp/hpctrain-slurm for host,
                \$HPCTRAIN_CLUSTER_DIR or /tmp/hpctrain-cluster for nodes; without --nodes, stop,
                status and env take the one that exists): slurm.conf, pid files, logs, spool, job
                completion log. The commands after start read the nodes from it.
  --timeout S   how long start waits for the nodes to become idle (default 60)
  --wait S      how long start waits for another Slurm on this machine to end before refusing
                (default 0: refuse at once; exit status 4)

environment:
  HPCTRAIN_SLURM_NODES       default for --nodes (host)
  HPCTRAIN_SLURM_CONF_EXTRA  extra slurm.conf lines appended at start (later keys win), e.g.
                             \$'KillWait=30\\nMinJobAge=300' (HPCTRAIN_CLUSTER_CONF_EXTRA too)

Only one Slurm runs on the machine at a time: start refuses, with exit status 4, while another
slurmctld or slurmd runs.

mpirun without ssh (nodes in namespaces): the state directory holds an agent that enters a node;
  mpirun --mca plm_rsh_agent \$HPCTRAIN_CLUSTER_AGENT -H n1:2,n2:2 ...

Typical use:
  eval "\$(scripts/slurm-sandbox.sh start | grep '^export')"             # this host
  eval "\$(scripts/slurm-sandbox.sh start --nodes 2 | grep '^export')"   # n1, n2
  srun -N 2 -n 4 --mpi=pmix build/bin/hpctrain env
  scripts/slurm-sandbox.sh stop [--nodes 2]
EOF
}

die() {
  echo "slurm-sandbox: error: $*" >&2
  exit 1
}
log() { echo "slurm-sandbox: $*" >&2; }

# ---- Command line ------------------------------------------------------------------------------

cmd=${1:-}
[[ -n $cmd ]] || {
  usage >&2
  exit 2
}
shift
nodes=${HPCTRAIN_SLURM_NODES:-host}
nodes_given=0
dir=""
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
    *) echo "slurm-sandbox: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case $cmd in
  -h | --help | help) usage; exit 0 ;;
  start | stop | status | env | kill-node | start-node | exec) ;;
  *) echo "slurm-sandbox: unknown command '$cmd'" >&2; usage >&2; exit 2 ;;
esac
[[ $nodes == host || $nodes =~ ^[1-9]$ ]] ||
  die "--nodes $nodes: give 'host' (this machine) or a node count from 1 to 9"
host_dir=${HPCTRAIN_SLURM_DIR:-/tmp/hpctrain-slurm}
nodes_dir=${HPCTRAIN_CLUSTER_DIR:-/tmp/hpctrain-cluster}
if [[ -z $dir ]]; then
  # The default state directory follows the nodes: given, implied (node commands), or, for stop,
  # status and env, whichever default instance exists.
  case $cmd in
    kill-node | start-node | exec) dir=$nodes_dir ;;
    start) [[ $nodes == host ]] && dir=$host_dir || dir=$nodes_dir ;;
    *)
      if ((nodes_given)); then
        [[ $nodes == host ]] && dir=$host_dir || dir=$nodes_dir
      elif [[ ! -e $host_dir && -e $nodes_dir ]]; then
        dir=$nodes_dir
      else
        dir=$host_dir
      fi
      ;;
  esac
fi
[[ $dir == /* ]] || dir=$PWD/$dir
dir=${dir%/}
# A running instance's nodes are recorded at start; the other commands use them.
if [[ -s $dir/nodes && $cmd != start ]]; then nodes=$(<"$dir/nodes"); fi
conf=$dir/slurm.conf
host=$(hostname -s)
conf_extra=${HPCTRAIN_SLURM_CONF_EXTRA:-${HPCTRAIN_CLUSTER_CONF_EXTRA:-}}
# Nodes in namespaces: a private bridge and network, a private munged, ports of their own.
nsdir=$dir/ns
agent=$dir/mpirun-agent
bridge=hpctrain-br
subnet_prefix=10.200.0
munge_socket=$dir/munge/munge.socket
export SLURM_CONF=$conf

namespaced() { [[ $nodes != host ]]; }
node_names() {
  if ! namespaced; then
    echo "$host"
    return 0
  fi
  local i
  for ((i = 1; i <= nodes; i++)); do echo "n$i"; done
}
node_count() { if namespaced; then echo "$nodes"; else echo 1; fi; }
node_addr() { echo "$subnet_prefix.$((${1#n} + 1))"; }
veth_of() { echo "hpctrain-$1"; }
slurmd_pidfile() { if namespaced; then echo "$dir/slurmd-$1.pid"; else echo "$dir/slurmd.pid"; fi; }
check_node() {
  namespaced || die "$cmd needs nodes in namespaces (start --nodes N); this instance is the host"
  if [[ ! $1 =~ ^n[1-9]$ ]] || ((${1#n} > nodes)); then
    die "no node '$1' (this instance has n1..n$nodes)"
  fi
}

# ---- Processes ----------------------------------------------------------------------------------

# alive PIDFILE NAME: the pid in PIDFILE is a running process whose command is NAME. Checking the
# name guards against a stale pid file whose number the kernel has since given to another process.
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
    alive "$(slurmd_pidfile "$n")" slurmd || return 1
  done
}

# is_ours: the state directory is one this script made (its slurm.conf says so) or an empty one;
# start and stop remove it, so they must never be pointed at anything else.
is_ours() {
  [[ -d $dir ]] || return 1
  if [[ -f $conf ]]; then
    head -1 "$conf" | grep -q "^# Generated by scripts/slurm-sandbox.sh"
  else
    [[ -z $(ls -A "$dir") ]]
  fi
}

print_env() {
  echo "export SLURM_CONF=$conf"
  if namespaced; then echo "export HPCTRAIN_CLUSTER_AGENT=$agent"; fi
  return 0
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "needs root: it starts munged, slurmctld and slurmd (and creates network namespaces for nodes in them); a test/demo facility, on a cluster use the site's Slurm"
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
  flock -w 120 "$lock_fd" || die "another slurm-sandbox.sh holds $dir.lock for more than 120 s"
}

# other_slurm: prints the first slurmctld or slurmd on the machine that is not this instance's.
other_slurm() {
  local p cmdline mine=" "
  mine+="$(cat "$dir/slurmctld.pid" "$dir"/slurmd*.pid 2>/dev/null | tr '\n' ' ') "
  for p in $(pgrep -x slurmctld) $(pgrep -x slurmd); do
    [[ $mine == *" $p "* ]] && continue
    cmdline=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
    [[ -n $cmdline ]] || continue # exiting (a daemon's parent while it forks into the background)
    echo "pid $p: $cmdline"
    return 0
  done
  return 1
}

# ---- Nodes in namespaces -------------------------------------------------------------------------

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
    die "$subnet_prefix.0/24 is in use on this machine ($(ip -4 -o addr show | grep "inet $subnet_prefix\." | awk '{print $2}' | head -1)); the nodes need it"
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

write_agent() {
  # mpirun calls its rsh agent as "AGENT HOST COMMAND...": run the command in HOST's namespaces.
  cat >"$agent" <<EOF
#!/bin/sh
# mpirun launcher agent of scripts/slurm-sandbox.sh: runs the command in the named node.
node=\$1
shift
[ -e "$nsdir/net-\$node" ] || { echo "mpirun-agent: no node '\$node' in $dir" >&2; exit 1; }
exec nsenter --net="$nsdir/net-\$node" --uts="$nsdir/uts-\$node" -- /bin/sh -c "\$*"
EOF
  chmod 0755 "$agent"
}

# ---- Start ----------------------------------------------------------------------------------------

# The host's own munged (system socket), left running by stop when it was not started here; nodes
# in namespaces get a private one (its socket is a file, so it serves every node's namespace, and
# stop ends it without touching a munged that other Slurm instances use).
munge_ok() {
  if namespaced; then
    alive "$dir/munge/munged.pid" munged &&
      timeout 5 munge -n --socket="$munge_socket" 2>/dev/null |
      timeout 5 unmunge --socket="$munge_socket" >/dev/null 2>&1
  else
    timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1
  fi
}

start_munge() {
  if munge_ok; then
    namespaced || log "munged already runs (not started by this script; stop leaves it)"
    return 0
  fi
  # Debian's package creates the key at install time; a stripped image may lack it.
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  local munge_log
  if namespaced; then
    mkdir -p "$dir/munge"
    chown munge:munge "$dir/munge"
    chmod 0755 "$dir/munge"
    munge_log=$dir/munge/munged.log
    spawn runuser -u munge -- munged --force --socket="$munge_socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$munge_log" \
      --seed-file="$dir/munge/munged.seed" || die "munged did not start; see $munge_log"
  else
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
    chmod 0755 /run/munge
    munge_log=/var/log/munge/munged.log
    # --force: start despite a stale socket left by a munged that was killed.
    spawn runuser -u munge -- munged --force || die "munged did not start; see $munge_log"
  fi
  local i
  for ((i = 0; i < 50; i++)); do
    if namespaced && munge_ok; then return 0; fi
    if ! namespaced && [[ -s /run/munge/munged.pid ]] && munge_ok; then
      cp /run/munge/munged.pid "$dir/munged.pid" # stop ends the munged it started, only that one
      return 0
    fi
    sleep 0.1
  done
  die "munged started but 'munge -n | unmunge' fails; see $munge_log"
}

write_conf() {
  # slurmd -C reports this machine's sockets, cores, threads and memory exactly as slurmd will
  # see them; a node configured with more than that would be marked invalid.
  local node_line mem cpus hw
  node_line=$(slurmd -C 2>/dev/null | head -1)
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
  cpus=$(nproc)
  [[ -n $mem ]] || mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024))
  hw="CPUs=$cpus"
  if [[ $node_line =~ (CPUs=[0-9]+.*ThreadsPerCore=[0-9]+) ]]; then hw=${BASH_REMATCH[1]}; fi
  hw+=" RealMemory=$((mem * 95 / 100))"
  local site nodes_conf list n
  list=$(node_names | paste -sd, -)
  if namespaced; then
    site="# Generated by scripts/slurm-sandbox.sh: a $nodes-node Slurm on one machine for tests and demos.
ClusterName=hpctrain-cluster
SlurmctldHost=$host($subnet_prefix.1)
# Ports of their own: the one-node instance uses Slurm's defaults, 6817 and 6818.
SlurmctldPort=6827
SlurmdPort=6828
AuthInfo=socket=$munge_socket
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
# One slurmd per node, each in its namespace; %n is the node name.
SlurmdSpoolDir=$dir/spool-%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/slurmd-%n.log
# Each node its own job temporary directory: the nodes share one file system, and PMIx makes the
# same /tmp/spmix_appdir_* name on every node.
TmpFS=$dir/tmp-%n
MinJobAge=120
# A node that stops answering is DOWN 30-40 s later (pings every SlurmdTimeout/3): after hpctrain's
# ranks have noticed (--peer-timeout 20 s), as on clusters, where SlurmdTimeout is minutes.
SlurmdTimeout=30
# Preemption: a job in partition urgent requeues the debug jobs it needs the nodes of.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE"
    nodes_conf=""
    for n in $(node_names); do
      nodes_conf+="NodeName=$n NodeHostname=$n NodeAddr=$(node_addr "$n") $hw State=UNKNOWN"$'\n'
    done
    nodes_conf+="PartitionName=debug Nodes=$list Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1
PartitionName=urgent Nodes=$list MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=10"
  else
    # Slurm finds its daemons by host name; where the name does not resolve, use the loopback.
    local ctld_host=$host node_addr=""
    if ! getent hosts "$host" >/dev/null 2>&1; then
      ctld_host="$host(127.0.0.1)"
      node_addr=" NodeAddr=127.0.0.1"
    fi
    site="# Generated by scripts/slurm-sandbox.sh: a one-machine Slurm for tests and demos.
ClusterName=hpctrain-local
SlurmctldHost=$ctld_host
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdSpoolDir=$dir/spool
SlurmdPidFile=$dir/slurmd.pid
SlurmdLogFile=$dir/slurmd.log
MinJobAge=60
SlurmdTimeout=60"
    nodes_conf="NodeName=$host $hw$node_addr State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  fi
  cat >"$conf" <<EOF
$site
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
InactiveLimit=0
Waittime=0
$nodes_conf
EOF
  if [[ -n $conf_extra ]]; then
    printf '# From HPCTRAIN_SLURM_CONF_EXTRA\n%s\n' "$conf_extra" >>"$conf"
  fi
}

# start_failed WHAT: says why a start failed (the daemons' own output and log tails) and exits.
start_failed() {
  local f
  for f in "$dir"/daemons.out "$dir"/slurmctld.log "$dir"/slurmd*.log; do
    if [[ -s $f ]]; then
      echo "--- last lines of $f" >&2
      tail -15 "$f" >&2
    fi
  done
  die "$1; the lines above say why, 'scripts/slurm-sandbox.sh stop --dir $dir' cleans up"
}

start_slurmd() {
  local n=$1
  if namespaced; then
    mkdir -p "$dir/spool-$n" "$dir/tmp-$n"
    spawn nsenter --net="$nsdir/net-$n" --uts="$nsdir/uts-$n" -- slurmd -f "$conf" -N "$n" ||
      start_failed "slurmd of $n did not start"
  else
    spawn slurmd -f "$conf" || start_failed "slurmd did not start"
  fi
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
    ((idle == $(node_count))) && return 0
    alive "$dir/slurmctld.pid" slurmctld || break
    sleep 0.5
  done
  start_failed "not every node became idle within ${timeout_s}s (sinfo: $(tr '\n' ';' <<<"$states"))"
}

do_start() {
  need_root
  local c tools=(munged slurmctld slurmd sinfo srun sbatch scontrol)
  namespaced && tools+=(ip unshare nsenter)
  for c in "${tools[@]}"; do
    command -v "$c" >/dev/null 2>&1 || die "'$c' not found: run scripts/setup.sh (Debian packages slurm-wlm, munge, iproute2, util-linux)"
  done
  take_lock
  local asked=$nodes have="" saved=""
  [[ -s $dir/nodes ]] && have=$(<"$dir/nodes")
  if [[ -n $have && -f $conf ]]; then
    nodes=$have # whether the instance runs, by the nodes it was started with
    if running && controller_up; then
      if ((nodes_given)) && [[ $have != "$asked" ]]; then
        die "already running with nodes '$have'; 'stop' first to start with '$asked'"
      fi
      log "already running ($dir, nodes $(node_names | paste -sd' ' -))"
      wait_idle
      print_env
      return 0
    fi
    nodes=$asked
  fi
  if [[ -e $dir ]]; then
    is_ours || die "$dir exists and is not a slurm-sandbox.sh state directory; choose another --dir"
    # A half-started or crashed instance: clear it before starting afresh.
    log "clearing a stale instance in $dir"
    [[ -s $dir/nodes ]] && saved=$(<"$dir/nodes")
    stop_everything "${saved:-$nodes}"
  fi
  # One Slurm at a time on this machine (ports, the host's munged, the bridge).
  local other deadline=$((SECONDS + wait_other_s)) noted=0
  while other=$(other_slurm); do
    if ((SECONDS >= deadline)); then
      echo "slurm-sandbox: error: another Slurm runs on this machine ($other); only one may run at a time: wait for it to end (start --wait S), or stop it ('scripts/slurm-sandbox.sh stop --dir DIR' where this script started it)" >&2
      exit 4
    fi
    ((noted)) || log "another Slurm runs ($other); waiting up to ${wait_other_s}s for it to end"
    noted=1
    sleep 2
  done
  mkdir -p "$dir/state"
  namespaced || mkdir -p "$dir/spool"
  chmod 0755 "$dir"
  echo "$nodes" >"$dir/nodes"
  if namespaced; then
    write_conf
    write_agent
    make_network
    start_munge
  else
    start_munge
    write_conf
  fi
  spawn slurmctld -f "$conf" || start_failed "slurmctld did not start"
  local n i
  for n in $(node_names); do start_slurmd "$n"; done
  # The daemons fork into the background and write their pid files a moment later.
  for ((i = 0; i < 50; i++)); do
    running && break
    sleep 0.1
  done
  wait_idle
  log "running: nodes $(node_names | paste -sd' ' -) ($(sinfo -h -o %c | head -1) CPUs each$(namespaced && echo ", sharing this machine's cores")), partition debug (state in $dir)"
  print_env
}

# ---- Stop ------------------------------------------------------------------------------------------

# The host node's step daemons (slurmstepd) of jobs that could not be cancelled (slurmctld already
# dead) outlive slurmd, and with proctrack/linuxproc so do the job's processes. This instance's
# slurmstepd run in the state directory: end them and their descendants, and nothing else.
kill_leftover_steps() {
  local p pids=() sig
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd && $(readlink "$p/cwd" 2>/dev/null) == "$dir" ]] &&
      pids+=("${p#/proc/}")
  done
  ((${#pids[@]} > 0)) || return 0
  # Collect the process trees first: once a slurmstepd dies its children are reparented.
  local tree=("${pids[@]}") i=0 child
  while ((i < ${#tree[@]})); do
    for child in $(ps -o pid= --ppid "${tree[i]}" 2>/dev/null); do tree+=("$child"); done
    i=$((i + 1))
  done
  log "ending ${#pids[@]} leftover job step daemon(s) and their processes: ${tree[*]}"
  for sig in TERM KILL; do
    kill -"$sig" "${tree[@]}" 2>/dev/null || true
    sleep 1
  done
}

# stop_everything NODES: cancels the jobs, ends the daemons and every process of the instance,
# removes its network and the state directory. Only this instance's: pid files and namespaces,
# never by name.
stop_everything() {
  local saved=$nodes n
  nodes=$1
  if alive "$dir/slurmctld.pid" slurmctld && [[ -f $conf ]]; then
    local jobs i
    jobs=$(timeout 10 squeue -h -o %i 2>/dev/null) || true
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086  # one job id per word
      timeout 10 scancel --full $jobs 2>/dev/null || true
      # A dead node's jobs stay COMPLETING: wait a little, not for them.
      for ((i = 0; i < 30; i++)); do
        [[ -z $(timeout 10 squeue -h -t running,completing -o %i 2>/dev/null) ]] && break
        sleep 0.5
      done
    fi
  fi
  for n in $(node_names); do stop_pid "$(slurmd_pidfile "$n")" slurmd; done
  stop_pid "$dir/slurmctld.pid" slurmctld
  if namespaced; then
    # slurmstepd and job processes outlive slurmd (proctrack/linuxproc): end them in each node.
    for n in $(node_names); do kill_ns_processes "$n" TERM KILL; done
    stop_pid "$dir/munge/munged.pid" munged
    remove_network
  else
    kill_leftover_steps
    [[ -f $dir/munged.pid ]] && stop_pid "$dir/munged.pid" munged
  fi
  nodes=$saved
  rm -rf "$dir"
}

do_stop() {
  need_root
  if [[ ! -e $dir ]]; then
    # Nothing of ours can be left without the state directory, but say so if the bridge is.
    if namespaced && ip link show "$bridge" >/dev/null 2>&1; then
      log "warning: $dir does not exist but the interface $bridge does (removed)"
      ip link del "$bridge" || true
    fi
    log "not running ($dir does not exist)"
    return 0
  fi
  is_ours || die "$dir is not a slurm-sandbox.sh state directory; not touching it"
  take_lock
  stop_everything "$nodes"
  log "stopped; removed $dir$(namespaced && echo ", the namespaces and $bridge")"
}

do_status() {
  if [[ -f $conf ]] && running && controller_up; then
    echo "slurm-sandbox: running ($dir, nodes $(node_names | paste -sd' ' -), slurmctld pid $(cat "$dir/slurmctld.pid" 2>/dev/null))"
    print_env
    timeout 10 sinfo -N || true
    timeout 10 squeue || true
    return 0
  fi
  if [[ -e $dir ]]; then
    echo "slurm-sandbox: not running (stale state in $dir; 'stop' clears it)"
  else
    echo "slurm-sandbox: not running"
  fi
  return 3
}

# ---- Node failure ------------------------------------------------------------------------------

do_kill_node() {
  need_root
  [[ -f $conf ]] || die "not running ($dir has no slurm.conf)"
  check_node "$node_arg"
  local n=$node_arg left
  # The link first, so that nothing the node's processes send as they die (FIN, RST) reaches the
  # others: they see silence, as after a power loss.
  ip link set "$(veth_of "$n")" down
  touch "$dir/killed-$n"
  kill_ns_processes "$n" KILL KILL
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
  if ! alive "$(slurmd_pidfile "$n")" slurmd; then start_slurmd "$n"; fi
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
