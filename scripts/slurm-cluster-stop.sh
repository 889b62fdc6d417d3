#!/usr/bin/env bash
# Stop the 3-node Slurm of scripts/slurm-cluster.sh and remove everything it made: cancel its
# jobs, stop each node's slurmd (by its PID file) and then every process left in the node's
# network namespace, stop slurmctld (and munged if that script started it), delete the
# namespaces, veth links and the bridge, and unmount /run/netns if the start made it a mount
# point. Nothing is stopped by name; the one-node cluster of scripts/slurm-start.sh is not
# touched. Safe to run when nothing runs.
set -euo pipefail

STATE=${DIFFSOUP_SLURM3_STATE:-/tmp/diffsoup-slurm3}
SUBNET=${DIFFSOUP_SLURM3_SUBNET:-10.213.7}
NODES=(node1 node2 node3)
export SLURM_CONF=$STATE/etc/slurm.conf
say() { printf '[slurm-cluster-stop] %s\n' "$*" >&2; }

# shellcheck source=scripts/slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"
alive() { readlink "/proc/$1/exe" >/dev/null 2>&1; }   # false for a zombie or a gone process
any_alive() { local pid; for pid; do alive "$pid" && return 0; done; return 1; }

SLURMCTLD=$(command -v slurmctld || echo /usr/sbin/slurmctld)
SLURMD=$(command -v slurmd || echo /usr/sbin/slurmd)
MUNGED=$(command -v munged || echo /usr/sbin/munged)

# stop NAME PID...: SIGTERM, then SIGKILL to those still alive after 10 s.
stop() {
  local name=$1 pid i; shift
  (($#)) || return 0
  say "$name: SIGTERM to $*"
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    any_alive "$@" || break
    sleep 0.2
  done
  for pid; do
    if alive "$pid"; then
      say "$name: pid $pid still running after 10 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

# 1. Cancel the cluster's jobs, so that their processes end in good order first.
if running_pid "$STATE/run/slurmctld.pid" "$SLURMCTLD" >/dev/null && [[ -r $SLURM_CONF ]]; then
  jobs=$(squeue -h -o '%A' 2>/dev/null | sort -u | tr '\n' ' ' || true)
  if [[ -n ${jobs// /} ]]; then
    say "cancelling jobs $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
    for ((i = 0; i < 75; i++)); do
      [[ -z $(squeue -h -t R,CG,CF -o '%A' 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
fi

# 2. Each node: its slurmd, then whatever still runs in its namespace (job steps, workers).
for i in "${!NODES[@]}"; do
  node=${NODES[i]} ns=$(node_netns "$i")
  pidfile=$STATE/run/slurmd-$node.pid
  if pid=$(running_pid "$pidfile" "$SLURMD"); then
    stop "slurmd of $node" "$pid"
  fi
  rm -f "$pidfile"
  if ip netns list 2>/dev/null | grep -qw "^$ns"; then
    mapfile -t left < <(ip netns pids "$ns" 2>/dev/null)
    stop "processes left in $ns" "${left[@]}"
  fi
done

# 3. The controller, and munged if slurm-cluster.sh started it.
for entry in "slurmctld:$STATE/run/slurmctld.pid:$SLURMCTLD" "munged:$STATE/munge/munged.pid:$MUNGED"; do
  IFS=: read -r name pidfile binary <<<"$entry"
  if pid=$(running_pid "$pidfile" "$binary"); then
    stop "$name" "$pid"
  fi
  rm -f "$pidfile"
done

# 4. The network: namespaces, veth links (the host end may outlive its namespace), the bridge.
for i in "${!NODES[@]}"; do
  ns=$(node_netns "$i") veth=$(node_veth "$i")
  if ip netns list 2>/dev/null | grep -qw "^$ns"; then
    say "deleting network namespace $ns"
    ip netns del "$ns"
  fi
  if ip link show "$veth" >/dev/null 2>&1; then
    ip link del "$veth" 2>/dev/null || true
  fi
done
if ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
  say "deleting bridge $CLUSTER_BRIDGE"
  ip link del "$CLUSTER_BRIDGE"
fi
if [[ -e $STATE/run/netns-mount ]]; then
  if [[ -z $(ls -A /run/netns 2>/dev/null) ]] && mountpoint -q /run/netns; then
    say "unmounting /run/netns (slurm-cluster.sh's first namespace made it a mount point)"
    umount /run/netns
  fi
  [[ -n $(ls -A /run/netns 2>/dev/null) ]] || rm -f "$STATE/run/netns-mount"
fi

# 5. Report what is left, without touching it (a deleted namespace's veth goes within moments).
links=("$CLUSTER_BRIDGE")
for i in "${!NODES[@]}"; do links+=("$(node_veth "$i")"); done
for ((i = 0; i < 25; i++)); do
  left=$(for link in "${links[@]}"; do
    if ip link show "$link" >/dev/null 2>&1; then echo "$link"; fi
  done)
  [[ -z $left ]] && break
  sleep 0.2
done
[[ -z $left ]] || say "WARNING: links still there: $left"
say "stopped"
