#!/usr/bin/env bash
# Boot a private systemd user manager for running agent-fleet's systemd tests
# by hand, on a machine whose PID 1 is not systemd (containers, CI VMs), as
# root. See docs/systemd.md "A private user manager". The Go tests do the same by
# themselves (units/unitstest); this script is for people who want one
# manager for several runs, or for `agent-fleet` by hand. Without a
# checkout, `eval "$(agent-fleet user-manager start)"` does the same.
#
#   eval "$(contrib/test-systemd-manager.sh start)"   # boot; exports the env
#   go test ./...
#   contrib/test-systemd-manager.sh stop "$XDG_RUNTIME_DIR"
#
# start prints shell `export` lines for XDG_RUNTIME_DIR and
# DBUS_SESSION_BUS_ADDRESS (and the manager's pid) and nothing else on stdout.
# The manager gets its own runtime directory, its own cgroup
# (/agent-fleet-test-<n> in every systemd hierarchy) and its own
# XDG_CONFIG_HOME/XDG_DATA_HOME/XDG_STATE_HOME below the runtime directory, so
# it never reads or changes the real user's state. stop ends it by its pid
# (SIGTERM, then SIGKILL), kills whatever is left in its cgroup and removes
# its directories.
set -euo pipefail
created=0

marker=/run/systemd/system
sentinel=$marker/.agent-fleet-test-boot   # says "we created the marker"
bootlock=${TMPDIR:-/tmp}/agent-fleet-systemd-boot.lock

die() { echo "test-systemd-manager: $*" >&2; exit 1; }

# cgroup_mounts prints the mount points of the cgroup2 hierarchy and of the
# v1 name=systemd hierarchy.
cgroup_mounts() {
  awk '{ for (i = 7; $i != "-"; i++) ; fstype = $(i + 1); opts = $(i + 3)
         if (fstype == "cgroup2" || (fstype == "cgroup" && opts ~ /(^|,)name=systemd(,|$)/)) print $5 }' /proc/self/mountinfo
}

start() {
  [ "$(id -u)" = 0 ] || die "must run as root (it creates $marker and a cgroup)"
  [ "$(cat /proc/1/comm)" != systemd ] || die "PID 1 is systemd here: use your own user manager (log in, or loginctl enable-linger \$USER)"
  local systemd
  systemd=$(command -v /usr/lib/systemd/systemd /lib/systemd/systemd | head -n1) ||
    die "systemd is not installed (apt-get install systemd dbus-user-session)"
  [ -e /usr/lib/systemd/user/dbus.socket ] || [ -e /lib/systemd/user/dbus.socket ] ||
    die "the user bus socket unit is missing (apt-get install dbus-user-session)"

  local rt
  rt=$(mktemp -d "${TMPDIR:-/tmp}/agent-fleet-systemd-XXXXXXXX")
  chmod 0700 "$rt"
  mkdir -p "$rt/config" "$rt/data" "$rt/state"
  local cg=agent-fleet-test-$(basename "$rt" | sed 's/^agent-fleet-systemd-//')
  local dirs=() m
  for m in $(cgroup_mounts); do
    if mkdir "$m/$cg" 2>/dev/null; then dirs+=("$m/$cg"); fi
  done
  printf '%s\n' "${dirs[@]}" > "$rt/cgroups"

  exec 9>"$bootlock"
  flock -w 30 9 || die "another manager is booting (lock $bootlock)"
  created=0
  if [ ! -d $marker ] || [ -e $sentinel ]; then
    mkdir -p $marker && touch $sentinel && created=1
  fi
  trap '[ $created = 1 ] && rm -f $sentinel && rmdir $marker 2>/dev/null; true' EXIT

  local procs=""
  for m in "${dirs[@]}"; do procs="$procs echo \$\$ > '$m/cgroup.procs';"; done
  # A minimal environment: every unit inherits the manager's.
  env -i HOME="$HOME" USER="${USER:-root}" LOGNAME="${LOGNAME:-root}" LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    XDG_RUNTIME_DIR=$rt XDG_CONFIG_HOME=$rt/config XDG_DATA_HOME=$rt/data XDG_STATE_HOME=$rt/state \
    setsid sh -c "$procs exec '$systemd' --user" </dev/null >"$rt/manager.log" 2>&1 9>&- &
  local pid=$!
  echo $pid > "$rt/manager.pid"
  local i
  for i in $(seq 100); do
    [ -S "$rt/systemd/private" ] && [ -S "$rt/bus" ] && break
    kill -0 $pid 2>/dev/null || die "systemd --user exited: $(tail -n 5 "$rt/manager.log")"
    sleep 0.05
  done
  [ -S "$rt/bus" ] || die "no user bus after 5 s: $(tail -n 5 "$rt/manager.log")"
  if [ $created = 1 ]; then rm -f $sentinel; rmdir $marker 2>/dev/null || true; created=0; fi

  echo "export XDG_RUNTIME_DIR=$rt"
  echo "export DBUS_SESSION_BUS_ADDRESS=unix:path=$rt/bus"
  echo "export AGENT_FLEET_TEST_MANAGER_PID=$pid"
  echo "# stop with: $0 stop $rt" >&2
}

stop() {
  local rt=${1:?usage: $0 stop RUNTIME_DIR}
  [ -f "$rt/manager.pid" ] || die "$rt was not made by this script (no manager.pid)"
  local pid i
  pid=$(cat "$rt/manager.pid")
  if [ "$(cat /proc/$pid/comm 2>/dev/null)" = systemd ]; then
    kill -CONT $pid 2>/dev/null || true
    kill -TERM $pid
    for i in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill -KILL $pid 2>/dev/null || true
  fi
  local d
  while read -r d; do
    [ -n "$d" ] && [ -d "$d" ] || continue
    [ -e "$d/cgroup.kill" ] && echo 1 > "$d/cgroup.kill" 2>/dev/null || true
    for i in $(seq 50); do
      [ -z "$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break
      find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
      sleep 0.1
    done
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done < "$rt/cgroups"
  rm -rf "$rt"
}

case "${1:-}" in
  start) start ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: $0 start | stop RUNTIME_DIR" >&2; exit 2 ;;
esac
