//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// The real coding-agent CLIs (installed from npm by .ci/run) with exactly
// the configuration and the turn command lines a worker's shim gives them
// (harness.BuildTurn, harness.WorkerMCPServer): their MCP clients accept and
// connect agent-fleet's server acting as the worker, and a turn without
// credentials gets as far as the model call — an unknown flag in the same
// place is a usage error, so these checks can fail.

// cliTurn is a worker's turn for a real CLI, with agent-fleet's MCP server
// acting as session id through a live holder (an `intercom listen`).
type cliTurn struct {
	spec *harness.Spec
	turn *harness.Turn
	cmd  *harness.TurnCommand
	home string // HOME without credentials
	cwd  string
}

func newCLITurn(t *testing.T, kind, exe, agentDir, id string) *cliTurn {
	t.Helper()
	c := &cliTurn{home: t.TempDir(), cwd: t.TempDir()}
	c.spec = &harness.Spec{Kind: kind, Command: []string{exe}, Cwd: c.cwd, Task: "say hello"}
	env := []string{"AGENT_INTERCOM_SESSION_ID=" + id, "AGENT_INTERCOM_SESSION_NAME=" + id, "AGENT_INTERCOM_WORKER_ID=" + id,
		"AGENT_INTERCOM_MANAGER_SESSION_ID=boss", "PI_CODING_AGENT_DIR=" + agentDir, "UNRELATED=1"}
	c.turn = &harness.Turn{N: 1, WorkerID: id, Dir: t.TempDir(), Prompt: harness.TaskPrompt(1, "boss", "say hello"),
		Mandate: harness.Mandate(c.spec, id, "boss"), NewSession: harness.NewSession(kind, id, "0123456789ab"),
		MCP: harness.WorkerMCPServer([]string{filepath.Join(binDir(t), "agent-fleet")}, kind, env, nil)}
	require.NotContains(t, c.turn.MCP.Env, "UNRELATED", "only the identity and the agent directory")
	c.build(t)
	return c
}

func (c *cliTurn) build(t *testing.T) {
	t.Helper()
	var err error
	c.cmd, err = harness.BuildTurn(c.spec, c.turn)
	require.NoError(t, err)
	for path, data := range c.cmd.Files {
		require.NoError(t, os.WriteFile(path, data, 0o600))
	}
}

// env is a clean environment: the test's PATH (node), HOME without
// credentials, and the turn's own variables.
func (c *cliTurn) env(extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + c.home, "DISABLE_AUTOUPDATER=1", "LANG=C.UTF-8"}
	return append(append(env, c.cmd.Env...), extra...)
}

// run runs argv (the turn's, or a variant) with the prompt on stdin; with
// a timeout the process is killed then (a CLI that waits for a network that
// is not there), which is not a failure.
func (c *cliTurn) run(t *testing.T, argv []string, timeout time.Duration) (stdout, stderr string, exit int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdin = c.cwd, c.env(), strings.NewReader(c.cmd.Stdin)
	// The CLIs are node wrappers around other processes: end them all, as
	// the shim ends a turn's process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	exit = 0
	if cmd.ProcessState != nil {
		exit = cmd.ProcessState.ExitCode()
	}
	if err != nil && ctx.Err() == nil && exit == 0 {
		t.Fatalf("%v: %v", argv, err)
	}
	return out.String(), errb.String(), exit
}

// withFlag is argv with an unknown flag after the harness's own turn flags.
func withFlag(argv []string, at int) []string {
	out := slices.Clone(argv[:at])
	out = append(out, "--no-such-flag-agent-fleet")
	return append(out, argv[at:]...)
}

