# Shell functions shared by the Slurm scripts (sourced, not run): slurm-start.sh and
# slurm-stop.sh (the one-node cluster), slurm-cluster.sh and slurm-cluster-stop.sh (the 3-node
# one). The scripts define say and fail (a message; a message and exit 1) before calling them.

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

# retry SECONDS COMMAND...: run COMMAND every 0.2 s until it succeeds or SECONDS pass.
retry() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

munge_answers() { munge -n | unmunge; }

# ensure_munged DIR MUNGED: a munged for the daemons' authentication (key /etc/munge/munge.key).
# The one whose PID file is DIR/munged.pid; else any other munged that answers on /run/munge (a
# socket path, so the 3-node cluster's network namespaces reach it too; a stop script stops only
# the munged of its own DIR); else binary MUNGED started now, its PID file and log in DIR.
ensure_munged() {
  local dir=$1 munged=$2 pid
  install -d -o munge -g munge -m 0755 "$dir" /run/munge
  if pid=$(running_pid "$dir/munged.pid" "$munged"); then
    say "munged is running (pid $pid)"
  elif munge_answers >/dev/null 2>&1; then
    say "a munged started elsewhere answers on /run/munge: using it (the stop script leaves it running)"
  else
    [[ -s /etc/munge/munge.key ]] || fail "no /etc/munge/munge.key; run scripts/slurm-start.sh once (it creates one)"
    say "starting munged"
    # --origin: munged otherwise looks its host name up; where that fails it stamps credentials
    # with 0.0.0.0 and slurmctld logs a failed lookup on every request.
    runuser -u munge -- "$munged" --origin=127.0.0.1 \
      --pid-file="$dir/munged.pid" --log-file="$dir/munged.log"
    retry 10 munge_answers || fail "munged does not answer; see $dir/munged.log"
  fi
}

# slurm_conf_common STATE PER_NODE: the slurm.conf lines both clusters share (authentication,
# plugins, scheduling, and the state, spool, PID and log files under STATE). PER_NODE=1: each
# slurmd's spool folder, PID file and log are named for its node (%n), for several slurmd.
slurm_conf_common() {
  local state=$1 spool=$1/spool slurmd=slurmd
  if (($2)); then spool+=/%n slurmd+=-%n; fi
  cat <<CONF
SlurmUser=root
AuthType=auth/munge
MpiDefault=none
# No cgroups: processes tracked by their parent chain, no CPU binding, no usage accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# Schedule batch jobs at once (the default holds them back up to 3 s).
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# The nodes' CPUs and memory below win over what slurmd detects, so a node is never marked
# invalid and may advertise more CPUs than the machine has.
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$spool
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/$slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/$slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# Seconds between SIGTERM and SIGKILL on scancel and at walltime (default 30): quick tests.
KillWait=5
# There is no accounting database, so no sacct: ended jobs stay visible to
# squeue -t all and scontrol show job for this many seconds.
MinJobAge=300
CONF
}

# install_conf NEW CONF: put file NEW in place of CONF when they differ; succeeds when it did.
install_conf() {
  cmp -s "$1" "$2" && return 1
  install -D -m 0644 "$1" "$2"
}

# probe_job TIMEOUT LOGS SBATCH_OPTION...: run one trivial batch job and wait until it ends
# COMPLETED. A freshly started slurmctld dispatches no batch job for a few seconds: paying for
# that here keeps the first test from paying for it (or timing out on it).
probe_job() {
  local timeout=$1 logs=$2 job deadline ended
  shift 2
  job=$(sbatch --parsable -o /dev/null "$@" --wrap true) || fail "the probe job could not be submitted"
  deadline=$((SECONDS + timeout))
  while [[ -n $(squeue -h -j "$job" -t PD,R,CG,CF -o %i 2>/dev/null) ]]; do
    ((SECONDS < deadline)) || fail "the probe job $job did not end within ${timeout} s; see $logs"
    sleep 0.1
  done
  ended=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [[ $ended == COMPLETED ]] || fail "the probe job $job ended $ended; see $logs"
}
