//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// Real Claude Code workers and a real Claude Code manager, end to end,
// with the model scripted (fleet/harness/modeltest): real units, the
// worker shim's wake loop, claude -p turns, agent-fleet's MCP server inside
// them, the intercom between them.

// The tool names of agent-fleet's MCP server as Claude Code offers them
// (mcp__<server>__<tool>; deferred, so a model loads them with ToolSearch).
const (
	claudeSend    = "mcp__agent-fleet__intercom_send"
	claudeReply   = "mcp__agent-fleet__intercom_reply"
	claudeAsk     = "mcp__agent-fleet__intercom_ask"
	claudePending = "mcp__agent-fleet__intercom_pending"
	claudeFleet   = "mcp__agent-fleet__agent_fleet"
)

// claudeEndpointEnv is what points a Claude Code worker at the scripted
// endpoint: its base URL, any API key, and a HOME of its own.
func claudeEndpointEnv(t *testing.T, srv *modeltest.Server) map[string]string {
	return map[string]string{"ANTHROPIC_BASE_URL": srv.URL, "ANTHROPIC_API_KEY": "sk-ant-fleet-test",
		"DISABLE_AUTOUPDATER": "1", "HOME": t.TempDir()}
}

// envFlags is env as spawn's --env flags.
func envFlags(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, "--env", k+"="+v)
	}
	return out
}

// resultOK is an Expect that the newest tool result is no error.
func resultOK(r *modeltest.Request) error {
	res := r.LastToolResult()
	if res == nil || res.IsError {
		return fmt.Errorf("want a successful tool result, got %+v", res)
	}
	return nil
}

// turnEnded reports whether the worker's turn n has ended.
func turnEnded(w *harnessWorld, id string, n int) func() bool {
	return func() bool {
		st := w.status(id)
		return st.Turns != nil && st.Turns.Last != nil && st.Turns.Last.N == n
	}
}

// turnTokens is a parsed turn's input, output, cache read and cache write
// tokens.
func turnTokens(t *testing.T, res harness.TurnResult) [4]int64 {
	t.Helper()
	require.NotNil(t, res.Usage, "the turn's usage was read")
	u := res.Usage
	return [4]int64{u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens}
}

// waitScript waits until every scripted step of srv was taken (what an
// Expect captured may be read then); the bound is only a hang guard.
func waitScript(t *testing.T, srv *modeltest.Server) {
	t.Helper()
	select {
	case <-srv.Done():
	case <-time.After(3 * time.Minute):
		t.Fatalf("%d scripted model steps were never requested (%d requests)", srv.Remaining(), len(srv.Requests()))
	}
}

// called reports whether the conversation of r has a call of the tool.
func called(r *modeltest.Request, tool string) bool {
	for _, m := range r.Messages {
		for _, c := range m.ToolCalls {
			if c.Name == tool {
				return true
			}
		}
	}
	return false
}

