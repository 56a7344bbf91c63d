//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// The real OpenCode against the scripted model endpoint: a provider of
// OpenCode's bundled OpenAI-compatible package whose base URL is the
// endpoint, in a configuration file OPENCODE_CONFIG names (the turn's own
// OPENCODE_CONFIG_CONTENT, agent-fleet's MCP server and permissions, is
// merged over it). docs/harness-endpoints.md "OpenCode" has the recipe.

// opencodeModel is the model a turn names with -m (provider/model).
const opencodeModel = "modeltest/scripted"

// opencodeEndpointEnv writes the provider configuration for s and returns
// the environment that points OpenCode at it and keeps it off the network:
// no models.dev catalog fetch, and no npm registry for its package checks.
func opencodeEndpointEnv(t *testing.T, s *modeltest.Server) []string {
	t.Helper()
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{"modeltest": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "Scripted model endpoint",
			"options": map[string]any{"baseURL": s.URL + "/v1", "apiKey": "modeltest-key"},
			"models":  map[string]any{"scripted": map[string]any{"name": "Scripted"}},
		}},
	}
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "opencode.json")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return []string{"OPENCODE_CONFIG=" + path, "OPENCODE_DISABLE_MODELS_FETCH=1", "npm_config_registry=http://127.0.0.1:9/"}
}

// spawnEnv is env as spawn --env flags.
func spawnEnv(env []string) []string {
	var args []string
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	return args
}

// toolResults are the results of the conversation's newest tool calls.
func toolResults(r *modeltest.Request) []modeltest.ToolResult {
	var out []modeltest.ToolResult
	for i := len(r.Messages) - 1; i >= 0 && len(r.Messages[i].ToolResults) > 0; i-- {
		out = append(r.Messages[i].ToolResults, out...)
	}
	return out
}

// refused is an Expect that every newest tool result holds its refusal.
func refused(refusals ...string) func(*modeltest.Request) error {
	return func(r *modeltest.Request) error {
		res := toolResults(r)
		if len(res) != len(refusals) {
			return fmt.Errorf("%d tool results, want %d: %+v", len(res), len(refusals), res)
		}
		for i, want := range refusals {
			if !strings.Contains(res[i].Content, want) {
				return fmt.Errorf("tool result %d %q is not the refusal %q", i, res[i].Content, want)
			}
		}
		return nil
	}
}

var askIDRE = regexp.MustCompile(`ask (\S+), awaiting your reply`)

// answerAsk is a Respond that answers the ask in the turn's prompt with
// the reply tool (named as the harness names it), as a model does.
func answerAsk(tool, text string) func(*modeltest.Request) modeltest.Reply {
	return func(r *modeltest.Request) modeltest.Reply {
		m := askIDRE.FindStringSubmatch(r.Prompt())
		if m == nil {
			return modeltest.Reply{Text: "no ask in the prompt"}
		}
		return modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call(tool, map[string]string{"askId": m[1], "message": text})}}
	}
}

