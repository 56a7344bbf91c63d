#!/usr/bin/env bash
# Prepare the reference TypeScript Codex adapter (agent-intercom-codex 0.13,
# its built dist/) for cmd/agent-fleet's TestCodexAdapterSharesTaskTeams:
# a copy of its dist/ in OUT with @ctliz/agent-intercom-core (0.2.0, built;
# e.g. OUT of contrib/federation/prepare-ts-client.sh) linked beside it.
# Then run the test with AGENT_FLEET_CODEX_ADAPTER=OUT.
#
#   contrib/interop/prepare-codex-adapter.sh CODEX_CHECKOUT CORE_BUILT OUT
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 CODEX_CHECKOUT CORE_BUILT OUT" >&2; exit 2; }
codex_src=$1 core=$2 out=$3
[ -f "$codex_src/dist/codex-server.mjs" ] || { echo "$codex_src/dist/codex-server.mjs is missing" >&2; exit 1; }
[ -d "$core/dist" ] || { echo "$core is not a built agent-intercom-core (no dist/)" >&2; exit 1; }
mkdir -p "$out/node_modules/@ctliz"
rm -rf "$out/dist"
cp -r "$codex_src/dist" "$out/dist"
cp "$codex_src/package.json" "$out/package.json"
ln -sfn "$(cd "$core" && pwd)" "$out/node_modules/@ctliz/agent-intercom-core"
echo "AGENT_FLEET_CODEX_ADAPTER=$out"