// A worker's task turn messages its manager with intercom_send; the
// manager's ask wakes a resumed turn that answers with intercom_reply. A
// read-only worker's Bash and Write are refused by Claude Code.
func TestRealClaudeWorkerTurns(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	w := newHarnessWorld(t)
	w.real = map[string]string{"claude": claude}

	model := modeltest.Start(t,
		modeltest.Step{Name: "task", API: modeltest.Anthropic,
			Expect: modeltest.All(modeltest.PromptContains("Your task from boss:", "write the parser"),
				modeltest.Offers(claudeSend, claudeReply, claudePending), modeltest.Lacks(claudeFleet),
				modeltest.SystemContains(`You are "cw", a coding agent (claude) running as an agent-fleet worker`)),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.ToolSearch(claudeSend)}}},
		modeltest.Step{Name: "send", Expect: modeltest.ToolResultContains("tool_reference:" + claudeSend),
			Reply: modeltest.Reply{Text: "Telling boss.", ToolCalls: []modeltest.ToolCall{
				modeltest.Call(claudeSend, map[string]any{"to": "boss", "message": "progress: the parser is written"})}}},
		modeltest.Step{Name: "sent", Expect: resultOK, Reply: modeltest.Reply{Text: "Parser done."}},
	)
	cwd := t.TempDir()
	w.spawn("cw", "claude", append(envFlags(claudeEndpointEnv(t, model)), "--cwd", cwd, "--task", "write the parser")...)
	got := w.message("cw", func(string) bool { return true })
	require.Equal(t, "progress: the parser is written", got.Text, "the model's intercom_send reached the manager first")
	waitScript(t, model)
	require.Eventually(t, turnEnded(w, "cw", 1), 60*time.Second, 50*time.Millisecond)
	st := w.status("cw")
	require.True(t, st.Turns.Last.OK, "%+v", st.Turns.Last)
	session := st.Turns.Session
	require.NotEmpty(t, session)
	// The turn's usage, read from Claude Code's own report of the three
	// scripted calls, is the worker's.
	require.NotNil(t, st.Worker.Usage)
	require.Equal(t, 1, st.Worker.Usage.Turns)
	require.Equal(t, int64(3*12), st.Worker.Usage.InputTokens)
	require.Equal(t, int64(3*5), st.Worker.Usage.OutputTokens)
	require.NotNil(t, st.Worker.Usage.CostUSD, "Claude Code reports a cost")

	// The ask: a resumed turn of the same conversation, whose model loads
	// intercom_reply and answers with it.
	var asked *modeltest.Request
	model.Add(
		modeltest.Step{Name: "asked", Expect: func(r *modeltest.Request) error {
			asked = r
			return modeltest.PromptContains("write the parser", "what is 6 times 7?", "This is an ask")(r)
		}, Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.ToolSearch(claudeReply)}}},
		modeltest.Step{Name: "reply", Expect: modeltest.ToolResultContains("tool_reference:" + claudeReply),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call(claudeReply, map[string]any{"to": "boss", "message": "6 × 7 = 42"})}}},
		modeltest.Step{Name: "replied", Expect: resultOK, Reply: modeltest.Reply{Text: "Answered."}},
	)
	out := w.must("intercom", "ask", "cw", "what is 6 times 7?", "--timeout", "2m")
	require.Equal(t, "Reply from cw:\n6 × 7 = 42\n", out)
	waitScript(t, model)
	require.Equal(t, session, asked.Header.Get("X-Claude-Code-Session-Id"), "the turn resumed the conversation")
	require.True(t, called(asked, claudeSend), "the resumed conversation has the first turn's intercom_send")
	require.Eventually(t, turnEnded(w, "cw", 2), 60*time.Second, 50*time.Millisecond)
	for _, m := range w.boss.messages() {
		require.NotEqual(t, "Parser done.", m.Text, "the turn messaged its manager itself: its final answer is not sent again")
		require.NotEqual(t, "Answered.", m.Text, "the ask was answered: the final answer is not sent")
	}

	// Read-only: Bash and Write are not offered, and when the model asks
	// for them anyway Claude Code refuses, in the tool results; so it does
	// for a tool that would need a permission prompt (WebFetch; it would
	// fetch from a port nothing listens on).
	var refused *modeltest.Request
	ro := modeltest.Start(t,
		modeltest.Step{Name: "try", Expect: modeltest.All(modeltest.PromptContains("tidy up"), modeltest.Lacks("Bash"), modeltest.Lacks("Write"), modeltest.Lacks("Edit"),
			modeltest.Offers("Read", claudeSend)),
			Reply: modeltest.Reply{Text: "Cleaning up.", ToolCalls: []modeltest.ToolCall{
				modeltest.Call("Bash", map[string]any{"command": "touch " + filepath.Join(cwd, "by-bash")}),
				modeltest.Call("Write", map[string]any{"file_path": filepath.Join(cwd, "by-write"), "content": "x"}),
				modeltest.Call("WebFetch", map[string]any{"url": "http://127.0.0.1:9/", "prompt": "summarise"}),
			}}},
		modeltest.Step{Name: "refused", Expect: func(r *modeltest.Request) error { refused = r; return nil },
			Reply: modeltest.Reply{Text: "I may not run commands or write files here."}},
	)
	w.spawn("cw-ro", "claude", append(envFlags(claudeEndpointEnv(t, ro)), "--cwd", cwd, "--permission", "read-only", "--task", "tidy up")...)
	final := w.message("cw-ro", func(string) bool { return true })
	require.Equal(t, "I may not run commands or write files here.", final.Text)
	waitScript(t, ro)
	last := refused.Messages[len(refused.Messages)-1]
	require.Len(t, last.ToolResults, 3)
	tools := map[string]string{}
	for _, c := range refused.Messages[len(refused.Messages)-2].ToolCalls {
		tools[c.ID] = c.Name
	}
	for _, res := range last.ToolResults {
		require.True(t, res.IsError, "%+v", res)
		switch name := tools[res.CallID]; name {
		case "Bash", "Write": // --disallowedTools: gone for the model
			require.Contains(t, res.Content, fmt.Sprintf("No such tool available: %s. %s is disabled for this session", name, name))
		default: // dontAsk: what would prompt is denied
			require.Equal(t, "WebFetch", name)
			require.Contains(t, res.Content, "Permission to use WebFetch has been denied because Claude Code is running in don't ask mode.")
		}
	}
	for _, f := range []string{"by-bash", "by-write"} {
		_, err := os.Stat(filepath.Join(cwd, f))
		require.True(t, errors.Is(err, os.ErrNotExist), "%s was created", f)
	}
}

