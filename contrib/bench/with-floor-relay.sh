#!/usr/bin/env bash
# Build floor-relay.c (the least a broker can do under `agent-fleet bench
# broker`), start it on a socket of its own, run COMMAND with FLOOR_SOCKET
# and FLOOR_PID set, and stop the relay (by its pid) when COMMAND ends.
#
#   contrib/bench/with-floor-relay.sh 'agent-fleet bench broker --against "$FLOOR_SOCKET" --against-pid "$FLOOR_PID"'
#   contrib/bench/with-floor-relay.sh 'agent-fleet bench broker --socket "$FLOOR_SOCKET" --pid "$FLOOR_PID" --against REF.sock'
#
# The first measures agent-fleet's broker against the floor; the second the
# floor against another broker (the TypeScript reference), which bounds the
# ratios any broker can reach against it on this machine. Needs a C compiler.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 COMMAND" >&2; exit 2; }
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "$0: no C compiler ($cc): apt install gcc" >&2; exit 1; }
dir=$(mktemp -d /tmp/floor-relay.XXXXXX)
relay=
cleanup() {
  if [ -n "$relay" ]; then kill "$relay" 2>/dev/null || true; wait "$relay" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
"$cc" -O2 -o "$dir/floor-relay" "$(dirname "$0")/floor-relay.c"
"$dir/floor-relay" "$dir/relay.sock" &
relay=$!
for _ in $(seq 100); do [ -S "$dir/relay.sock" ] && break; sleep 0.05; done
[ -S "$dir/relay.sock" ] || { echo "$0: the relay did not start" >&2; exit 1; }
FLOOR_SOCKET=$dir/relay.sock FLOOR_PID=$relay sh -c "$1"
