#!/usr/bin/env bash
# Stop the one-node Slurm cluster that scripts/slurm-start.sh started: cancel its jobs, then stop
# slurmd, slurmctld and munged, each by the PID in its PID file under $DIFFSOUP_SLURM_STATE and
# only while that PID still runs the expected program. Nothing is ever stopped by name, and a
# munged that slurm-start.sh did not start is left alone. Safe to run when nothing runs.
set -euo pipefail

STATE=${DIFFSOUP_SLURM_STATE:-/tmp/diffsoup-slurm}
say() { printf '[slurm-stop] %s\n' "$*" >&2; }

# shellcheck source=scripts/slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"
alive() { readlink "/proc/$1/exe" >/dev/null 2>&1; }   # false for a zombie or a gone process

SLURMCTLD=$(command -v slurmctld || echo /usr/sbin/slurmctld)
SLURMD=$(command -v slurmd || echo /usr/sbin/slurmd)
MUNGED=$(command -v munged || echo /usr/sbin/munged)

# 1. Cancel every job of this cluster, so that no job's processes (dask workers, array
#    elements, slurmstepd) outlive the daemons. KillWait=5 bounds how long this takes.
if running_pid "$STATE/run/slurmctld.pid" "$SLURMCTLD" >/dev/null && command -v squeue >/dev/null; then
  jobs=$(squeue -h -o '%A' 2>/dev/null | sort -u | tr '\n' ' ' || true)
  if [[ -n ${jobs// /} ]]; then
    say "cancelling jobs $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      [[ -z $(squeue -h -o '%A' 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
fi

# 2. The daemons: SIGTERM to all first, then wait for each (SIGKILL after 20 s).
stopping=()
for entry in "slurmd:$STATE/run/slurmd.pid:$SLURMD" \
             "slurmctld:$STATE/run/slurmctld.pid:$SLURMCTLD" \
             "munged:$STATE/munge/munged.pid:$MUNGED"; do
  IFS=: read -r name pidfile binary <<<"$entry"
  if pid=$(running_pid "$pidfile" "$binary"); then
    say "$name: SIGTERM to pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    stopping+=("$name:$pid:$pidfile:$binary")
  else
    say "$name: not running (per $pidfile)"
    rm -f "$pidfile"
  fi
done
for entry in "${stopping[@]}"; do
  IFS=: read -r name pid pidfile binary <<<"$entry"
  for ((i = 0; i < 100; i++)); do
    alive "$pid" || break
    sleep 0.2
  done
  if alive "$pid" && [[ $(readlink -f "/proc/$pid/exe" 2>/dev/null) == "$(readlink -f "$binary")" ]]; then
    say "$name: still running after 20 s, SIGKILL to pid $pid"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
done

# 3. Report, without touching them, job step daemons still running.
left=$(ps -eo pid=,stat=,args= | awk '$2 !~ /^Z/ && $3 ~ /slurmstepd/' || true)
[[ -z $left ]] || say "WARNING: slurmstepd processes still running:"$'\n'"$left"
say "stopped"
