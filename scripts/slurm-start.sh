#!/usr/bin/env bash
# Start a real one-node Slurm cluster on this machine for the tests and for trying
# execution="slurm" and `campaign submit` by hand: munged, slurmctld and slurmd from Debian's
# packages, started directly (no systemd needed), everything on loopback.
#
#   sudo scripts/slurm-start.sh          # install (first time), configure, start, probe
#   scripts/slurm-stop.sh                # stop exactly what this script started
#
# Running it again while the cluster is up with the same configuration does nothing. It writes
# /etc/slurm/slurm.conf (and /etc/munge/munge.key when missing); all state, logs and PID files
# live under $DIFFSOUP_SLURM_STATE. Needs root, and Debian's apt mirror on the first run.
#
# Settings (environment variables):
#   DIFFSOUP_SLURM_STATE      folder for state, logs and PID files  (default /tmp/diffsoup-slurm)
#   DIFFSOUP_SLURM_PARTITION  the partition's name                  (default debug)
#   DIFFSOUP_SLURM_CPUS       CPUs the node advertises              (default 8: more than this
#                             machine has, so that a 4-element array and several dask workers
#                             of one CPU each run at once on a 2-core machine)
#   DIFFSOUP_SLURM_TIMEOUT    seconds to wait for the node and the probe job (default 60)
#   DIFFSOUP_SLURM_KEEP_STATE 1 = keep the jobs of an earlier run on a cold start (default 0)
set -euo pipefail

STATE=${DIFFSOUP_SLURM_STATE:-/tmp/diffsoup-slurm}
PARTITION=${DIFFSOUP_SLURM_PARTITION:-debug}
CPUS=${DIFFSOUP_SLURM_CPUS:-8}
TIMEOUT=${DIFFSOUP_SLURM_TIMEOUT:-60}
KEEP_STATE=${DIFFSOUP_SLURM_KEEP_STATE:-0}
NODE=$(hostname -s)
CONF=/etc/slurm/slurm.conf
MUNGE_RUN=/run/munge            # where libmunge looks for munged's socket

say() { printf '[slurm-start] %s\n' "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "run me as root (I install packages and start munged, slurmctld and slurmd)"
[[ $CPUS =~ ^[1-9][0-9]*$ ]] || fail "DIFFSOUP_SLURM_CPUS=$CPUS is not a positive integer"

# shellcheck source=scripts/slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"

# retry SECONDS COMMAND...: run COMMAND every 0.2 s until it succeeds or SECONDS pass.
retry() {
  local until=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < until)) || return 1
    sleep 0.2
  done
}

# -------------------------------------------------------------------- packages
missing=()
for pkg in munge slurmctld slurmd slurm-client; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  # Wait for another apt or dpkg instead of failing on its lock.
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  # The packages' scripts try to start the services and cannot without systemd; that is
  # harmless, the daemons are started below. No recommends: 8 packages instead of ~40.
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
SLURMCTLD=$(command -v slurmctld)
SLURMD=$(command -v slurmd)
MUNGED=$(command -v munged || echo /usr/sbin/munged)

mkdir -p "$STATE"/{ctld,spool,log,run}
install -d -o munge -g munge -m 0755 "$STATE/munge" "$MUNGE_RUN"

# -------------------------------------------------------------------- munge (authentication)
if [[ ! -s /etc/munge/munge.key ]]; then
  say "creating /etc/munge/munge.key"
  install -d -o munge -g munge -m 0700 /etc/munge
  mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0600 /etc/munge/munge.key

munge_answers() { munge -n | unmunge; }
if pid=$(running_pid "$STATE/munge/munged.pid" "$MUNGED"); then
  say "munged is running (pid $pid)"
elif munge_answers >/dev/null 2>&1; then
  say "a munged that this script did not start answers on $MUNGE_RUN: using it, and slurm-stop.sh will leave it alone"
else
  say "starting munged"
  # --origin: munged otherwise looks its host name up; where that fails it stamps credentials
  # with 0.0.0.0 and slurmctld logs a failed lookup on every request.
  runuser -u munge -- "$MUNGED" --origin=127.0.0.1 \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log"
  retry 10 munge_answers || fail "munged does not answer; see $STATE/munge/munged.log"
fi

