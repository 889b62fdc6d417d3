#!/usr/bin/env bash
# Start a real Slurm of one controller and three compute nodes on this machine, for the
# several-node tests (tests/multinode) and for trying arrays and dask workers across nodes by hand.
#
#   sudo scripts/slurm-cluster.sh        # prints the path of the cluster's slurm.conf
#   export SLURM_CONF=$(sudo scripts/slurm-cluster.sh)
#   sudo scripts/slurm-cluster-stop.sh   # removes everything this script made
#
# Each compute node (node1, node2, node3; CPUs=1 each) is its own network namespace
# (diffsoup-node1 ...) and UTS namespace (host name nodeN), joined to a bridge on the host by a
# veth pair, with its own slurmd, spool folder, log and PID file. The nodes and the controller
# share a private subnet (10.213.7.0/24 by default) that exists only on that bridge and in the
# namespaces: the controller (slurmctld, on the host) is 10.213.7.1, nodeN is 10.213.7.1N. Name
# resolution on the nodes comes from $STATE/etc/hosts, mounted over /etc/hosts in each slurmd's
# own mount namespace (its jobs inherit it); the host's own /etc/hosts is not touched. The file
# system is the host's, so the project folder and /tmp are shared by all nodes, as a cluster file
# system is, except the shared folder $STATE/shared (the campaign folder of tests/multinode): each
# node sees it through a FUSE view of its own, mounted over the same path in the node's mount
# namespace, as the nodes of a cluster see its shared file system. The default view is
# bindfs-nolock of scripts/sharedfs.sh: attributes cached 3 s, and locks (flock, fcntl) taken
# through one node's view exclude neither the other nodes' nor the host's (NFS with local locks,
# Lustre localflock). The host (the login node, where the tests' drivers run) sees the folder
# itself. Each view's bindfs runs in the node's network namespace, so a killed node loses it and
# scripts/slurm-cluster-stop.sh stops it with the node's other processes.
#
# This is a separate Slurm from scripts/slurm-start.sh's one-node cluster: its own slurm.conf
# (used through SLURM_CONF; /etc/slurm/slurm.conf is not touched), ClusterName, ports, state,
# spool, log and PID folders. It shares the host's munged (and its key) when one answers, else it
# starts its own. Running it again while the cluster is up does nothing but restart what is
# missing (a killed node's slurmd) and resume nodes left down. Needs root; the Slurm packages must
# be installed (scripts/slurm-start.sh installs them); iproute2 is installed when missing.
#
# Standard output holds one line: the path of the cluster's slurm.conf (also written to
# $STATE/cluster.env as DIFFSOUP_SLURM_CLUSTER=... and SLURM_CONF=..., with the shared folder as
# DIFFSOUP_SLURM3_SHARED=...). A node restarted by a second run gets the view of that run's
# DIFFSOUP_SLURM3_VIEW; the nodes still up keep theirs.
#
# Settings (environment variables):
#   DIFFSOUP_SLURM3_STATE    folder of its configuration, state, logs, PID files (default
#                            /tmp/diffsoup-slurm3)
#   DIFFSOUP_SLURM3_SUBNET   the first three numbers of the private /24 (default 10.213.7)
#   DIFFSOUP_SLURM3_PORT     slurmctld's port; slurmd's is the next one (default 6917)
#   DIFFSOUP_SLURM3_TIMEOUT  seconds to wait for the nodes and the probe job (default 60)
#   DIFFSOUP_SLURM3_VIEW     how the nodes see $STATE/shared: bindfs-nolock (default), or
#                            bindfs-locks (locks forwarded, as NFSv4 or Lustre flock), or host
#                            (the host's folder itself, no view)
set -euo pipefail

STATE=${DIFFSOUP_SLURM3_STATE:-/tmp/diffsoup-slurm3}
SUBNET=${DIFFSOUP_SLURM3_SUBNET:-10.213.7}
PORT=${DIFFSOUP_SLURM3_PORT:-6917}
TIMEOUT=${DIFFSOUP_SLURM3_TIMEOUT:-60}
PARTITION=multi
NODES=(node1 node2 node3)
CONTROLLER=$(hostname -s)
CONF=$STATE/etc/slurm.conf
SHARED=$STATE/shared
VIEW=${DIFFSOUP_SLURM3_VIEW:-bindfs-nolock}
export SLURM_CONF=$CONF