// A worker's turns through the real OpenCode CLI and agent-fleet's MCP
// server: a text answer with usage, a resumed conversation whose model
// messages the manager, and rate limits that pass and that do not.
func TestRealOpencodeTurnsAgainstScriptedModel(t *testing.T) {
	t.Parallel()
	opencode := nodeTool(t, "opencode")
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "oc-turn")
	boss := startListener(t, dir, "boss")
	s := modeltest.Start(t,
		modeltest.Step{Name: "task", API: modeltest.ChatCompletions,
			Expect: modeltest.All(modeltest.PromptContains("Your task from boss:\n\nsay hello"),
				modeltest.Offers("agent-fleet_intercom_send", "agent-fleet_intercom_reply", "read", "write", "bash"),
				modeltest.Lacks("agent-fleet_agent_fleet")),
			Reply: modeltest.Reply{Text: "hello from opencode", Usage: modeltest.Usage{Input: 1200, Output: 30, CacheRead: 400}}},
		modeltest.Step{Name: "send", Expect: modeltest.PromptContains("tell boss you started"),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call("agent-fleet_intercom_send",
				map[string]string{"to": "boss", "message": "oc-turn started on it"})}}},
		modeltest.Step{Name: "after send", Expect: modeltest.ToolResultContains("Message sent to boss."), Reply: modeltest.Reply{Text: "told boss"}},
		modeltest.Step{Name: "limited once", Reply: modeltest.Reply{Error: modeltest.RateLimit(time.Second)}},
		modeltest.Step{Name: "after the limit", Expect: modeltest.PromptContains("go on"), Reply: modeltest.Reply{Text: "went on"}},
		// OpenCode retries a 429 five times, then gives up.
		modeltest.Step{Name: "limited", Reply: modeltest.Reply{Error: modeltest.RateLimit(time.Second)}, Times: 6},
	)
	c := newCLITurn(t, "opencode", opencode, dir, "oc-turn")
	c.spec.Model = opencodeModel
	env := opencodeEndpointEnv(t, s)
	turn := func(prompt string) (harness.TurnResult, string) {
		t.Helper()
		if prompt != "" {
			c.turn.Prompt = prompt
		}
		c.build(t)
		c.cmd.Env = append(c.cmd.Env, env...)
		stdout, stderr, exit := c.run(t, c.cmd.Argv, 5*time.Minute)
		res := harness.ParseTurnOutput("opencode", []byte(stdout))
		require.Equal(t, res.Failed, exit != 0, "exit %d, stdout %s, stderr %s", exit, stdout, stderr)
		return res, stdout
	}

	res, stdout := turn("")
	require.False(t, res.Failed, res.Error)
	require.Equal(t, "hello from opencode", res.Final)
	require.True(t, strings.HasPrefix(res.Session, "ses_"), res.Session)
	require.Contains(t, stdout, `"tokens":{"total":1630,"input":1200,"output":30,"reasoning":0,"cache":{"write":0,"read":400}}`,
		"OpenCode reports the usage the model gave, cached tokens apart")
	require.Equal(t, [4]int64{1200, 30, 400, 0}, turnTokens(t, res), "agent-fleet reads it so")
	first := s.Requests()[0]
	require.Equal(t, "/v1/chat/completions", first.Path)
	require.True(t, first.Stream)
	require.Equal(t, "scripted", first.Model)
	require.Equal(t, "Bearer modeltest-key", first.Header.Get("authorization"))
	require.Contains(t, first.System, "You are opencode")
	require.Len(t, s.Requests(), 1, "--title: no title-generation call")

	// The next turn resumes the conversation; its model messages boss
	// through the worker's MCP server.
	c.turn.Session = res.Session
	res, stdout = turn("tell boss you started")
	require.False(t, res.Failed, res.Error)
	require.Equal(t, "told boss", res.Final)
	require.Contains(t, stdout, `"tool":"agent-fleet_intercom_send"`)
	msgs := boss.messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "oc-turn", msgs[0].From.ID)
	require.Equal(t, "oc-turn started on it", msgs[0].Text)
	resumed := s.Requests()[1]
	require.Contains(t, resumed.Prompt(), "say hello", "the conversation so far")
	require.Equal(t, "assistant", resumed.Messages[1].Role)
	require.Equal(t, "hello from opencode", resumed.Messages[1].Text)

	// A 429 with retry-after: OpenCode waits and asks again.
	res, _ = turn("go on")
	require.False(t, res.Failed, res.Error)
	require.Equal(t, "went on", res.Final)

	// A limit that does not pass: the turn fails with the provider's
	// message, and the JSON error event carries the status and header.
	res, stdout = turn("once more")
	require.True(t, res.Failed)
	require.Equal(t, "Number of requests has exceeded your rate limit", res.Error)
	require.Contains(t, stdout, `"statusCode":429`)
	require.Contains(t, stdout, `"retry-after":"1"`)
	require.NotNil(t, res.RateLimit, "a rate limit, not a failed worker")
	require.Equal(t, harness.RateLimited, res.RateLimit.Kind)
	require.Equal(t, 0, s.Remaining())
}

