//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
)

// codexAdapterEnv names a prepared copy of the reference TypeScript Codex
// adapter (agent-intercom-codex 0.13): a directory holding its built
// dist/codex-server.mjs and node_modules/@ctliz/agent-intercom-core
// (0.2.0, built). Neither is on npm for CI to install, so the test runs
// only where the variable is set.
const codexAdapterEnv = "AGENT_FLEET_CODEX_ADAPTER"

// The Codex adapter's MCP server, unchanged, and agent-fleet's share task
// teams on one broker and one named-teams.json: a team the adapter
// creates with members and work is agent-fleet's roster and send target,
// and the reverse; messages carry the team; no scope shows in any text.
func TestCodexAdapterSharesTaskTeams(t *testing.T) {
	t.Parallel()
	dir := os.Getenv(codexAdapterEnv)
	if dir == "" {
		t.Skipf("%s is not set: no prepared Codex adapter 0.13", codexAdapterEnv)
	}
	server := filepath.Join(dir, "dist", "codex-server.mjs")
	require.FileExists(t, server)
	node := "node"
	if bin := nodeBinDir(); bin != "" {
		node = filepath.Join(bin, "node") // the adapter needs Node 22.19 or later
	}
	agentDir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, agentDir) })

	// agent-fleet first: its mcp starts agent-fleet's broker, which the
	// adapter then finds and uses.
	fleetB := mcptest.Caller(t, mcpProcess(t, agentDir, "fleet-b"))
	cmd := exec.Command(node, server)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PI_CODING_AGENT_DIR="+agentDir, "AGENT_INTERCOM_SESSION_ID=codex-a",
		"CODEX_INTERCOM_NAME=planner", "PWD="+cmd.Dir)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	codexA := mcptest.Caller(t, cs)

	var texts []string
	call := func(c func(string, map[string]any) mcptest.Result, tool string, args map[string]any) mcptest.Result {
		t.Helper()
		r := c(tool, args)
		texts = append(texts, r.Text)
		require.False(t, r.IsError, "%s %v: %s", tool, args, r.Text)
		return r
	}
	var listed string
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute) // a hang guard
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting: %s; last list: %s", what, listed)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	eventually("the adapter lists fleet-b", func() bool {
		listed = codexA("intercom_list", map[string]any{}).Text
		return regexp.MustCompile(`fleet-b`).MatchString(listed)
	})
	t.Logf("the adapter lists: %s", listed)

	// The adapter's task team: agent-fleet's roster and target.
	call(codexA, "intercom_join", map[string]any{"name": "launch", "create": true, "members": []any{"fleet-b"}, "work": "Ship the launch page"})
	r := call(fleetB, "intercom_team", map[string]any{"team": "launch"})
	require.Contains(t, r.Text, "Work: Ship the launch page")
	require.Contains(t, r.Text, "codex-a")
	call(fleetB, "intercom_send", map[string]any{"to": "codex-a", "message": "front end is ready", "team": "launch"})
	eventually("the adapter holds fleet-b's team message", func() bool {
		r := codexA("intercom_pending", map[string]any{})
		return regexp.MustCompile(`(?s)launch.*front end is ready|front end is ready.*launch`).MatchString(r.Text)
	})

	// agent-fleet's task team: the adapter's roster and target.
	call(fleetB, "intercom_join", map[string]any{"name": "review", "create": true, "members": []any{"codex-a"}, "work": "Review the page"})
	r = call(codexA, "intercom_team", map[string]any{"team": "review"})
	require.Contains(t, r.Text, "fleet-b")
	call(codexA, "intercom_send", map[string]any{"to": "fleet-b", "message": "reviewed, ship it", "team": "review"})
	eventually("fleet-b holds the adapter's team message", func() bool {
		r := fleetB("intercom_pending", map[string]any{})
		return regexp.MustCompile(`(?s)review.*reviewed, ship it|reviewed, ship it.*review`).MatchString(r.Text)
	})

	hex48 := regexp.MustCompile(`[0-9a-f]{48}`)
	for _, text := range texts {
		require.NotRegexp(t, hex48, text, "a scope in a tool's text")
	}
}