func TestRealClaudeCodeTurn(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "cw-real")
	c := newCLITurn(t, "claude", claude, dir, "cw-real")

	// `claude mcp list` with the worker's exact server entry (the file a
	// turn passes with --mcp-config, as a project's .mcp.json).
	cfg := c.cmd.Files[filepath.Join(c.turn.Dir, "claude-mcp.json")]
	require.NotNil(t, cfg)
	require.NoError(t, os.WriteFile(filepath.Join(c.cwd, ".mcp.json"), cfg, 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(c.home, ".claude"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(c.home, ".claude", "settings.json"), []byte(`{"enableAllProjectMcpServers":true}`), 0o600))
	list := exec.Command(claude, "mcp", "list")
	list.Dir, list.Env = c.cwd, c.env()
	out, err := list.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `agent-fleet: \S+/agent-fleet mcp --harness claude --worker - .*Connected`, string(out))

	// The turn's exact command line without credentials: a JSON result
	// from the model call, with the conversation id the shim chose.
	stdout, stderr, exit := c.run(t, c.cmd.Argv, 90*time.Second)
	require.Equal(t, 1, exit, "stdout %s stderr %s", stdout, stderr)
	res := harness.ParseTurnOutput("claude", []byte(stdout))
	require.True(t, res.Failed)
	require.Equal(t, c.turn.NewSession, res.Session)
	require.Contains(t, res.Error, "Not logged in")
	require.Contains(t, stdout, `"terminal_reason":"api_error"`)

	// Resumed, as the next turn would be.
	c.turn.Session, c.turn.NewSession = res.Session, ""
	c.build(t)
	stdout, _, _ = c.run(t, c.cmd.Argv, 90*time.Second)
	res = harness.ParseTurnOutput("claude", []byte(stdout))
	require.Equal(t, c.turn.Session, res.Session, "the conversation was resumed: %s", stdout)
	require.Contains(t, res.Error, "Not logged in")

	// Control: an unknown flag is refused before any model call.
	stdout, stderr, exit = c.run(t, withFlag(c.cmd.Argv, 1), 60*time.Second)
	require.NotZero(t, exit)
	require.Contains(t, stderr, "unknown option")
	require.NotContains(t, stdout, `"type":"result"`)
}

