//go:build !windows

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Third-party MCP clients drive the real binary. .ci/run installs them from
// npm; in CI (AGENT_FLEET_CI=1) their absence fails the test.

// nodeTool finds an npm-installed executable: in $AGENT_FLEET_NODE_TOOLS
// (a prefix with node_modules/.bin), else on PATH.
func nodeTool(t *testing.T, name string) string {
	t.Helper()
	if dir := os.Getenv("AGENT_FLEET_NODE_TOOLS"); dir != "" {
		p := filepath.Join(dir, "node_modules", ".bin", name)
		if _, err := os.Stat(p); err == nil {
			nodeSlot(t)
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		nodeSlot(t)
		return p
	}
	if os.Getenv("AGENT_FLEET_CI") == "1" {
		t.Fatalf("%s is not installed; .ci/run installs it", name)
	}
	t.Skipf("%s not installed (set AGENT_FLEET_NODE_TOOLS or run .ci/run)", name)
	return ""
}

// nodeSlots bounds the tests that run the Node CLIs at once: each CLI
// start costs seconds of CPU, and on a 2-core machine several at once slow
// every other test past its deadlines.
var nodeSlots = struct {
	sync.Mutex
	free chan struct{}
	held map[*testing.T]bool
}{free: make(chan struct{}, 2), held: map[*testing.T]bool{}}

// nodeSlot takes one of the slots for t until it ends (once per test).
func nodeSlot(t *testing.T) {
	nodeSlots.Lock()
	if nodeSlots.held[t] {
		nodeSlots.Unlock()
		return
	}
	nodeSlots.held[t] = true
	nodeSlots.Unlock()
	nodeSlots.free <- struct{}{}
	t.Cleanup(func() {
		<-nodeSlots.free
		nodeSlots.Lock()
		delete(nodeSlots.held, t)
		nodeSlots.Unlock()
	})
}

// binDir holds an `agent-fleet` that runs this test binary as the command.
func binDir(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := shortDir(t)
	script := fmt.Sprintf("#!/bin/sh\nAGENT_FLEET_RUN_MAIN=1 exec %q \"$@\"\n", exe)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "agent-fleet"), []byte(script), 0o755))
	return dir
}

func TestMCPInspectorCLI(t *testing.T) {
	t.Parallel()
	inspector := nodeTool(t, "mcp-inspector")
	bin := binDir(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "alpha")
	run := func(args ...string) ([]byte, error) {
		full := append([]string{"--cli", filepath.Join(bin, "agent-fleet"), "mcp",
			"-e", "AGENT_INTERCOM_SESSION_ID=inspector", "-e", "PI_CODING_AGENT_DIR=" + dir}, args...)
		cmd := exec.Command(inspector, full...)
		cmd.Env = append(os.Environ(), "PI_CODING_AGENT_DIR="+dir)
		return cmd.Output()
	}
	out, err := run("--method", "tools/list", "--format", "json")
	require.NoError(t, err, "%s", out)
	var list struct {
		Result struct {
			Tools []struct {
				Name        string         `json:"name"`
				InputSchema map[string]any `json:"inputSchema"`
			} `json:"tools"`
		} `json:"result"`
	}
	require.NoError(t, json.Unmarshal(out, &list), "%s", out)
	var names []string
	for _, tool := range list.Result.Tools {
		names = append(names, tool.Name)
	}
	require.ElementsMatch(t, []string{"intercom_whoami", "intercom_list", "intercom_send", "intercom_ask", "intercom_reply",
		"intercom_pending", "intercom_status", "intercom_set_summary", "agent_fleet", "intercom_team", "intercom_join", "intercom_history"}, names)

	out, err = run("--method", "tools/call", "--tool-name", "intercom_send", "--tool-arg", "to=alpha", "message=hello from the inspector", "--format", "json")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Message sent to alpha.")
	require.Eventually(t, func() bool {
		for _, m := range l.messages() {
			if m.Text == "hello from the inspector" && m.From.ID == "inspector" {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "intercom listen printed it")

	// An isError result: the Inspector exits 5.
	_, err = run("--method", "tools/call", "--tool-name", "intercom_send", "--tool-arg", "to=nobody", "message=x", "--format", "json")
	requireExit(t, err, 5)
}

func TestClaudeCodeSeesTheServerConnected(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	bin := binDir(t)
	agentDir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, agentDir) })
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+filepath.Dir(claude)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"PI_CODING_AGENT_DIR="+agentDir, "DISABLE_AUTOUPDATER=1")
	claudeCmd := func(dir string, args ...string) string {
		cmd := exec.Command(claude, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "claude %v: %s", args, out)
		return string(out)
	}

	// The contrib .mcp.json, approved once in the user's settings.
	project := t.TempDir()
	data, err := os.ReadFile("../../contrib/mcp/claude.mcp.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(project, ".mcp.json"), data, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".claude"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(`{"enableAllProjectMcpServers":true}`), 0o600))
	out := claudeCmd(project, "mcp", "list")
	require.Regexp(t, `agent-fleet: agent-fleet mcp --harness claude - .*Connected`, out)

	// The contrib `claude mcp add` script.
	other := t.TempDir()
	cmd := exec.Command("sh", filepath.Join(mustAbs(t, "../../contrib/mcp"), "claude-mcp-add.sh"))
	cmd.Dir, cmd.Env = other, env
	script, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", script)
	require.Regexp(t, `agent-fleet: agent-fleet mcp --harness claude - .*Connected`, string(script))
	require.False(t, strings.Contains(string(script), "Failed"), "%s", script)
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	require.NoError(t, err)
	return abs
}