// OpenCode workers end to end: `agent-fleet spawn --kind opencode` with
// the real CLI; its model messages the manager, answers the manager's ask
// with the reply tool, and a read-only worker's writes are refused.
func TestRealOpencodeWorker(t *testing.T) {
	t.Parallel()
	opencode := nodeTool(t, "opencode")
	unitstest.Require(t)
	w := newHarnessWorld(t)
	w.real = map[string]string{"opencode": opencode}

	s := modeltest.Start(t,
		modeltest.Step{Name: "task", Expect: modeltest.All(
			modeltest.PromptContains(`You are "oc-w", a coding agent (opencode)`, "Your task from boss:\n\nWrite the parser"),
			modeltest.Offers("agent-fleet_intercom_send", "agent-fleet_intercom_reply"), modeltest.Lacks("agent-fleet_agent_fleet")),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call("agent-fleet_intercom_send",
				map[string]string{"to": "boss", "message": "oc-w: the parser is under way"})}}},
		modeltest.Step{Name: "after send", Expect: modeltest.ToolResultContains("Message sent to boss."),
			Reply: modeltest.Reply{Text: "Parser started; boss knows."}},
		modeltest.Step{Name: "ask", Expect: modeltest.PromptContains("From boss · ask", "Which file holds the parser?"),
			Respond: answerAsk("agent-fleet_intercom_reply", "parser.go, in package syntax")},
		modeltest.Step{Name: "after reply", Expect: modeltest.ToolResultContains("boss"),
			Reply: modeltest.Reply{Text: "Answered the ask."}},
	)
	cwd := t.TempDir()
	w.spawn("oc-w", "opencode", append(spawnEnv(opencodeEndpointEnv(t, s)), "--model", opencodeModel, "--cwd", cwd,
		"--task", "Write the parser")...)
	got := w.received("oc-w", "oc-w: the parser is under way")
	require.Equal(t, "oc-w", got.From.ID)
	require.Eventually(t, func() bool { return s.Remaining() == 2 && w.status("oc-w").Turns.Turns == 1 }, 2*time.Minute, 100*time.Millisecond)

	// The manager asks; a turn wakes and its model answers with the reply
	// tool, which is what the ask returns (not the turn's final answer).
	out := w.must("intercom", "ask", "oc-w", "Which file holds the parser?")
	require.Contains(t, out, "parser.go, in package syntax")
	require.NotContains(t, out, "Answered the ask.")
	<-s.Done()
	st := w.status("oc-w")
	require.True(t, strings.HasPrefix(st.Turns.Session, "ses_"), "the conversation OpenCode named: %+v", st.Turns)
	require.Contains(t, w.must("stop", "oc-w"), "nothing of it is left in its cgroup")
	for _, m := range w.boss.messages() {
		require.NotContains(t, m.Text, "failed", "no turn failed: %s", m.Text)
	}

	// Read-only: OpenCode offers no tool that writes or runs commands,
	// and refuses the model's calls of them.
	ro := modeltest.Start(t,
		modeltest.Step{Name: "write", Expect: modeltest.Lacks("write", "edit", "bash"),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{
				modeltest.Call("write", map[string]string{"filePath": filepath.Join(cwd, "notes.txt"), "content": "x"}),
				modeltest.Call("bash", map[string]string{"command": "touch ran.txt", "description": "touch"}),
			}}},
		modeltest.Step{Name: "refused", Expect: refused("unavailable tool 'write'", "unavailable tool 'bash'"),
			Reply: modeltest.Reply{Text: "Read-only: I could not write notes.txt."}},
	)
	w.spawn("oc-ro", "opencode", append(spawnEnv(opencodeEndpointEnv(t, ro)), "--model", opencodeModel, "--cwd", cwd,
		"--permission", "read-only", "--task", "Write notes.txt")...)
	w.received("oc-ro", "Read-only: I could not write notes.txt.")
	for _, f := range []string{"notes.txt", "ran.txt"} {
		require.NoFileExists(t, filepath.Join(cwd, f))
	}
	require.Contains(t, w.must("stop", "oc-ro"), "nothing of it is left in its cgroup")
}