func TestRealCodexTurn(t *testing.T) {
	t.Parallel()
	codex := nodeTool(t, "codex")
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "cx-real")
	c := newCLITurn(t, "codex", codex, dir, "cx-real")
	var overrides []string
	for i, a := range c.cmd.Argv {
		if a == "-c" {
			overrides = append(overrides, "-c", c.cmd.Argv[i+1])
		}
	}

	// `codex mcp get --json` / `mcp list` accept the worker's overrides and
	// read them as the entry the shim meant.
	get := exec.Command(codex, append([]string{"mcp", "get", harness.MCPServerName, "--json"}, overrides...)...)
	get.Dir, get.Env = c.cwd, c.env()
	out, err := get.Output()
	require.NoError(t, err, "%s", out)
	var entry struct {
		Enabled   bool `json:"enabled"`
		Transport struct {
			Type    string            `json:"type"`
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"transport"`
		StartupTimeout float64 `json:"startup_timeout_sec"`
		ToolTimeout    float64 `json:"tool_timeout_sec"`
	}
	require.NoError(t, json.Unmarshal(out, &entry), "%s", out)
	require.True(t, entry.Enabled)
	require.Equal(t, "stdio", entry.Transport.Type)
	require.Equal(t, c.turn.MCP.Command, entry.Transport.Command)
	require.Equal(t, c.turn.MCP.Args, entry.Transport.Args)
	require.Equal(t, c.turn.MCP.Env, entry.Transport.Env)
	require.Equal(t, 130.0, entry.ToolTimeout)
	list := exec.Command(codex, append([]string{"mcp", "list"}, overrides...)...)
	list.Dir, list.Env = c.cwd, c.env()
	out, err = list.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `agent-fleet\s+\S+/agent-fleet\s+mcp --harness codex --worker.*enabled`, string(out))

	// The turn: the server is required, so reaching the model call (the
	// turn started, then waits for a network that is not there) means Codex
	// started agent-fleet's MCP server acting as the worker.
	stdout, stderr, _ := c.run(t, c.cmd.Argv, 25*time.Second)
	require.Contains(t, stdout, `"type":"turn.started"`, "stderr: %s", stderr)
	res := harness.ParseTurnOutput("codex", []byte(stdout))
	require.NotEmpty(t, res.Session, "thread.started names the conversation")
	require.True(t, res.Failed, "no turn completes without a model")

	// The resumed turn's command line is accepted too.
	c.turn.Session = res.Session
	c.build(t)
	require.Equal(t, []string{"exec", "resume"}, c.cmd.Argv[1:3])
	stdout, stderr, _ = c.run(t, c.cmd.Argv, 25*time.Second)
	require.Contains(t, stdout, `"type":"turn.started"`, "stderr: %s", stderr)
	require.Equal(t, res.Session, harness.ParseTurnOutput("codex", []byte(stdout)).Session)

	// Controls: an unknown flag is a usage error; a server that cannot act
	// as the worker (no holder for its id) stops the turn before the model.
	_, stderr, exit := c.run(t, withFlag(c.cmd.Argv, 3), 30*time.Second)
	require.Equal(t, 2, exit)
	require.Contains(t, stderr, "unexpected argument")
	c.turn.MCP.Env["AGENT_INTERCOM_SESSION_ID"] = "nobody-holds-this"
	c.turn.Session = ""
	c.build(t)
	stdout, stderr, exit = c.run(t, c.cmd.Argv, 60*time.Second)
	require.NotZero(t, exit)
	require.NotContains(t, stdout, `"type":"turn.started"`)
	require.Contains(t, stderr, "required MCP servers failed to initialize: agent-fleet")
}

func TestRealOpencodeTurn(t *testing.T) {
	t.Parallel()
	opencode := nodeTool(t, "opencode")
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "oc-real")
	c := newCLITurn(t, "opencode", opencode, dir, "oc-real")

	// `opencode mcp list` with the worker's OPENCODE_CONFIG_CONTENT.
	list := exec.Command(opencode, "mcp", "list")
	list.Dir, list.Env = c.cwd, c.env()
	out, err := list.CombinedOutput()
	require.NoError(t, err, "%s", out)
	plain := regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAllString(string(out), "")
	require.Regexp(t, `✓ agent-fleet\s+connected`, plain)
	require.Contains(t, plain, "agent-fleet mcp --harness opencode --worker")

	// The turn: OpenCode's own provider is out of reach here, so the
	// model call fails, in the JSON format, with the session named.
	stdout, stderr, exit := c.run(t, c.cmd.Argv, 120*time.Second)
	require.NotZero(t, exit, "stdout %s stderr %s", stdout, stderr)
	res := harness.ParseTurnOutput("opencode", []byte(stdout))
	require.True(t, res.Failed)
	require.True(t, strings.HasPrefix(res.Session, "ses_"), "stdout %s stderr %s", stdout, stderr)
	require.NotEmpty(t, res.Error)

	// Resumed: an unknown session fails at once ("Session not found");
	// this one is found and the turn goes on to the model call (which
	// retries for a minute before it gives up: not waited for here).
	c.turn.Session = res.Session
	c.build(t)
	require.Equal(t, res.Session, argAfter(c.cmd.Argv, "--session"))
	stdout, stderr, exit = c.run(t, c.cmd.Argv, 15*time.Second)
	require.NotContains(t, stderr, "Session not found")
	require.True(t, exit == -1 || harness.ParseTurnOutput("opencode", []byte(stdout)).Session == res.Session, "resumed: %s %s", stdout, stderr)
	c.turn.Session = "ses_no_such_session_agent_fleet"
	c.build(t)
	_, stderr, exit = c.run(t, c.cmd.Argv, 60*time.Second)
	require.Equal(t, 1, exit)
	require.Contains(t, stderr, "Session not found", "the control: a session that does not exist")

	// Control: an unknown flag is refused with the usage text.
	stdout, stderr, exit = c.run(t, withFlag(c.cmd.Argv, 2), 60*time.Second)
	require.NotZero(t, exit)
	require.Contains(t, stderr, "opencode run [message..]")
	require.Empty(t, stdout)
}

// pi-mcp-adapter's own configuration loader and MCP client (its dist/
// code, on the machine's Node) read the --mcp-config file a pi turn gets
// and connect to agent-fleet's server acting as the worker. Whole pi turns
// are in harness_turn_pi_test.go.
func TestPiMCPAdapterReadsTheWorkerConfig(t *testing.T) {
	t.Parallel()
	bin, err := filepath.EvalSymlinks(nodeTool(t, "pi-mcp-adapter"))
	require.NoError(t, err)
	adapter := filepath.Dir(bin) // the package: its bin is cli.js at the top
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "pi-real")
	c := newCLITurn(t, "pi", "/nonexistent/pi", dir, "pi-real")
	cfgPath := argAfter(c.cmd.Argv, "--mcp-config")
	require.NotEmpty(t, cfgPath)
	script := `
import { loadMcpConfig } from ` + jsString(filepath.Join(adapter, "dist", "config.js")) + `;
import { McpServerManager } from ` + jsString(filepath.Join(adapter, "dist", "server-manager.js")) + `;
const config = loadMcpConfig(process.argv[1], process.cwd());
const def = config.mcpServers["agent-fleet"];
const manager = new McpServerManager(process.cwd());
const conn = await manager.connect("agent-fleet", def);
console.log(JSON.stringify({ status: conn.status, lifecycle: def.lifecycle, directTools: def.directTools,
  toolPrefix: def.toolPrefix, tools: conn.tools.map((t) => t.name) }));
process.exit(0);
`
	cmd := exec.Command("node", "--input-type=module", "-e", script, cfgPath)
	cmd.Dir, cmd.Env = c.cwd, append(c.env(), "PI_CODING_AGENT_DIR="+filepath.Join(c.home, ".pi", "agent"))
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var got struct {
		Status, Lifecycle, ToolPrefix string
		DirectTools                   bool
		Tools                         []string
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	require.Equal(t, "connected", got.Status)
	require.Equal(t, "eager", got.Lifecycle)
	require.True(t, got.DirectTools)
	require.Equal(t, "none", got.ToolPrefix)
	require.Contains(t, got.Tools, "intercom_send")
	require.Contains(t, got.Tools, "intercom_reply")
	require.NotContains(t, got.Tools, "agent_fleet", "a worker has no fleet tool")
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// `agent-fleet spawn --kind claude` with the real Claude Code and no
// credentials: the first turn fails with a clear message in status and
// to the manager, and the worker stops cleanly. The same for OpenCode (no
// provider reachable) and Codex (which waits for the network until the
// turn's limit).
func TestRealHarnessWorkersWithoutCredentials(t *testing.T) {
	t.Parallel()
	claude, opencode, codex := nodeTool(t, "claude"), nodeTool(t, "opencode"), nodeTool(t, "codex")
	unitstest.Require(t)
	w := newHarnessWorld(t)

	// All three at once: OpenCode retries its provider for about a minute.
	w.must("spawn", "--id", "real-claude", "--kind", "claude", "--task", "Summarise README.md", "--", claude)
	w.must("spawn", "--id", "real-opencode", "--kind", "opencode", "--task", "Summarise README.md", "--", opencode)
	w.must("spawn", "--id", "real-codex", "--kind", "codex", "--turn-timeout", "45s", "--task", "Summarise README.md", "--", codex)

	report := w.message("real-claude", func(s string) bool { return strings.Contains(s, "failed") })
	require.Contains(t, report.Text, "turn 1 of worker real-claude (claude) failed: Not logged in · Please run /login")
	st := w.status("real-claude")
	require.Equal(t, "running", st.Worker.State, "a failed turn is not fatal")
	require.Contains(t, st.Worker.LastError, "turn 1 failed: Not logged in")
	require.NotEmpty(t, st.Turns.Session, "Claude Code reported the conversation it began")
	text := w.must("status", "real-claude")
	require.Contains(t, text, "error:    turn 1 failed: Not logged in")

	report = w.message("real-opencode", func(s string) bool { return strings.Contains(s, "failed") })
	require.Contains(t, report.Text, "turn 1 of worker real-opencode (opencode) failed:")

	report = w.message("real-codex", func(s string) bool { return strings.Contains(s, "failed") })
	require.Contains(t, report.Text, "turn 1 of worker real-codex (codex) failed: the turn ran past its limit of 45s")
	require.NotEmpty(t, w.status("real-codex").Turns.Session, "codex began a thread before the model call")

	for _, id := range []string{"real-claude", "real-opencode", "real-codex"} {
		require.Contains(t, w.must("stop", id), "nothing of it is left in its cgroup")
		require.Equal(t, "stopped", w.status(id).Worker.State)
	}
}
