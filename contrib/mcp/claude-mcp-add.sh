#!/bin/sh
# Register agent-fleet's MCP server with Claude Code for this project (local
# scope: no approval prompt). Each Claude session gets its own intercom
# identity from the environment it is started with, e.g.
#
#   AGENT_INTERCOM_SESSION_ID=reviewer AGENT_INTERCOM_SESSION_NAME="Reviewer" claude
#
# Without AGENT_INTERCOM_SESSION_ID the server makes up a fresh id per session
# (claude-<pid>-<hash of cwd>), so two sessions never share one identity.
# Never pass a fixed AGENT_INTERCOM_SESSION_ID with -e here: every session
# started from this project would then claim the same id.
#
# To have new mail pushed into an idle session (a Claude Code channel; the
# server is not on Claude Code's allowlist, so confirm its prompt once):
#
#   AGENT_INTERCOM_SESSION_ID=reviewer claude --dangerously-load-development-channels server:agent-fleet
set -eu
claude mcp add agent-fleet -s local -- agent-fleet mcp --harness claude
claude mcp list
