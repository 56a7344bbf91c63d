//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	mt "github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
)

// The real Codex CLI running whole turns against the scripted model
// endpoint (docs/harness-endpoints.md, "Codex"): its agent loop, its MCP
// client running agent-fleet's server as the worker, its sandbox and its
// retries are the real ones; only the model is scripted.

// codexModel is a model name Codex has no metadata for: it then offers
// every tool directly (MCP tools in a namespace) instead of deferring MCP
// tools behind tool_search, as it does for its own models.
const codexModel = "mt-scripted"

// The worker's intercom tools as Codex offers them: the namespace of the
// server agent-fleet, then the tool.
const (
	codexSend  = "mcp__agent_fleet__intercom_send"
	codexReply = "mcp__agent_fleet__intercom_reply"
)

// codexEndpoint are the -c overrides that point Codex at url: a custom
// provider speaking the Responses API, with no key and no login. extra are
// more fields of the provider ("stream_max_retries=1").
func codexEndpoint(url string, extra ...string) []string {
	fields := append([]string{`name="modeltest"`, `base_url="` + url + `/v1"`, `wire_api="responses"`}, extra...)
	return []string{"-c", `model_provider="modeltest"`, "-c", "model_providers.modeltest={" + strings.Join(fields, ",") + "}"}
}

// newCodexTurn is a worker's turn (harness_cli_test.go) for the real Codex
// pointed at url, as `spawn --model mt-scripted -- codex -c …` runs it.
func newCodexTurn(t *testing.T, codex, url, dir, id string, extra ...string) *cliTurn {
	t.Helper()
	c := newCLITurn(t, "codex", codex, dir, id)
	c.spec.Command = append([]string{codex}, codexEndpoint(url, extra...)...)
	c.spec.Model = codexModel
	c.build(t)
	return c
}

// codexUsage is the usage of codex exec's turn.completed event: the sums
// over the turn's model calls.
type codexUsage struct {
	Input      int `json:"input_tokens"`
	Cached     int `json:"cached_input_tokens"`
	CacheWrite int `json:"cache_write_input_tokens"`
	Output     int `json:"output_tokens"`
	Reasoning  int `json:"reasoning_output_tokens"`
}

func codexTurnUsage(t *testing.T, stdout string) codexUsage {
	t.Helper()
	for _, line := range strings.Split(stdout, "\n") {
		var v struct {
			Type  string     `json:"type"`
			Usage codexUsage `json:"usage"`
		}
		if json.Unmarshal([]byte(line), &v) == nil && v.Type == "turn.completed" {
			return v.Usage
		}
	}
	t.Fatalf("no turn.completed in %s", stdout)
	return codexUsage{}
}