say() { printf '[slurm-cluster] %s\n' "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }

# shellcheck source=scripts/slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"

[[ $(id -u) -eq 0 ]] || fail "run me as root (I make network namespaces and start slurmctld and slurmd)"
[[ $PORT =~ ^[0-9]+$ && $PORT != 6817 && $PORT != 6818 ]] \
  || fail "DIFFSOUP_SLURM3_PORT=$PORT: give a port number other than the one-node cluster's 6817/6818"
if ! command -v ip >/dev/null; then
  say "installing iproute2 (ip netns, veth, bridge) from Debian's packages"
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends iproute2 >/dev/null \
    || fail "could not install iproute2; install it (it gives the ip command) and run me again"
fi
for tool in slurmctld slurmd sbatch ip nsenter unshare munge; do
  command -v "$tool" >/dev/null || fail "$tool is not installed; run scripts/slurm-start.sh once (it installs Slurm and munge)"
done
case $VIEW in
  bindfs-nolock) view_options=(-o attr_timeout=3,entry_timeout=3) ;;
  bindfs-locks) view_options=(--multithreaded --enable-lock-forwarding -o attr_timeout=3,entry_timeout=3) ;;
  host) view_options=() ;;
  *) fail "DIFFSOUP_SLURM3_VIEW=$VIEW: give bindfs-nolock, bindfs-locks or host" ;;
esac
if [[ $VIEW != host ]]; then
  command -v bindfs >/dev/null || fail "bindfs is not installed (the nodes' views of $SHARED): apt-get install bindfs, or run me with DIFFSOUP_SLURM3_VIEW=host"
  [[ -e /dev/fuse ]] || fail "no /dev/fuse: this kernel or container has no FUSE for the nodes' views; run me with DIFFSOUP_SLURM3_VIEW=host"
fi
SLURMCTLD=$(command -v slurmctld)
SLURMD=$(command -v slurmd)
MUNGED=$(command -v munged || echo /usr/sbin/munged)

mkdir -p "$STATE"/{etc,ctld,spool,log,run,shared}
chmod 1777 "$SHARED"  # as a cluster's scratch: every user's campaigns, each in a folder of its own

# -------------------------------------------------------------------- munge
ensure_munged "$STATE/munge" "$MUNGED"

