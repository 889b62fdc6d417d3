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

say() { printf '[slurm-start] %s\n' "$*" >&2; }
fail() { say "ERROR: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "run me as root (I install packages and start munged, slurmctld and slurmd)"
[[ $CPUS =~ ^[1-9][0-9]*$ ]] || fail "DIFFSOUP_SLURM_CPUS=$CPUS is not a positive integer"

# shellcheck source=scripts/slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"

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

# -------------------------------------------------------------------- munge (authentication)
if [[ ! -s /etc/munge/munge.key ]]; then
  say "creating /etc/munge/munge.key"
  install -d -o munge -g munge -m 0700 /etc/munge
  mungekey --create --keyfile=/etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0600 /etc/munge/munge.key
ensure_munged "$STATE/munge" "$MUNGED"

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
$(slurm_conf_common "$STATE" 0)
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${CPUS} Sockets=1 CoresPerSocket=${CPUS} ThreadsPerCore=1 RealMemory=${REAL_MEMORY} State=UNKNOWN
PartitionName=${PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
changed=0
if install_conf "$wanted" "$CONF"; then
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
if ((started_ctld)); then
  probe_job "$TIMEOUT" "$STATE/log/" -J slurm-start-probe -p "$PARTITION"
fi

say "Slurm is up: node $NODE ($state, $CPUS CPUs), partition $PARTITION; slurmctld pid $(cat "$STATE/run/slurmctld.pid"), slurmd pid $(cat "$STATE/run/slurmd.pid"); stop it with scripts/slurm-stop.sh"
