# Shell functions shared by slurm-start.sh and slurm-stop.sh (sourced, not run).

# running_pid PIDFILE BINARY: print the PID in PIDFILE if that process is alive and runs BINARY.
running_pid() {
  local pid exe
  [[ -r $1 ]] || return 1
  pid=$(tr -dc '0-9' <"$1")
  [[ -n $pid ]] || return 1
  exe=$(readlink -f "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ $exe == "$(readlink -f "$2" 2>/dev/null)" ]] || return 1
  echo "$pid"
}

# The 3-node cluster of slurm-cluster.sh and slurm-cluster-stop.sh: node I (0, 1, 2) is nodeI+1,
# in network namespace diffsoup-nodeI+1, joined to bridge ds3-br by veth ds3-nodeI+1 (host end),
# at address $SUBNET.1I+1; the controller is $SUBNET.1 on the bridge.
CLUSTER_BRIDGE=ds3-br
node_netns() { echo "diffsoup-node$(($1 + 1))"; }
node_veth() { echo "ds3-node$(($1 + 1))"; }
node_address() { echo "$SUBNET.1$(($1 + 1))"; }
