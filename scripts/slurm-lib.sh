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