// A manager that is itself a headless Claude Code session (claude -p with
// `agent-fleet mcp` as its MCP server) spawns a Claude Code worker with
// the agent_fleet tool, asks it, reads the report it sent, and stops it.
func TestRealClaudeManagerSession(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	w := newHarnessWorld(t)
	mgr := "mgr-claude"
	t.Cleanup(func() {
		cmd := as(t, w.dir, mgr, "stop", "mw")
		cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
		_ = cmd.Run()
	})

	worker := modeltest.Start(t,
		modeltest.Step{Name: "task", Expect: modeltest.PromptContains("Your task from "+mgr+":", "count the files"),
			Reply: modeltest.Reply{Text: "I counted 3 files."}},
		modeltest.Step{Name: "ask", Expect: modeltest.PromptContains("How many files?", "This is an ask"),
			Reply: modeltest.Reply{Text: "3 files."}},
	)
	spawnEnv := claudeEndpointEnv(t, worker)
	spawnEnv[TurnBackoffEnv] = "400ms"
	var askResult, pendingResult, stopResult *modeltest.ToolResult
	keep := func(dst **modeltest.ToolResult) func(*modeltest.Request) error {
		return func(r *modeltest.Request) error {
			*dst = r.LastToolResult()
			return resultOK(r)
		}
	}
	manager := modeltest.Start(t,
		modeltest.Step{Name: "load", Expect: modeltest.All(modeltest.PromptContains("count the files with a worker"), modeltest.Offers(claudeFleet, claudeAsk)),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.ToolSearch(claudeFleet, claudeAsk, claudePending)}}},
		modeltest.Step{Name: "spawn", Expect: modeltest.ToolResultContains("tool_reference:" + claudeFleet),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call(claudeFleet, map[string]any{
				"action": "spawn", "id": "mw", "kind": "claude", "task": "count the files", "command": []string{claude}, "env": spawnEnv})}}},
		modeltest.Step{Name: "ask", Expect: modeltest.All(resultOK, modeltest.ToolResultContains("mw")),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call(claudeAsk, map[string]any{"to": "mw", "message": "How many files?", "timeout_ms": 120000})}}},
		modeltest.Step{Name: "pending", Expect: keep(&askResult),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call(claudePending, map[string]any{"mark_read": true})}}},
		modeltest.Step{Name: "stop", Expect: keep(&pendingResult),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call(claudeFleet, map[string]any{"action": "stop", "id": "mw"})}}},
		modeltest.Step{Name: "report", Expect: keep(&stopResult), Reply: modeltest.Reply{Text: "The worker counted 3 files."}},
	)

	// The manager's own MCP server entry: `agent-fleet mcp` (no --worker)
	// as mgr, with the user manager to spawn on.
	cwd := t.TempDir()
	mcpEnv := map[string]string{"AGENT_FLEET_RUN_MAIN": "1", "AGENT_INTERCOM_SESSION_ID": mgr, "PI_CODING_AGENT_DIR": w.dir}
	for _, kv := range unitstest.Require(t).Env() {
		k, v, _ := strings.Cut(kv, "=")
		mcpEnv[k] = v
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"agent-fleet": map[string]any{
		"command": exe, "args": []string{"mcp", "--harness", "claude"}, "env": mcpEnv}}})
	require.NoError(t, err)
	cfgPath := filepath.Join(cwd, "manager-mcp.json")
	require.NoError(t, os.WriteFile(cfgPath, cfg, 0o600))
	c := &cliTurn{home: t.TempDir(), cwd: cwd, cmd: &harness.TurnCommand{
		Stdin: "Get the files in this directory counted: count the files with a worker.",
		Env:   []string{"ANTHROPIC_BASE_URL=" + manager.URL, "ANTHROPIC_API_KEY=sk-ant-manager"}}}
	argv := []string{claude, "-p", "--output-format", "json", "--mcp-config", cfgPath, "--allowedTools", "mcp__agent-fleet", "--permission-prompts", "none"}
	stdout, stderr, exit := c.run(t, argv, 4*time.Minute)
	require.Equal(t, 0, exit, "stdout %s\nstderr %s", stdout, stderr)
	res := harness.ParseTurnOutput("claude", []byte(stdout))
	require.False(t, res.Failed, "%+v", res)
	require.Positive(t, turnTokens(t, res)[0], "agent-fleet reads the manager turn's usage")
	require.True(t, res.Usage.CostKnown, "Claude Code prices the turn")
	require.Equal(t, "The worker counted 3 files.", res.Final)
	waitScript(t, manager)
	waitScript(t, worker)

	// What the manager received, as its model saw it.
	require.Contains(t, askResult.Content, `"text":"3 files."`, "the ask's reply is the worker's final answer")
	require.Contains(t, askResult.Content, `"from":{"id":"mw"`)
	require.Contains(t, pendingResult.Content, `"text":"I counted 3 files."`, "the task turn's answer was sent to the manager")
	// Claude Code gives its model an MCP result's structuredContent (the
	// JSON views) in place of the text (docs/architecture.md "MCP tool
	// results").
	require.Contains(t, stopResult.Content, `"state":"stopped"`)
	require.Contains(t, stopResult.Content, `"survivors":[]`, "nothing of the worker survived")
	st := w.status("mw")
	require.Equal(t, "stopped", st.Worker.State)
	require.Equal(t, mgr, st.Worker.Manager)
}