// A task turn whose model calls intercom_send twice (to a session that does
// not exist, then to the manager) and answers; then the resumed turn, which
// sends the whole conversation again.
func TestRealCodexTurnWithScriptedModel(t *testing.T) {
	t.Parallel()
	codex := nodeTool(t, "codex")
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	boss := startListener(t, dir, "boss")
	startListener(t, dir, "cx-model")
	s := mt.Start(t,
		mt.Step{Name: "task", API: mt.Responses, Expect: mt.All(
			mt.PromptContains("Your task from boss:\n\nsay hello"),
			mt.Offers(codexSend, codexReply, "exec_command"),
			mt.SystemContains(`You are "cx-model", a coding agent (codex)`),
			func(r *mt.Request) error {
				if r.Model != codexModel || !r.Stream {
					return fmt.Errorf("model %q stream %v", r.Model, r.Stream)
				}
				return nil
			}),
			Reply: mt.Reply{Text: "Saying hello.", ToolCalls: []mt.ToolCall{mt.Call(codexSend, map[string]string{"to": "nobody-here", "message": "hello?"})}}},
		mt.Step{Name: "send failed", Expect: mt.ToolResultContains(`"code":"SESSION_NOT_FOUND"`),
			Reply: mt.Reply{ToolCalls: []mt.ToolCall{mt.Call(codexSend, map[string]string{"to": "boss", "message": "hello from codex"})}}},
		mt.Step{Name: "sent", Expect: mt.ToolResultContains(`"ok":true`),
			Reply: mt.Reply{Text: "Said hello to boss.", Usage: mt.Usage{Input: 1000, Output: 20, CacheRead: 600, CacheWrite: 50}}},
	)
	c := newCodexTurn(t, codex, s.URL, dir, "cx-model")
	stdout, stderr, exit := c.run(t, c.cmd.Argv, 3*time.Minute)
	require.Equal(t, 0, exit, "stdout %s\nstderr %s", stdout, stderr)
	res := harness.ParseTurnOutput("codex", []byte(stdout))
	require.False(t, res.Failed, "%+v", res)
	require.Equal(t, "Said hello to boss.", res.Final)
	require.Equal(t, [4]int64{12 + 12 + 1000, 5 + 5 + 20, 600, 50}, turnTokens(t, res), "agent-fleet reads the turn's usage: input, output, cache read, cache write")
	require.NotEmpty(t, res.Session)
	require.Eventually(t, func() bool {
		for _, m := range boss.messages() {
			if m.From.ID == "cx-model" && m.Text == "hello from codex" {
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "boss got %+v", boss.messages())
	require.Contains(t, stdout, `"type":"mcp_tool_call","server":"agent-fleet","tool":"intercom_send"`)
	// Usage: the sums of the three calls (12 in and 5 out are the
	// endpoint's defaults); input counts cached tokens.
	require.Equal(t, codexUsage{Input: 12 + 12 + 1650, Cached: 600, CacheWrite: 50, Output: 5 + 5 + 20}, codexTurnUsage(t, stdout))

	reqs := s.Requests()
	require.Len(t, reqs, 3)
	last := reqs[2]
	require.Equal(t, "/v1/responses", last.Path)
	var calls []mt.ToolCall
	for _, m := range last.Messages {
		calls = append(calls, m.ToolCalls...)
	}
	require.Len(t, calls, 2, "both calls are in the conversation")
	require.Equal(t, codexSend, calls[0].Name)
	require.JSONEq(t, `{"to":"boss","message":"hello from codex"}`, string(calls[1].Input))
	require.NotContains(t, last.Header.Get("authorization"), "Bearer", "no key is configured, none is sent")

	// The next turn resumes the thread: the earlier turn comes again.
	s.Add(mt.Step{Name: "resumed", Expect: mt.All(mt.PromptContains("say hello", "now the docs"), func(r *mt.Request) error {
		for _, m := range r.Messages {
			if m.Role == "assistant" && m.Text == "Said hello to boss." {
				return nil
			}
		}
		return fmt.Errorf("the earlier answer is not in the conversation")
	}), Reply: mt.Reply{Text: "Docs next."}})
	c.turn.Session, c.turn.Prompt = res.Session, "[agent-fleet] Turn 2 · your manager: boss\n\n📨 From boss:\nnow the docs"
	c.build(t)
	stdout, stderr, exit = c.run(t, c.cmd.Argv, 3*time.Minute)
	require.Equal(t, 0, exit, "stdout %s\nstderr %s", stdout, stderr)
	res2 := harness.ParseTurnOutput("codex", []byte(stdout))
	require.Equal(t, "Docs next.", res2.Final)
	require.Equal(t, res.Session, res2.Session)
}

// How Codex meets rate limits and server errors, call by call: a 429 is
// retried only when it carries a retry-after (waiting that long), five
// times, then the turn fails; insufficient_quota is final at once; a 5xx
// is retried with backoff.
func TestRealCodexRateLimitsAndServerErrors(t *testing.T) {
	t.Parallel()
	codex := nodeTool(t, "codex")
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "cx-limits")
	turn := func(t *testing.T, s *mt.Server, extra ...string) (harness.TurnResult, string) {
		c := newCodexTurn(t, codex, s.URL, dir, "cx-limits", extra...)
		stdout, stderr, _ := c.run(t, c.cmd.Argv, 3*time.Minute)
		res := harness.ParseTurnOutput("codex", []byte(stdout))
		require.NotEmpty(t, res.Session, "stdout %s\nstderr %s", stdout, stderr)
		return res, stdout
	}
	hello := mt.Step{Name: "answer", Reply: mt.Reply{Text: "hello"}}

	t.Run("429 with retry-after, then an answer", func(t *testing.T) {
		s := mt.Start(t, mt.Step{Name: "limited", Reply: mt.Reply{Error: mt.RateLimit(time.Second)}, Times: 2}, hello)
		res, stdout := turn(t, s)
		require.False(t, res.Failed, "%+v", res)
		require.Equal(t, "hello", res.Final)
		require.Len(t, s.Requests(), 3)
		require.Contains(t, stdout, `{"type":"error","message":"Reconnecting... 1/5 (exceeded retry limit, last status: 429 Too Many Requests)"}`)
		require.Contains(t, stdout, `"Reconnecting... 2/5 `)
	})
	t.Run("429 until Codex gives up", func(t *testing.T) {
		s := mt.Start(t, mt.Step{Name: "limited", Reply: mt.Reply{Error: mt.RateLimit(time.Second)}, Times: 6})
		res, stdout := turn(t, s)
		require.True(t, res.Failed)
		require.Equal(t, "exceeded retry limit, last status: 429 Too Many Requests", res.Error)
		require.Len(t, s.Requests(), 6, "the call and five retries")
		require.NotNil(t, res.RateLimit, "a rate limit, not a failed worker")
		require.Equal(t, harness.RateLimited, res.RateLimit.Kind)
		require.Contains(t, stdout, `"Reconnecting... 5/5 (exceeded retry limit, last status: 429 Too Many Requests)"`)
		require.Contains(t, stdout, `{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests"}}`)
	})
	t.Run("429 without retry-after", func(t *testing.T) {
		s := mt.Start(t, mt.Step{Name: "limited", Reply: mt.Reply{Error: mt.RateLimit(0)}})
		res, stdout := turn(t, s)
		require.True(t, res.Failed)
		require.Equal(t, "exceeded retry limit, last status: 429 Too Many Requests", res.Error)
		require.Len(t, s.Requests(), 1, "not retried")
		require.NotNil(t, res.RateLimit)
		require.NotContains(t, stdout, "Reconnecting")
	})
	t.Run("insufficient_quota", func(t *testing.T) {
		s := mt.Start(t, mt.Step{Name: "quota", Reply: mt.Reply{Error: &mt.Error{Status: 429, Type: "insufficient_quota",
			Message: "You exceeded your current quota", RetryAfter: time.Second}}})
		res, _ := turn(t, s)
		require.True(t, res.Failed)
		require.Equal(t, "Quota exceeded. Check your plan and billing details.", res.Error)
		require.Len(t, s.Requests(), 1, "not retried, even with a retry-after")
	})
	t.Run("500, then an answer", func(t *testing.T) {
		s := mt.Start(t, mt.Step{Name: "error", Reply: mt.Reply{Error: mt.ServerError()}}, hello)
		res, stdout := turn(t, s)
		require.False(t, res.Failed, "%+v", res)
		require.Equal(t, "hello", res.Final)
		require.Len(t, s.Requests(), 2)
		require.NotContains(t, stdout, "Reconnecting", "a request retry, below the stream's")
	})
	t.Run("500 until Codex gives up", func(t *testing.T) {
		// By default 5 requests per attempt and 6 attempts (30 calls,
		// about 25 s of backoff); one retry of each here.
		s := mt.Start(t, mt.Step{Name: "error", Reply: mt.Reply{Error: mt.ServerError()}, Times: 4})
		res, stdout := turn(t, s, "request_max_retries=1", "stream_max_retries=1")
		require.True(t, res.Failed)
		require.Equal(t, "We’re currently experiencing high demand, which may cause temporary errors.", res.Error)
		require.Len(t, s.Requests(), 4)
		require.Contains(t, stdout, `"Reconnecting... 1/1 (We’re currently experiencing high demand`)
	})
}

// A codex worker end to end: its task turn's model tells the manager with
// intercom_send; the manager's ask wakes a turn whose model answers with
// intercom_reply, and the ask returns that answer.
func TestRealCodexWorkerTalksToItsManager(t *testing.T) {
	t.Parallel()
	codex := nodeTool(t, "codex")
	w := newHarnessWorld(t)
	s := mt.Start(t,
		mt.Step{Name: "task", Expect: mt.All(mt.PromptContains("Tell boss the build is green"), mt.Offers(codexSend, codexReply),
			mt.SystemContains(`You are "cx-w", a coding agent (codex)`)),
			Reply: mt.Reply{ToolCalls: []mt.ToolCall{mt.Call(codexSend, map[string]string{"to": "boss", "message": "the build is green"})}}},
		mt.Step{Name: "told", Expect: mt.ToolResultContains(`"ok":true`), Reply: mt.Reply{Text: "Told boss."}},
		mt.Step{Name: "ask", Expect: mt.All(mt.PromptContains("what is 2+2?", "This is an ask"), mt.PromptContains("Tell boss the build is green")),
			Reply: mt.Reply{ToolCalls: []mt.ToolCall{mt.Call(codexReply, map[string]string{"to": "boss", "which": "latest", "message": "2+2 is 4"})}}},
		mt.Step{Name: "answered", Expect: mt.ToolResultContains(`"ok":true`), Reply: mt.Reply{Text: "Answered boss."}},
	)
	w.spawnCmd("cx-w", "codex", append([]string{codex}, codexEndpoint(s.URL)...),
		"--model", codexModel, "--task", "Tell boss the build is green")
	w.received("cx-w", "the build is green")

	out := w.must("intercom", "ask", "cx-w", "what is 2+2?", "--timeout", "2m")
	require.Equal(t, "Reply from cx-w:\n2+2 is 4\n", out, "the answer the model gave with intercom_reply")
	<-s.Done()
	require.Eventually(t, func() bool { st := w.status("cx-w"); return st.Turns.Turns == 2 && st.Turns.Current == nil },
		60*time.Second, 50*time.Millisecond)
	st := w.status("cx-w")
	require.NotEmpty(t, st.Turns.Session)
	require.True(t, st.Turns.Last.OK)
	for _, m := range w.boss.messages() {
		require.NotEqual(t, "Told boss.", m.Text, "a turn that told the manager is not reported again")
		require.NotEqual(t, "Answered boss.", m.Text, "the ask was answered by the tool")
	}
	require.Contains(t, w.must("stop", "cx-w"), "nothing of it is left in its cgroup")
}

// Permissions: a read-only codex worker's model runs a command that
// writes a file; Codex's sandbox refuses it (and an escalation request),
// and the file does not exist. The same call in a workspace-write worker
// writes it. This worker is pointed at the endpoint by a config.toml in its
// CODEX_HOME, the other by -c overrides.
func TestRealCodexWorkerSandbox(t *testing.T) {
	t.Parallel()
	codex := nodeTool(t, "codex")
	w := newHarnessWorld(t)
	write := mt.Call("exec_command", map[string]string{"cmd": "echo written > sandbox-probe.txt && echo wrote it"})

	ro := mt.Start(t,
		mt.Step{Name: "write", Expect: mt.All(mt.Offers("exec_command"), mt.SystemContains("`sandbox_mode` is `read-only`")),
			Reply: mt.Reply{Text: "Writing the file.", ToolCalls: []mt.ToolCall{write}}},
		mt.Step{Name: "escalate", Expect: mt.ToolResultContains("sandbox-probe.txt: Read-only file system"),
			Reply: mt.Reply{ToolCalls: []mt.ToolCall{mt.Call("exec_command", map[string]string{"cmd": "echo written > sandbox-probe.txt",
				"sandbox_permissions": "require_escalated", "justification": "I need to write the file"})}}},
		mt.Step{Name: "refused", Expect: mt.ToolResultContains("approval policy is Never"), Reply: mt.Reply{Text: "The sandbox refused the write."}},
	)
	roCwd, codexHome := t.TempDir(), t.TempDir()
	config := fmt.Sprintf("model = %q\nmodel_provider = \"modeltest\"\n\n[model_providers.modeltest]\nname = \"modeltest\"\nbase_url = \"%s/v1\"\nwire_api = \"responses\"\n", codexModel, ro.URL)
	require.NoError(t, os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600))
	w.spawnCmd("cx-ro", "codex", []string{codex}, "--permission", "read-only", "--cwd", roCwd,
		"--env", "CODEX_HOME="+codexHome, "--task", "Write sandbox-probe.txt")

	rw := mt.Start(t,
		mt.Step{Name: "write", Expect: mt.SystemContains("`sandbox_mode` is `workspace-write`"), Reply: mt.Reply{ToolCalls: []mt.ToolCall{write}}},
		mt.Step{Name: "written", Expect: mt.ToolResultContains("wrote it"), Reply: mt.Reply{Text: "Wrote the file."}},
	)
	rwCwd := t.TempDir()
	w.spawnCmd("cx-rw", "codex", append([]string{codex}, codexEndpoint(rw.URL)...), "--model", codexModel,
		"--permission", "workspace-write", "--cwd", rwCwd, "--task", "Write sandbox-probe.txt")

	w.received("cx-ro", "The sandbox refused the write.")
	require.NoFileExists(t, filepath.Join(roCwd, "sandbox-probe.txt"))
	refused := ro.Requests()[1].LastToolResult()
	require.Contains(t, refused.Content, "Process exited with code 1")

	w.received("cx-rw", "Wrote the file.")
	data, err := os.ReadFile(filepath.Join(rwCwd, "sandbox-probe.txt"))
	require.NoError(t, err)
	require.Equal(t, "written\n", string(data))
	for _, id := range []string{"cx-ro", "cx-rw"} {
		require.Contains(t, w.must("stop", id), "nothing of it is left in its cgroup")
	}
}
