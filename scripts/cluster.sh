#!/bin/bash
# cluster.sh - a simulated cluster on this machine, for Stasis's tests and
# benchmarks (docs/cluster.md). As root.
#
#   scripts/cluster.sh up [N]            head + n1..nN (default 4); returns when Slurm shows every node idle
#   scripts/cluster.sh down              every process, namespace, mount and cgroup of the cluster gone
#                                        (or one line naming what is left, status 1)
#   scripts/cluster.sh exec NODE CMD...  run CMD on NODE, like ssh (= $STS_CLUSTER/bin/nodeexec NODE CMD...)
#   scripts/cluster.sh kill-node NODE [--wipe] [--keep-net]
#                                        node failure: SIGKILL of every process of NODE at once (its slurmd
#                                        too) and its cable unplugged; --wipe empties its node-local directory
#   scripts/cluster.sh start-node NODE   boot a killed node again
#   scripts/cluster.sh wait-state NODE REGEX [SECONDS]   until sinfo's state of NODE matches REGEX
#   scripts/cluster.sh status            nodes, processes, sinfo
#
# A node is a network namespace sts-NODE (eth0 on a bridge in namespace sts-sw, 10.78.0.0/24, no route
# out, no DNS) with its own UTS (hostname NODE), mount and IPC namespaces held by an anchor process, and a
# cgroup-v2 group, so that the whole node is killed at once. In a node: a private /dev/shm and /run (munge,
# slurmd's spool); its node-local directory, a tmpfs mounted on the host at $STS_CLUSTER/nodes/NODE/local,
# appears at $STS_CLUSTER/local (it survives kill-node unless --wipe, like a disk); $STS_CLUSTER/global and
# the rest of the file system are shared by every node (the parallel file system). No PID namespace:
# nodeexec works from the host and from any node. head (10.78.0.1) is the login and controller node
# (slurmctld, munge); n1..nN (10.78.0.11...) run slurmd. Run Slurm commands inside a node (exec head ...):
# on the host there is no slurm.conf and Slurm would look its controller up in DNS.
#
# Environment: STS_CLUSTER (/var/tmp/stasis-cluster)  STS_CLUSTER_CPUS (2 per node)
#   STS_CLUSTER_LOCAL (1g: size limit of each node-local tmpfs)  STS_CLUSTER_SLURMD_TIMEOUT (10)
#   STS_CLUSTER_MSG_TIMEOUT (3)  STS_CLUSTER_CRED_EXPIRE (10)  STS_CLUSTER_WAIT (60)
# Needs (scripts/deps.sh): iproute2, util-linux, munge, slurmctld, slurmd, slurm-client.
set -u
BASE=${STS_CLUSTER:-/var/tmp/stasis-cluster}
NNODES=$(cat "$BASE/nnodes" 2>/dev/null || echo 4)
CPUS=${STS_CLUSTER_CPUS:-2}
SHM=1g
LOCAL=${STS_CLUSTER_LOCAL:-1g}
WITH_SLURM=1
SLURMD_TIMEOUT=${STS_CLUSTER_SLURMD_TIMEOUT:-10}
MSG_TIMEOUT=${STS_CLUSTER_MSG_TIMEOUT:-3}
CRED_EXPIRE=${STS_CLUSTER_CRED_EXPIRE:-10}
WAIT=${STS_CLUSTER_WAIT:-60}
NET=10.78.0
BR=stsbr0
SW=sts-sw
SELF=$(readlink -f "$0")