// A real Claude Code worker's budget: the scripted usage of its task turn
// spends it, so the next message starts no turn and the manager is told;
// renew raises the budget and the kept message runs.
func TestRealClaudeWorkerBudget(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	w := newHarnessWorld(t)
	w.real = map[string]string{"claude": claude}
	model := modeltest.Start(t,
		modeltest.Step{Name: "task", API: modeltest.Anthropic, Expect: modeltest.PromptContains("count the files"),
			Reply: modeltest.Reply{Text: "There are 3 files.", Usage: modeltest.Usage{Input: 4000, Output: 100}}},
	)
	w.spawn("cb", "claude", append(envFlags(claudeEndpointEnv(t, model)), "--budget-tokens", "1000", "--task", "count the files")...)
	w.received("cb", "There are 3 files.")
	waitScript(t, model)

	w.must("intercom", "send", "cb", "now count the directories")
	notice := w.message("cb", func(s string) bool { return strings.Contains(s, "has spent its budget") })
	require.Contains(t, notice.Text, "(4100 of 1000 tokens)", "Claude Code's own report of the turn")
	st := w.status("cb")
	require.Equal(t, "budget-spent", st.Worker.StateReason)
	require.Equal(t, 1, st.Turns.Turns, "no turn started")
	require.Equal(t, int64(4100), st.Worker.Usage.Tokens)

	model.Add(modeltest.Step{Name: "kept", API: modeltest.Anthropic, Expect: modeltest.PromptContains("now count the directories"),
		Reply: modeltest.Reply{Text: "There are 2 directories."}})
	require.Contains(t, w.must("renew", "cb", "--budget-tokens", "1M"), "Budget: 1M tokens")
	w.received("cb", "There are 2 directories.")
	waitScript(t, model)
	require.Contains(t, w.must("stop", "cb"), "nothing of it is left in its cgroup")
}