# -------------------------------------------------------------------- slurm.conf
# RealMemory: Slurm's default (1 MB) refuses every job that asks for memory, and dask-jobqueue
# always asks (--mem); above the memory slurmd finds, the node is invalid. Take 90 % of it.
REAL_MEMORY=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
wanted=$(mktemp)
trap 'rm -f "$wanted"' EXIT
cat >"$wanted" <<CONF
# Written by diffsoup-campaign's scripts/slurm-start.sh: a one-node Slurm for tests.
# Edits are overwritten: change the script's settings instead.
ClusterName=diffsoup
# Host names may not resolve here: give every address as 127.0.0.1.
SlurmctldHost=${NODE}(127.0.0.1)
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
# The node's CPUs and memory below win over what slurmd detects, so the node is never marked
# invalid and may advertise more CPUs than the machine has.
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# Seconds between SIGTERM and SIGKILL on scancel and at walltime (default 30): quick tests.
KillWait=5
# There is no accounting database, so no sacct: ended jobs stay visible to
# squeue -t all and scontrol show job for this many seconds.
MinJobAge=300
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${CPUS} Sockets=1 CoresPerSocket=${CPUS} ThreadsPerCore=1 RealMemory=${REAL_MEMORY} State=UNKNOWN
PartitionName=${PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
changed=0
if ! cmp -s "$wanted" "$CONF"; then
  install -D -m 0644 "$wanted" "$CONF"
  changed=1
  say "wrote $CONF (node $NODE, $CPUS CPUs, ${REAL_MEMORY} MB, partition $PARTITION)"
fi

# -------------------------------------------------------------------- daemons
ctld=$(running_pid "$STATE/run/slurmctld.pid" "$SLURMCTLD" || true)
slurmd=$(running_pid "$STATE/run/slurmd.pid" "$SLURMD" || true)
if ((changed)) && [[ -n $ctld$slurmd ]]; then
  say "the configuration changed: restarting slurmd and slurmctld"
  for pid in $slurmd $ctld; do kill -TERM "$pid"; done
  for pid in $slurmd $ctld; do
    retry 20 bash -c "! readlink /proc/$pid/exe" || fail "pid $pid did not stop"
  done
  ctld='' slurmd=''
fi
if [[ -z $ctld$slurmd && $KEEP_STATE != 1 ]]; then
  # A cold start forgets the jobs of an earlier run, so that none of them starts behind the
  # back of new tests.
  rm -rf "${STATE:?}"/ctld/* "${STATE:?}"/spool/* "${STATE:?}"/log/*
fi
started_ctld=0
if [[ -z $ctld ]]; then
  say "starting slurmctld"
  "$SLURMCTLD" || fail "slurmctld did not start; see $STATE/log/slurmctld.log"
  started_ctld=1
fi
retry 30 bash -c 'scontrol ping | grep -q UP' || fail "slurmctld does not answer; see $STATE/log/slurmctld.log"
if [[ -z $slurmd ]]; then
  say "starting slurmd"
  "$SLURMD" -N "$NODE" || fail "slurmd did not start; see $STATE/log/slurmd.log"
fi

# -------------------------------------------------------------------- wait for the node
until=$((SECONDS + TIMEOUT))
resumes=0
while :; do
  state=$(sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | head -n 1)
  case $state in
    idle | mix | alloc | comp) break ;;
    down | drain | drng | inval | fail)
      # A node left down by an earlier run (or marked invalid before slurmd registered).
      if ((resumes < 3)); then
        say "node $NODE is $state ($(scontrol show node "$NODE" | sed -n 's/.*Reason=//p')): resuming it"
        scontrol update nodename="$NODE" state=resume 2>/dev/null || true
        resumes=$((resumes + 1))
      fi ;;
  esac
  ((SECONDS < until)) || fail "node $NODE is not usable after ${TIMEOUT} s (state '$state'); see $STATE/log/"
  sleep 0.2
done

# -------------------------------------------------------------------- probe job
# A freshly started slurmctld dispatches no batch job for about 3 s: run one trivial job now so
# that the first test does not pay for it (or time out on it).
if ((started_ctld)); then
  job=$(sbatch --parsable -J slurm-start-probe -p "$PARTITION" -o /dev/null --wrap true) \
    || fail "the probe job could not be submitted"
  until=$((SECONDS + TIMEOUT))
  while [[ -n $(squeue -h -j "$job" -t PD,R,CG,CF -o %i 2>/dev/null) ]]; do
    ((SECONDS < until)) || fail "the probe job $job did not end within ${TIMEOUT} s; see $STATE/log/"
    sleep 0.1
  done
  ended=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [[ $ended == COMPLETED ]] || fail "the probe job $job ended $ended; see $STATE/log/"
fi

say "Slurm is up: node $NODE ($state, $CPUS CPUs), partition $PARTITION; slurmctld pid $(cat "$STATE/run/slurmctld.pid"), slurmd pid $(cat "$STATE/run/slurmd.pid"); stop it with scripts/slurm-stop.sh"