die() { echo "cluster: $*" >&2; exit 1; }
log() { echo "[$(date +%T.%3N)] $*" >&2; }
now_ms() { local t; t=$(date +%s%N); echo $((t / 1000000)); }
computes() { local i; for ((i = 1; i <= NNODES; i++)); do echo n$i; done; }
allnodes() { echo head; computes; }
addr() { if [[ $1 == head ]]; then echo $NET.1; else echo $NET.$((10 + ${1#n})); fi; }
isnode() { [[ $1 == head ]] || { [[ $1 =~ ^n([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= NNODES)); }; }
((NNODES >= 1 && NNODES <= 200)) || die "the number of nodes must be 1..200"

# cgroup v2 hierarchy used to kill a whole node: pure v2 (/sys/fs/cgroup) or hybrid (/sys/fs/cgroup/unified)
CGROOT=
if true; then
  if [[ $(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null) == cgroup2fs ]]; then CGROOT=/sys/fs/cgroup/unified
  elif [[ $(stat -fc %T /sys/fs/cgroup 2>/dev/null) == cgroup2fs ]]; then CGROOT=/sys/fs/cgroup; fi
fi
CG=${CGROOT:+$CGROOT/stasis-cluster}

anchor_pid() { local p; p=$(cat "$BASE/nodes/$1/anchor.pid" 2>/dev/null) || return 1
  [[ -n $p && $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null) == "sts-anchor $1 "* ]] && echo "$p"; }

write_files() {
  mkdir -p "$BASE"/{bin,etc/slurm,log,run,state/slurmctld,global} "$BASE/local" || die "cannot create $BASE"
  local n
  for n in $(allnodes); do
    mkdir -p "$BASE/nodes/$n/local"
    if mountpoint -q "$BASE/nodes/$n/local"; then
      mount -o "remount,size=$LOCAL" "$BASE/nodes/$n/local" || die "node-local tmpfs of $n"
    else
      mount -t tmpfs -o "size=$LOCAL,mode=755" sts-local-$n "$BASE/nodes/$n/local" || die "node-local tmpfs of $n"
    fi
  done

  # nodeexec: "ssh" into a node; usable as plm_rsh_agent / -launcher-exec, from the host or from any node
  cat > "$BASE/bin/nodeexec.new" <<EOF
#!/bin/bash
# nodeexec [ssh options] HOST [CMD...]  - like ssh: the CMD words are joined and run by bash -c on HOST, in
# the caller's directory, with a fresh login-like environment (NODEEXEC_KEEPENV=1 keeps the caller's).
BASE=$BASE
CG=$CG
EOF
  cat >> "$BASE/bin/nodeexec.new" <<'EOF'
stdin_null=0
while [[ $# -gt 0 && $1 == -* ]]; do   # ssh options: Open MPI passes none, MPICH's hydra passes -x
  case $1 in -n) stdin_null=1; shift;; -[bcDEeFIiJLlmOopQRSWw]) shift 2;; --) shift; break;; *) shift;; esac
done
[[ $# -ge 1 ]] || { echo "usage: nodeexec HOST [CMD...]" >&2; exit 255; }
host=${1#*@}; shift
[[ -d $BASE/nodes/$host ]] || { echo "nodeexec: $host: unknown node" >&2; exit 255; }
anchor=$(cat "$BASE/nodes/$host/anchor.pid" 2>/dev/null) || { echo "nodeexec: $host: node is down" >&2; exit 255; }
[[ $(tr '\0' ' ' < /proc/$anchor/cmdline 2>/dev/null) == "sts-anchor $host "* ]] ||
  { echo "nodeexec: $host: node is down" >&2; exit 255; }
[[ -n $CG && -w $CG/$host/cgroup.procs ]] && echo $$ > "$CG/$host/cgroup.procs"   # now part of that node
((stdin_null)) && exec < /dev/null
[[ $# -eq 0 ]] && set -- exec /bin/bash -l
cwd=${PWD//\'/\'\\\'\'}
if [[ ${NODEEXEC_KEEPENV:-0} == 1 ]]; then envcmd=(env PATH="$BASE/bin:$PATH")
else envcmd=(env -i PATH="$BASE/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root
  USER=root LOGNAME=root SHELL=/bin/bash LANG=C.UTF-8 ${TERM:+TERM=$TERM}); fi
exec nsenter -t "$anchor" --net --uts --mount --ipc -- "${envcmd[@]}" /bin/bash -c "cd '$cwd' 2>/dev/null || cd; $*"
EOF
  chmod 755 "$BASE/bin/nodeexec.new"; mv "$BASE/bin/nodeexec.new" "$BASE/bin/nodeexec"
  ln -sfn nodeexec "$BASE/bin/ssh"     # PATH inside nodes starts with $BASE/bin: plain "ssh n2 cmd" works too

  { echo "127.0.0.1 localhost"; for n in $(allnodes); do echo "$(addr $n) $n"; done; } > "$BASE/etc/hosts"
  echo "# simulated cluster: no DNS" > "$BASE/etc/resolv.conf"
  [[ -s $BASE/etc/munge.key ]] || (umask 077; dd if=/dev/urandom of="$BASE/etc/munge.key" bs=1024 count=1 status=none)
  chmod 600 "$BASE/etc/munge.key"

  {
    cat <<EOF
# generated by scripts/cluster.sh; bind-mounted on /etc/slurm inside every node
ClusterName=stasis
SlurmctldHost=head($(addr head))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=$CRED_EXPIRE
StateSaveLocation=$BASE/state/slurmctld
SlurmdSpoolDir=/run/slurmd
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/nodes/%n/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$BASE/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SwitchType=switch/none
MailProg=/bin/true
MpiDefault=none
PlugStackConfig=$BASE/etc/slurm/plugstack.conf
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=$SLURMD_TIMEOUT
MessageTimeout=$MSG_TIMEOUT
SlurmctldTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=600
TmpFS=/run/slurm-tmp
NodeName=DEFAULT CPUs=$CPUS RealMemory=1000 State=UNKNOWN
EOF
    for n in $(computes); do echo "NodeName=$n NodeAddr=$(addr $n)"; done
    echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$BASE/etc/slurm/slurm.conf.new"
  mv "$BASE/etc/slurm/slurm.conf.new" "$BASE/etc/slurm/slurm.conf"
  : > "$BASE/etc/slurm/plugstack.conf"
}

# ---- the anchor of a node: runs in the node's netns (ip netns exec) and fresh uts+mount+ipc namespaces
nodeinit() {
  local n=$1 tgt fst opt
  set -e
  hostname "$n"
  mount -t tmpfs -o mode=755 sts-run-$n /run      # first, so nothing below writes into the host's /run
  # Slurm's spool and TmpFS live in the node's RAM (/run): a killed step leaves stepd.slurm.pmix.JOB.STEP sockets
  # and spmix_appdir_* dirs behind, which make a later step with the same ids fail (requeued job, or job ids
  # restarting after down/up: "Cannot bind() UNIX socket ... Address already in use")
  mkdir -p /run/munge /run/lock /run/slurmd /run/slurm-tmp; chmod 1777 /run/lock /run/slurm-tmp; ln -s /dev/shm /run/shm
  # ip netns exec mounted a fresh /sys (so /sys/class/net is the node's) without the cgroup mounts: rebuild the
  # host's /sys/fs/cgroup layout (slurmd 22.05 will not start without it; nodeexec needs the cgroup2 tree)
  while read -r tgt fst opt; do
    [[ -n $tgt ]] || continue
    opt=$(tr , '\n' <<< "$opt" | grep -vxE 'rw|ro|relatime|noatime|nosuid|nodev|noexec|seclabel' | paste -sd,)
    case $fst in
      tmpfs) mount -t tmpfs -o mode=755 sts-cgroup "$tgt" ;;
      cgroup) mkdir -p "$tgt"; mount -t cgroup -o "${opt:-none}" cgroup "$tgt" ;;
      cgroup2) mkdir -p "$tgt"; mount -t cgroup2 cgroup2 "$tgt" ;;
    esac
  done <<< "${STS_CGMOUNTS:-}"
  mount -t tmpfs -o "size=$SHM,mode=1777" sts-shm-$n /dev/shm
  mount --bind "$BASE/nodes/$n/local" "$BASE/local"
  mount --bind "$BASE/etc/hosts" /etc/hosts
  mount --bind "$BASE/etc/resolv.conf" /etc/resolv.conf
  [[ -d /etc/slurm ]] && mount --bind "$BASE/etc/slurm" /etc/slurm
  # own boot_id (new at every boot) and machine-id: UCX tells hosts apart by boot_id
  cat /proc/sys/kernel/random/uuid > "$BASE/nodes/$n/boot_id"
  mount --bind "$BASE/nodes/$n/boot_id" /proc/sys/kernel/random/boot_id
  [[ -s $BASE/nodes/$n/machine-id ]] || tr -d '-' < /proc/sys/kernel/random/uuid > "$BASE/nodes/$n/machine-id"
  [[ -e /etc/machine-id ]] && mount --bind "$BASE/nodes/$n/machine-id" /etc/machine-id
  exec -a "sts-anchor $n" sleep infinity
}

net_up() {
  [[ -e /run/netns/$SW ]] || ip netns add $SW || die "ip netns add $SW"
  ip -n $SW link show $BR >/dev/null 2>&1 || ip -n $SW link add $BR type bridge || die "bridge $BR"
  ip -n $SW link set lo up; ip -n $SW link set $BR up
  local n
  for n in $(allnodes); do
    [[ -e /run/netns/sts-$n ]] || ip netns add sts-$n || die "ip netns add sts-$n"
    if ! ip -n sts-$n link show eth0 >/dev/null 2>&1; then
      ip -n $SW link del v-$n 2>/dev/null
      ip link add v-$n netns $SW type veth peer name eth0 netns sts-$n || die "veth for $n"
      ip netns exec sts-$n sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null
      ip -n sts-$n addr add "$(addr $n)/24" dev eth0
    fi
    ip -n $SW link set v-$n master $BR up
    ip -n sts-$n link set lo up; ip -n sts-$n link set eth0 up
  done
}

boot_node() {   # anchor + daemons of one node (idempotent)
  local n=$1 i ne=$BASE/bin/nodeexec
  [[ -n $CG ]] && mkdir -p "$CG/$n"
  ip -n $SW link set v-$n up 2>/dev/null
  if ! anchor_pid $n >/dev/null; then
    rm -f "$BASE/nodes/$n/anchor.pid"
    STS_CGMOUNTS=$(findmnt -rn -R /sys/fs/cgroup -o TARGET,FSTYPE,OPTIONS 2>/dev/null) \
    setsid bash -c "${CG:+echo \$\$ > $CG/$n/cgroup.procs;} echo \$\$ > $BASE/nodes/$n/anchor.pid
      exec ip netns exec sts-$n unshare --uts --mount --ipc --propagation slave '$SELF' _nodeinit $n" \
      > "$BASE/log/anchor-$n.log" 2>&1 < /dev/null &
    for ((i = 0; i < 250; i++)); do anchor_pid $n > /dev/null && break; sleep 0.02; done
    anchor_pid $n > /dev/null || die "node $n did not come up: $(cat "$BASE/log/anchor-$n.log")"
  fi
  ((WITH_SLURM)) || return 0
  $ne $n "test -S /run/munge/munge.socket.2" ||
    $ne $n "munged --key-file=$BASE/etc/munge.key --socket=/run/munge/munge.socket.2 --pid-file=/run/munge/munged.pid \
            --log-file=$BASE/log/munged-$n.log --seed-file=$BASE/nodes/$n/munged.seed --num-threads=2" ||
    die "munged on $n failed (see $BASE/log/munged-$n.log)"
  if [[ $n == head ]]; then
    $ne head "kill -0 \$(cat $BASE/run/slurmctld.pid 2>/dev/null) 2>/dev/null" ||
      $ne head "slurmctld -i" || die "slurmctld failed (see $BASE/log/slurmctld.log)"
  else
    $ne $n "kill -0 \$(cat $BASE/nodes/$n/slurmd.pid 2>/dev/null) 2>/dev/null" ||
      $ne $n "slurmd" || die "slurmd on $n failed (see $BASE/log/slurmd-$n.log)"
  fi
}

kill_node_procs() {   # SIGKILL every process of node $1 and wait until they are gone
  local n=$1 i pids
  if [[ -n $CG && -d $CG/$n ]]; then
    echo 1 > "$CG/$n/cgroup.kill"
    for ((i = 0; i < 250; i++)); do grep -q '^populated 0' "$CG/$n/cgroup.events" && break; sleep 0.02; done
  fi
  # without cgroup v2 (or as a safety net): everything inside the node's network namespace, stopped first
  for ((i = 0; i < 100; i++)); do
    pids=$(ip netns pids sts-$n 2>/dev/null); [[ -z $pids ]] && break
    kill -STOP $pids 2>/dev/null; kill -KILL $pids 2>/dev/null; sleep 0.05
  done
  rm -f "$BASE/nodes/$n/anchor.pid" "$BASE/nodes/$n/slurmd.pid"
}

node_state() { "$BASE/bin/nodeexec" head "sinfo -h -n $1 -o %T" 2>/dev/null; }

wait_idle() {
  local t0=$SECONDS out
  while ((SECONDS - t0 < WAIT)); do
    out=$("$BASE/bin/nodeexec" head "sinfo -h -N -o '%N %T'" 2>/dev/null)
    if [[ -n $out ]] && ! grep -qvE ' (idle|mixed|allocated)$' <<< "$out" && (($(wc -l <<< "$out") == NNODES)); then return 0; fi
    sleep 0.1
  done
  echo "$out" >&2; return 1
}

cmd_up() {
  local t0 n pids=()
  t0=$(now_ms)
  [[ $(id -u) == 0 ]] || die "must run as root"
  if [[ -n ${1:-} ]]; then
    [[ $1 =~ ^[0-9]+$ ]] && (($1 >= 1 && $1 <= 200)) || die "up: the number of nodes must be 1..200, not '$1'"
    if anchor_pid head >/dev/null && [[ $1 != "$NNODES" ]]; then die "up: the cluster is up with $NNODES nodes: down first"; fi
    NNODES=$1
  elif ! anchor_pid head >/dev/null; then
    NNODES=4   # a fresh cluster without N: 4, not the count of the last one
  fi
  mkdir -p "$BASE" && echo "$NNODES" > "$BASE/nnodes"
  for c in ip nsenter unshare setsid findmnt; do command -v $c >/dev/null || die "missing $c"; done
  if ((WITH_SLURM)); then for c in munged slurmctld slurmd sinfo; do
    command -v $c >/dev/null || die "missing $c (apt-get install munge slurmctld slurmd slurm-client)"; done; fi
  if ! anchor_pid head >/dev/null; then   # a fresh cluster: from nothing (a down that never ended left
    teardown "up: the last cluster's remains are in the way" || exit 1   # nodes, tmpfs and their files)
    # fresh controller state, so job ids start at 1 again
    rm -rf "$BASE/state/slurmctld"
    [[ -s $BASE/log/jobcomp.txt ]] && mv -f "$BASE/log/jobcomp.txt" "$BASE/log/jobcomp.txt.prev"
  fi
  write_files
  [[ -n $CG ]] && mkdir -p "$CG"
  net_up
  boot_node head
  for n in $(computes); do boot_node $n & pids+=($!); done
  wait "${pids[@]}"
  if ((WITH_SLURM)); then wait_idle || die "nodes not idle after ${WAIT}s"; fi
  log "cluster up in $(($(now_ms) - t0)) ms: head=$(addr head) $(for n in $(computes); do printf '%s=%s ' $n $(addr $n); done)"
  log "try: $BASE/bin/nodeexec head sinfo    (ssh stand-in for mpirun/mpiexec: $BASE/bin/nodeexec)"
}

holders() {   # "<pid> <comm>" of each host process with its cwd, root or a descriptor under $1
  local p out=()
  for p in $(find /proc/[0-9]*/cwd /proc/[0-9]*/root /proc/[0-9]*/fd -maxdepth 1 \( -lname "$1" -o \
             -lname "$1/*" \) 2>/dev/null | cut -d/ -f3 | sort -un); do
    out+=("$p $(cat "/proc/$p/comm" 2>/dev/null)")
  done
  local IFS=,; echo "${out[*]:-none found}"
}

# Every layer of the tmpfs mounted on node-local directory $1 (a second `up` without the lock stacks
# one): unmounted, or, held by a process of the host (its cwd or a file there, which the nodes' deaths
# do not end), detached, said in one line: the next `up` must mount an empty one, not find this one
local_unmount() {
  local d=$1 i=0
  while mountpoint -q "$d" && ((i++ < 20)); do
    umount "$d" 2>/dev/null && continue
    echo "cluster: node-local directory $d is in use (pid $(holders "$d")): detached, its memory goes with them" >&2
    umount -l "$d" || return 1
  done
  ! mountpoint -q "$d"
}

leftovers() {   # what of the cluster is still there, comma-separated; empty when nothing
  local what=() n p
  for n in $(ip netns list 2>/dev/null | awk '$1 ~ /^sts-/ {print $1}'); do what+=("namespace $n"); done
  for p in $(pgrep -f '^sts-anchor '); do what+=("process $p ($(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null))"); done
  [[ -n $CG && -d $CG ]] && what+=("cgroup $CG ($(cat "$CG"/*/cgroup.procs 2>/dev/null | wc -l) processes)")
  for n in $(findmnt -rn -o TARGET | grep -F "$BASE/"); do what+=("mount $n"); done
  local IFS=,; echo "${what[*]}"
}

# Every process, namespace, cgroup and mount of the cluster gone (also of one whose down never ended:
# killed, timed out); 1 with one line naming what is left, after "cluster: $1: "
teardown() {
  local n left i
  for n in $( (allnodes; ls "$BASE/nodes" 2>/dev/null) | sort -u); do
    [[ -e /run/netns/sts-$n || ( -n $CG && -d $CG/$n ) ]] || continue
    kill_node_procs $n
    [[ -n $CG ]] && rmdir "$CG/$n" 2>/dev/null
    ip netns del sts-$n 2>/dev/null
  done
  # Open MPI's session directories of the nodes' launchers and daemons, in the /tmp the nodes share with the
  # host: a job killed on a node leaves its own (up to 50 MB a node)
  for n in $( (allnodes; ls "$BASE/nodes" 2>/dev/null) | sort -u); do rm -rf /tmp/ompi."$n".*; done
  ip netns del $SW 2>/dev/null
  [[ -n $CG && -d $CG ]] && rmdir "$CG" 2>/dev/null
  for n in "$BASE"/nodes/*/local; do [[ -d $n ]] && local_unmount "$n"; done
  rm -f "$BASE/run/"*.pid
  # ip(8) turned /run/netns into a (self-bind) mount point; undo that only if no namespace is left in it
  if [[ -d /run/netns && -z $(ls -A /run/netns 2>/dev/null) ]]; then
    while mountpoint -q /run/netns; do umount /run/netns 2>/dev/null || break; done
    rmdir /run/netns 2>/dev/null
  fi
  # a killed process may take a while to go on a loaded machine: its cgroup goes with it
  for ((i = 0; i < 50; i++)); do
    left=$(leftovers); [[ -z $left ]] && return 0
    [[ -n $CG && -d $CG ]] && rmdir "$CG"/*/ "$CG" 2>/dev/null
    sleep 0.1
  done
  echo "cluster: $1: $left" >&2
  return 1
}

cmd_down() {
  local t0
  t0=$(now_ms)
  teardown "down: left behind" || exit 1
  log "cluster down in $(($(now_ms) - t0)) ms"
}

cmd_kill_node() {
  local n=${1:-} a wipe=0 keepnet=0 t0
  isnode "$n" || die "kill-node: no node '$n'"
  shift
  for a in "$@"; do
    case $a in --wipe) wipe=1 ;; --keep-net) keepnet=1 ;; *) die "kill-node: unknown option '$a'" ;; esac
  done
  t0=$(now_ms)
  ((keepnet)) || ip -n $SW link set v-$n down 2>/dev/null
  kill_node_procs $n
  ((wipe)) && find "$BASE/nodes/$n/local" -mindepth 1 -delete
  log "node $n killed in $(($(now_ms) - t0)) ms$( ((keepnet)) && echo ' (network left up)')$( ((wipe)) && echo ', local directory wiped')"
}

cmd_wait_state() {
  local n=${1:-} re=${2:-} max=${3:-120} t0 s
  isnode "$n" && [[ -n $re ]] || die "usage: wait-state NODE REGEX [SECONDS]"
  t0=$(now_ms)
  while (($(now_ms) - t0 < max * 1000)); do
    s=$(node_state $n); [[ $s =~ $re ]] && { log "$n is $s after $(($(now_ms) - t0)) ms"; return 0; }
    sleep 0.2
  done
  log "$n still '$s' after ${max}s"; return 1
}

cmd_status() {
  local n p
  for n in $(allnodes); do
    if p=$(anchor_pid $n); then echo "$n $(addr $n) up   anchor=$p procs=$(ip netns pids sts-$n | wc -l)"
    else echo "$n $(addr $n) DOWN"; fi
  done
  if ((WITH_SLURM)) && anchor_pid head >/dev/null; then "$BASE/bin/nodeexec" head "sinfo -N -l"; fi
}

case ${1:-help} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  kill-node) shift; cmd_kill_node "$@" ;;
  start-node) shift; isnode "${1:-}" || die "start-node: no node '${1:-}'"; [[ -e /run/netns/sts-$1 ]] || die "the cluster is not up"
    boot_node "$1"; log "node $1 started" ;;
  wait-state) shift; cmd_wait_state "$@" ;;
  exec) shift; [[ -x $BASE/bin/nodeexec ]] || die "the cluster is not up"; exec "$BASE/bin/nodeexec" "$@" ;;
  status) cmd_status ;;
  _nodeinit) nodeinit "$2" ;;
  help|-h|--help) sed -n '2,/^set -u/p' "$SELF" | sed '$d' ;;
  *) echo "cluster: unknown command '$1' (up, down, exec, kill-node, start-node, wait-state, status, help)" >&2; exit 2 ;;
esac
