#!/usr/bin/env bash
# Prepare the reference TypeScript intercom client for the federation test
# (cmd/agent-fleet federation_typescript_test.go): copies of checkouts of
# agent-intercom-core and agent-intercom-pi side by side in OUT, core built,
# pi's dependency on core pointed at it with file:, and tsx installed.
# Only the client's own dependencies are installed (the Pi extension's are
# not needed to talk v4). Then run the test with AGENT_FLEET_TS_CLIENT=OUT/agent-intercom-pi.
#
#   contrib/federation/prepare-ts-client.sh CORE_CHECKOUT PI_CHECKOUT OUT
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 CORE_CHECKOUT PI_CHECKOUT OUT" >&2; exit 2; }
core_src=$1 pi_src=$2 out=$3
mkdir -p "$out"
rm -rf "$out/agent-intercom-core" "$out/agent-intercom-pi"
cp -r "$core_src" "$out/agent-intercom-core"
cp -r "$pi_src" "$out/agent-intercom-pi"
rm -rf "$out"/agent-intercom-*/.git "$out"/agent-intercom-*/node_modules
(cd "$out/agent-intercom-core" && npm install --no-audit --no-fund --loglevel=error && npm run build >/dev/null)
(cd "$out/agent-intercom-pi" &&
  node -e '
    const fs = require("fs");
    const p = JSON.parse(fs.readFileSync("package.json"));
    p.dependencies = { "@ctliz/agent-intercom-core": "file:../agent-intercom-core", tsx: p.dependencies.tsx };
    delete p.devDependencies;
    fs.writeFileSync("package.json", JSON.stringify(p, null, 2) + "\n");' &&
  npm install --no-audit --no-fund --loglevel=error)
echo "AGENT_FLEET_TS_CLIENT=$out/agent-intercom-pi"
