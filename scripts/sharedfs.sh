#!/usr/bin/env bash
# Per-node views of one folder, as the nodes of a cluster see its shared file system (as root;
# Debian packages bindfs, sshfs, openssh-server). tests/sharedfs runs the ledger through them.
#
#   scripts/sharedfs.sh up EXPORT MOUNT_ROOT    mount two views of EXPORT per kind, print them
#   scripts/sharedfs.sh down MOUNT_ROOT         unmount them and stop this script's sshd
#
# The kinds, each mounted twice, at MOUNT_ROOT/KIND/a and MOUNT_ROOT/KIND/b ("node A", "node B"):
#   bindfs-nolock  bindfs -o attr_timeout=3,entry_timeout=3: locks (flock, fcntl) taken through
#                  one view do not exclude the other's (NFS with local locks, Lustre localflock),
#                  and attributes (the size among them) are cached 3 s;
#   bindfs-locks   bindfs --multithreaded --enable-lock-forwarding: locks exclude across views
#                  (NFS with lockd or NFSv4, Lustre flock), attributes cached as above;
#   bindfs-kcache  as bindfs-locks, with -o kernel_cache: a file's pages are kept across opens
#                  too, so a file another view replaced reads as its old pages, or a mixture of
#                  old and new ones, until the attributes expire;
#   sshfs          sshfs over loopback to an sshd of its own on 127.0.0.1 (its own host key, user
#                  key and port, in MOUNT_ROOT/.state), cache_timeout=3: a network file system
#                  whose locks are local to each mount and which reports a lost O_CREAT|O_EXCL
#                  race as EPERM.
# `up` prints one line per kind: KIND VIEW_A VIEW_B. A failed `up` undoes what it mounted.
# `down` unmounts only what `up` recorded in MOUNT_ROOT/.state/mounts (fusermount -u; a busy
# view, held open by a process that outlived its test, is detached lazily) and stops only the
# sshd whose PID is in MOUNT_ROOT/.state/sshd.pid and still runs sshd. Safe to run twice.
set -euo pipefail

say() { printf '[sharedfs] %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }
KINDS=(bindfs-nolock bindfs-locks bindfs-kcache sshfs)
SSHD=$(command -v sshd || echo /usr/sbin/sshd)

usage() { fail "usage: $0 up EXPORT MOUNT_ROOT | $0 down MOUNT_ROOT"; }

mounted() { grep -qsF " $(realpath -m "$1") " /proc/self/mounts; }

sshd_pid() {  # the PID in the state's sshd.pid, if that process is alive and runs sshd
  local pid exe
  [[ -r $1/sshd.pid ]] || return 1
  pid=$(tr -dc '0-9' <"$1/sshd.pid")
  [[ -n $pid ]] || return 1
  exe=$(readlink -f "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ $exe == "$(readlink -f "$SSHD")" ]] || return 1
  echo "$pid"
}

down() {
  local root=$1 state=$1/.state view pid i
  [[ -d $state ]] || { say "nothing mounted under $root (no $state)"; return 0; }
  if [[ -r $state/mounts ]]; then
    while read -r view; do
      [[ -n $view ]] || continue
      mounted "$view" || continue
      for ((i = 0; i < 25; i++)); do
        fusermount -u "$view" 2>/dev/null && break
        sleep 0.2
      done
      if mounted "$view"; then
        say "$view is busy (a process still has files open there): detached lazily"
        fusermount -u -z "$view" || say "cannot unmount $view"
      fi
    done <"$state/mounts"
  fi
  if pid=$(sshd_pid "$state"); then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      readlink "/proc/$pid/exe" >/dev/null 2>&1 || break
      sleep 0.1
    done
    readlink "/proc/$pid/exe" >/dev/null 2>&1 && kill -KILL "$pid" 2>/dev/null || true
  fi
  # Only empty folders go: a view still mounted (or files written into the mount point while
  # it was not mounted) is never deleted through.
  for kind in "${KINDS[@]}"; do
    rmdir "$root/$kind/a" "$root/$kind/b" "$root/$kind" 2>/dev/null || true
  done
  if ! grep -qsF " $(realpath -m "$root")/" /proc/self/mounts; then
    rm -rf "$state"
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_sshd() {  # an sshd of its own on 127.0.0.1, root logging in with the state's key only
  local state=$1 port i
  ssh-keygen -q -t ed25519 -N '' -C sharedfs-host -f "$state/host_key"
  ssh-keygen -q -t ed25519 -N '' -C sharedfs-user -f "$state/user_key"
  cp "$state/user_key.pub" "$state/authorized_keys"
  chmod 600 "$state/authorized_keys"
  mkdir -p /run/sshd   # sshd's privilege-separation folder
  port=$(free_port)
  cat >"$state/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $state/host_key
PidFile $state/sshd.pid
AuthorizedKeysFile $state/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
EOF
  "$SSHD" -f "$state/sshd_config" -E "$state/sshd.log"
  for ((i = 0; i < 50; i++)); do
    sshd_pid "$state" >/dev/null && { echo "$port"; return 0; }
    sleep 0.1
  done
  fail "sshd did not start (port $port); its log: $(cat "$state/sshd.log" 2>/dev/null)"
}

up() {
  local export=$1 root=$2 state kind view port
  [[ $(id -u) == 0 ]] || fail "run as root (FUSE mounts with allow_other, an sshd)"
  [[ -e /dev/fuse ]] || fail "no /dev/fuse: this kernel or container has no FUSE"
  for tool in bindfs sshfs fusermount ssh-keygen "$SSHD"; do
    command -v "$tool" >/dev/null || fail "$tool not found: apt-get install bindfs sshfs openssh-server"
  done
  export=$(realpath "$export") || fail "no folder $1"
  [[ -d $export ]] || fail "$export is not a folder"
  mkdir -p "$root"
  root=$(realpath "$root")
  state=$root/.state
  [[ ! -e $state ]] || fail "$root is in use ($state exists): run '$0 down $root' first"
  mkdir -p "$state"
  : >"$state/mounts"
  trap 'say "up failed: undoing"; down "$root"' ERR
  port=$(start_sshd "$state")
  for kind in "${KINDS[@]}"; do
    for view in "$root/$kind/a" "$root/$kind/b"; do
      mkdir -p "$view"
      echo "$view" >>"$state/mounts"
      case $kind in
        bindfs-nolock) bindfs -o attr_timeout=3,entry_timeout=3 "$export" "$view" ;;
        bindfs-locks) bindfs --multithreaded --enable-lock-forwarding \
                        -o attr_timeout=3,entry_timeout=3 "$export" "$view" ;;
        bindfs-kcache) bindfs --multithreaded --enable-lock-forwarding \
                         -o attr_timeout=3,entry_timeout=3,kernel_cache "$export" "$view" ;;
        sshfs) sshfs -p "$port" \
                 -o "IdentityFile=$state/user_key,StrictHostKeyChecking=no" \
                 -o UserKnownHostsFile=/dev/null,BatchMode=yes,LogLevel=ERROR \
                 -o cache_timeout=3 "root@127.0.0.1:$export" "$view" ;;
      esac
      mounted "$view" || false
    done
    echo "$kind $root/$kind/a $root/$kind/b"
  done
  trap - ERR
}

case ${1:-} in
  up) (($# == 3)) || usage; up "$2" "$3" ;;
  down) (($# == 2)) || usage; down "$2" ;;
  *) usage ;;
esac
