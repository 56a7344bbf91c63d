//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
)

// tmuxTool is the tmux that runs interactive CLIs in the tests.
func tmuxTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("AGENT_FLEET_CI") == "1" {
			t.Fatal("tmux is not installed; .ci/run installs it")
		}
		t.Skip("tmux not installed")
	}
	return p
}

// tmuxPane is an interactive program in a detached tmux session of a
// tmux server of its own (its socket in a temp dir), ended with the test.
type tmuxPane struct {
	t      *testing.T
	tmux   string
	socket string
}

func startTmux(t *testing.T, cwd string, argv ...string) *tmuxPane {
	t.Helper()
	p := &tmuxPane{t: t, tmux: tmuxTool(t), socket: filepath.Join(shortDir(t), "tmux")}
	args := append([]string{"-S", p.socket, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "50", "-c", cwd, "--"}, argv...)
	out, err := exec.Command(p.tmux, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("screen:\n%s", p.screen())
		}
		_ = exec.Command(p.tmux, "-S", p.socket, "kill-server").Run()
	})
	return p
}

// screen is what the pane shows now.
func (p *tmuxPane) screen() string {
	out, _ := exec.Command(p.tmux, "-S", p.socket, "capture-pane", "-p", "-J").Output()
	return string(out)
}

// waitScreen waits until the pane shows s; the bound is a hang guard.
func (p *tmuxPane) waitScreen(s string) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return strings.Contains(p.screen(), s) }, 2*time.Minute, 100*time.Millisecond,
		"the screen never showed %q", s)
}

func (p *tmuxPane) keys(keys ...string) {
	p.t.Helper()
	out, err := exec.Command(p.tmux, append([]string{"-S", p.socket, "send-keys"}, keys...)...).CombinedOutput()
	require.NoError(p.t, err, "%s", out)
}

// claudeInteractiveHome is a HOME in which an interactive Claude Code
// starts without its first-run screens: onboarding done, the API key
// approved, cwd trusted. Offline it cannot fetch its feature flags, so
// the one that enables channels (on for Console and claude.ai accounts)
// is given in the cached copy it falls back on.
func claudeInteractiveHome(t *testing.T, cwd, apiKey string) string {
	t.Helper()
	home := t.TempDir()
	cfg := map[string]any{
		"hasCompletedOnboarding":   true,
		"theme":                    "dark",
		"cachedGrowthBookFeatures": map[string]any{"tengu_harbor": true},
		"customApiKeyResponses":    map[string]any{"approved": []string{apiKey[len(apiKey)-20:]}, "rejected": []string{}},
		"projects":                 map[string]any{cwd: map[string]any{"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}},
	}
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(home, ".claude.json"), data, 0o600))
	return home
}

// An interactive Claude Code session (in tmux) with `agent-fleet mcp` as
// its MCP server, loaded as a development channel, is woken by mail: a
// message another session sends is pushed as a channel notification, the
// idle session shows it and starts a model request with the pointer in
// it, and the model reads the message itself with intercom_pending.
func TestRealClaudeInteractiveChannel(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	const text = "the parser is ready for review, see src/parse.go"
	pointer := `New intercom message from alice: "` + text + `" — read it with intercom_pending.`
	model := modeltest.Start(t,
		modeltest.Step{Name: "pushed", API: modeltest.Anthropic,
			Expect: modeltest.PromptContains(`<channel source="agent-fleet" from="alice" messages="1">` + "\n" + pointer + "\n</channel>"),
			Reply:  modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call(claudePending, map[string]any{})}}},
		modeltest.Step{Name: "read", Expect: modeltest.All(resultOK, modeltest.ToolResultContains(`"text":"`+text+`"`)),
			Reply: modeltest.Reply{Text: "Reviewing the parser."}},
	)

	cwd := t.TempDir()
	const apiKey = "sk-ant-fleet-test-interactive-0123456789"
	home := claudeInteractiveHome(t, cwd, apiKey)
	exe, err := os.Executable()
	require.NoError(t, err)
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"agent-fleet": map[string]any{
		"command": exe, "args": []string{"mcp", "--harness", "claude"},
		"env": map[string]string{"AGENT_FLEET_RUN_MAIN": "1", "CLAUDE_INTERCOM_SESSION_ID": "cc", "PI_CODING_AGENT_DIR": dir}}}})
	require.NoError(t, err)
	cfgPath := filepath.Join(cwd, "mcp.json")
	require.NoError(t, os.WriteFile(cfgPath, cfg, 0o600))
	debug := filepath.Join(t.TempDir(), "claude-debug.txt")
	pane := startTmux(t, cwd, "env", "HOME="+home, "PATH="+os.Getenv("PATH"), "LANG=C.UTF-8", "DISABLE_AUTOUPDATER=1",
		"ANTHROPIC_BASE_URL="+model.URL, "ANTHROPIC_API_KEY="+apiKey,
		claude, "--debug-file", debug, "--mcp-config", cfgPath, "--allowedTools", "mcp__agent-fleet",
		"--dangerously-load-development-channels", "server:agent-fleet")
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(debug); err == nil {
				t.Logf("claude debug log (channel lines):\n%s", grepLines(string(data), "agent-fleet"))
			}
		}
	})

	// Claude Code asks once whether development channels are meant.
	pane.waitScreen("I am using this for local development")
	pane.keys("Enter")
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(debug)
		return strings.Contains(string(data), `MCP server "agent-fleet": Channel notifications registered`)
	}, 2*time.Minute, 100*time.Millisecond, "Claude Code never registered agent-fleet's channel")
	require.Empty(t, model.Requests(), "the session is idle: no prompt was typed")

	out, err := as(t, dir, "alice", "intercom", "send", "cc", text).CombinedOutput()
	require.NoError(t, err, "%s", out)
	waitScript(t, model)
	pane.waitScreen("Reviewing the parser.")
	require.Contains(t, pane.screen(), `← agent-fleet: New intercom message from alice`, "the person at the terminal sees the push too")
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