# -------------------------------------------------------------------- slurm.conf
# Three nodes share this machine's memory: each advertises a quarter of it.
REAL_MEMORY=$(awk '/^MemTotal:/ { print int($2 / 1024 / 4) }' /proc/meminfo)
wanted=$(mktemp)
trap 'rm -f "$wanted"' EXIT
{
  cat <<CONF
# Written by diffsoup-campaign's scripts/slurm-cluster.sh: a 3-node Slurm in network namespaces.
# Edits are overwritten: change the script's settings instead.
ClusterName=diffsoup3
SlurmctldHost=${CONTROLLER}(${SUBNET}.1)
SlurmctldPort=${PORT}
SlurmdPort=$((PORT + 1))
$(slurm_conf_common "$STATE" 1)
# A node whose slurmd stops answering is marked DOWN after this many seconds (default 300), and
# its jobs end NODE_FAIL. Not requeued: the other elements take the tasks over by lease.
SlurmdTimeout=10
JobRequeue=0
CONF
  for i in "${!NODES[@]}"; do
    printf 'NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=1 Sockets=1 CoresPerSocket=1 ThreadsPerCore=1 RealMemory=%s State=UNKNOWN\n' \
      "${NODES[i]}" "$(node_address "$i")" "${NODES[i]}" "$REAL_MEMORY"
  done
  echo "PartitionName=$PARTITION Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$wanted"
changed=0
if install_conf "$wanted" "$CONF"; then
  changed=1
  say "wrote $CONF (${#NODES[@]} nodes, ${REAL_MEMORY} MB each, partition $PARTITION, ports $PORT/$((PORT + 1)))"
fi

# -------------------------------------------------------------------- network
# `ip netns add` makes /run/netns a mount point the first time: note that it was ours to undo.
if ! mountpoint -q /run/netns 2>/dev/null && [[ ! -e $STATE/run/netns-mount ]]; then
  touch "$STATE/run/netns-mount"
fi
if ! ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
  say "bridge $CLUSTER_BRIDGE at ${SUBNET}.1/24"
  ip link add "$CLUSTER_BRIDGE" type bridge
  ip addr add "${SUBNET}.1/24" dev "$CLUSTER_BRIDGE"
fi
ip link set "$CLUSTER_BRIDGE" up
hosts="127.0.0.1 localhost"$'\n'"${SUBNET}.1 ${CONTROLLER} controller"
for i in "${!NODES[@]}"; do hosts+=$'\n'"$(node_address "$i") ${NODES[i]}"; done
for i in "${!NODES[@]}"; do
  ns=$(node_netns "$i") veth=$(node_veth "$i")
  if ! ip netns list | grep -qw "^$ns"; then
    say "network namespace $ns: ${NODES[i]} at $(node_address "$i")"
    ip netns add "$ns"
  fi
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip netns exec "$ns" ip addr add "$(node_address "$i")/24" dev eth0
  fi
  ip link set "$veth" master "$CLUSTER_BRIDGE"
  ip link set "$veth" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set eth0 up
done
printf '%s\n' "$hosts" >"$STATE/etc/hosts"

# -------------------------------------------------------------------- daemons
ctld=$(running_pid "$STATE/run/slurmctld.pid" "$SLURMCTLD" || true)
slurmds=$(for node in "${NODES[@]}"; do running_pid "$STATE/run/slurmd-$node.pid" "$SLURMD" || true; done)
if ((changed)) && [[ -n $ctld$slurmds ]]; then
  say "the configuration changed: restarting the daemons"
  for pid in $slurmds $ctld; do kill -TERM "$pid"; done
  for pid in $slurmds $ctld; do
    retry 20 bash -c "! readlink /proc/$pid/exe" || fail "pid $pid did not stop"
  done
  ctld='' slurmds=''
fi
started_ctld=0
if [[ -z $ctld ]]; then
  # A cold start forgets the jobs of an earlier run.
  rm -rf "${STATE:?}"/ctld/* "${STATE:?}"/spool/* "${STATE:?}"/log/*
  say "starting slurmctld on ${SUBNET}.1:$PORT"
  "$SLURMCTLD" -f "$CONF" || fail "slurmctld did not start; see $STATE/log/slurmctld.log"
  started_ctld=1
fi
retry 30 bash -c 'scontrol ping | grep -q UP' || fail "slurmctld does not answer; see $STATE/log/slurmctld.log"
for i in "${!NODES[@]}"; do
  node=${NODES[i]}
  running_pid "$STATE/run/slurmd-$node.pid" "$SLURMD" >/dev/null && continue
  say "starting slurmd of $node in namespace $(node_netns "$i") ($(node_address "$i"))"
  mkdir -p "$STATE/spool/$node"
  # nsenter, not `ip netns exec`: that mounts a new /sys, without the cgroup file system slurmd
  # needs. A mount namespace of its own (private) for the node's /etc/hosts and its view of the
  # shared folder, and a UTS one for its host name; they last as long as slurmd and its jobs do.
  # bindfs mounts its view over the folder it shows (it opened the folder first).
  # The view's options are the arguments; the rest comes in the environment.
  NODE=$node HOSTS=$STATE/etc/hosts SHARED=$SHARED VIEW=$VIEW SLURMD_BIN=$SLURMD \
    nsenter --net="/run/netns/$(node_netns "$i")" unshare --mount --uts -- \
    sh -c 'mount --bind "$HOSTS" /etc/hosts && hostname "$NODE" \
             && { [ "$VIEW" = host ] || bindfs "$@" "$SHARED" "$SHARED"; } \
             && exec env -u HOSTS -u SHARED -u VIEW -u SLURMD_BIN -u NODE \
                  "$SLURMD_BIN" -f "$SLURM_CONF" -N "$NODE"' \
    sh "${view_options[@]}" \
    || fail "slurmd of $node did not start; see $STATE/log/slurmd-$node.log"
done

# -------------------------------------------------------------------- wait for the nodes
until=$((SECONDS + TIMEOUT))
resumes=0
while :; do
  states=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u)
  usable=$(awk '$2 ~ /^(idle|mix|alloc|comp)$/' <<<"$states" | wc -l)
  ((usable == ${#NODES[@]})) && break
  # Nodes left down by an earlier run (a test that killed one) or not yet registered.
  down=$(awk '$2 ~ /^(down|drain|drng|inval|fail)/ { print $1 }' <<<"$states" | paste -sd, -)
  if [[ -n $down ]] && ((resumes < 3)); then
    say "nodes $down are down: resuming them"
    scontrol update nodename="$down" state=resume 2>/dev/null || true
    resumes=$((resumes + 1))
  fi
  ((SECONDS < until)) || fail "nodes not usable after ${TIMEOUT} s: $(tr '\n' ' ' <<<"$states"); see $STATE/log/"
  sleep 0.2
done

# -------------------------------------------------------------------- probe job
# One job over all three nodes.
if ((started_ctld)); then
  probe_job "$TIMEOUT" "$STATE/log/" -J slurm-cluster-probe -N ${#NODES[@]}
fi

printf 'DIFFSOUP_SLURM_CLUSTER=%s\nSLURM_CONF=%s\nDIFFSOUP_SLURM3_SHARED=%s\n' "$CONF" "$CONF" "$SHARED" >"$STATE/cluster.env"
say "Slurm cluster diffsoup3 is up: ${NODES[*]} ($(sinfo -h -N -o '%N=%t' | tr '\n' ' '))slurmctld pid $(cat "$STATE/run/slurmctld.pid"); use it with SLURM_CONF=$CONF; stop it with scripts/slurm-cluster-stop.sh"
echo "$CONF"
