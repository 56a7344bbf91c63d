package modeltest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The real Claude Code (installed from npm by .ci/run) against the
// endpoint: `claude -p --output-format json` with HOME a fresh temp dir,
// ANTHROPIC_BASE_URL the server and any ANTHROPIC_API_KEY.

// claudeSlots bounds the Claude Code processes these tests run at once:
// each start costs a second or more of CPU on a 2-core machine.
var claudeSlots = make(chan struct{}, 2)

// claudeCode is the claude executable: from AGENT_FLEET_NODE_TOOLS, else
// PATH. Missing, the test skips, or fails under AGENT_FLEET_CI=1.
func claudeCode(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("AGENT_FLEET_NODE_TOOLS"); dir != "" {
		p := filepath.Join(dir, "node_modules", ".bin", "claude")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("claude"); err == nil {
		return p
	}
	if os.Getenv("AGENT_FLEET_CI") == "1" {
		t.Fatalf("claude is not installed; .ci/run installs it")
	}
	t.Skip("claude not installed (set AGENT_FLEET_NODE_TOOLS or run .ci/run)")
	return ""
}

// claudeResult is the JSON object `claude -p --output-format json` prints.
type claudeResult struct {
	Type           string  `json:"type"`
	Subtype        string  `json:"subtype"`
	IsError        bool    `json:"is_error"`
	Result         string  `json:"result"`
	SessionID      string  `json:"session_id"`
	StopReason     string  `json:"stop_reason"`
	TerminalReason string  `json:"terminal_reason"`
	NumTurns       int     `json:"num_turns"`
	APIErrorStatus *int    `json:"api_error_status"`
	APIErrorType   string  `json:"api_error_type"`
	TotalCostUSD   float64 `json:"total_cost_usd"`
	Usage          struct {
		InputTokens              int `json:"input_tokens"`
		OutputTokens             int `json:"output_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	ModelUsage map[string]struct {
		InputTokens  int     `json:"inputTokens"`
		OutputTokens int     `json:"outputTokens"`
		CostUSD      float64 `json:"costUSD"`
	} `json:"modelUsage"`
}

// runClaude runs one `claude -p --output-format json` turn against s
// with prompt on stdin, in cwd (a temp dir if ""), and returns its result
// and exit status.
func runClaude(t *testing.T, s *Server, cwd, prompt string, env []string, args ...string) (claudeResult, int) {
	t.Helper()
	exe := claudeCode(t)
	claudeSlots <- struct{}{}
	defer func() { <-claudeSlots }()
	if cwd == "" {
		cwd = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, append([]string{"-p", "--output-format", "json"}, args...)...)
	cmd.Dir = cwd
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LANG=C.UTF-8", "DISABLE_AUTOUPDATER=1",
		"ANTHROPIC_BASE_URL=" + s.URL, "ANTHROPIC_API_KEY=sk-ant-modeltest"}, env...)
	cmd.Stdin = strings.NewReader(prompt)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "claude ran past the hang guard; stderr: %s", stderr.String())
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("claude: %v", err)
	}
	var res claudeResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "stdout %s\nstderr %s", stdout.String(), stderr.String())
	require.Equal(t, "result", res.Type)
	return res, cmd.ProcessState.ExitCode()
}

func TestRealClaudeCodeTextTurn(t *testing.T) {
	t.Parallel()
	s := Start(t, Step{Name: "answer", API: Anthropic,
		Expect: All(PromptContains("say pong"), Offers("Bash", "Read", "ToolSearch")),
		Reply:  Reply{Text: "pong", Usage: Usage{Input: 1200, Output: 8, CacheRead: 300, CacheWrite: 40}}})
	res, exit := runClaude(t, s, "", "say pong", nil, "--model", "claude-sonnet-4-5")
	require.Equal(t, 0, exit)
	require.False(t, res.IsError)
	require.Equal(t, "success", res.Subtype)
	require.Equal(t, "pong", res.Result)
	require.Equal(t, "end_turn", res.StopReason)
	require.Equal(t, "completed", res.TerminalReason)
	require.NotEmpty(t, res.SessionID)
	require.Nil(t, res.APIErrorStatus)
	require.Equal(t, 1200, res.Usage.InputTokens, "usage is the scripted figures")
	require.Equal(t, 8, res.Usage.OutputTokens)
	require.Equal(t, 300, res.Usage.CacheReadInputTokens)
	require.Equal(t, 40, res.Usage.CacheCreationInputTokens)
	require.Contains(t, res.ModelUsage, "claude-sonnet-4-5")
	require.Positive(t, res.TotalCostUSD, "Claude Code prices known models itself")
	reqs := s.Requests()
	require.Len(t, reqs, 1, "one model call: no title, quota or token-count call in -p mode")
	require.True(t, reqs[0].Stream)
	require.Equal(t, "claude-sonnet-4-5", reqs[0].Model)
	require.True(t, strings.HasPrefix(reqs[0].Header.Get("User-Agent"), "claude-cli/"), reqs[0].Header.Get("User-Agent"))
	require.Equal(t, "sk-ant-modeltest", reqs[0].Header.Get("X-Api-Key"))
}

// The model calls tools, one of which fails; Claude Code runs them and
// sends the results back, and the model answers.
func TestRealClaudeCodeToolTurn(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	notes := filepath.Join(cwd, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("the secret is 7\n"), 0o600))
	missing := filepath.Join(cwd, "missing.txt")
	var answered *Request
	s := Start(t,
		Step{Name: "read", Expect: PromptContains("what is the secret"),
			Reply: Reply{Text: "Let me read the notes.", ToolCalls: []ToolCall{
				Call("Read", map[string]any{"file_path": notes}),
				Call("Read", map[string]any{"file_path": missing}),
			}, Usage: Usage{Input: 500, Output: 30}}},
		Step{Name: "answer", Expect: func(r *Request) error { answered = r; return nil },
			Reply: Reply{Text: "The secret is 7.", Usage: Usage{Input: 600, Output: 9}}},
	)
	res, exit := runClaude(t, s, cwd, "what is the secret in notes.txt?", nil)
	require.Equal(t, 0, exit, "%+v", res)
	require.Equal(t, "The secret is 7.", res.Result)
	require.Equal(t, 1100, res.Usage.InputTokens, "summed over the turn's calls")
	require.Equal(t, 39, res.Usage.OutputTokens)

	last := answered.Messages[len(answered.Messages)-1]
	require.Len(t, last.ToolResults, 2, "both results in one user message (in the order the calls ended)")
	results := map[string]ToolResult{}
	for _, r := range last.ToolResults {
		results[r.CallID] = r
	}
	require.Contains(t, results["call_mt1_0"].Content, "the secret is 7")
	require.False(t, results["call_mt1_0"].IsError)
	require.True(t, results["call_mt1_1"].IsError, "the failed read: %+v", results["call_mt1_1"])
	require.Contains(t, results["call_mt1_1"].Content, "does not exist")
	prev := answered.Messages[len(answered.Messages)-2]
	require.Equal(t, "assistant", prev.Role)
	require.Equal(t, "Let me read the notes.", prev.Text, "the streamed text came back whole")
	require.Len(t, prev.ToolCalls, 2)
	require.JSONEq(t, `{"file_path":"`+notes+`"}`, string(prev.ToolCalls[0].Input), "the streamed input came back whole")
}

// A deferred (MCP-like) tool is loaded with ToolSearch as a real model
// does; Claude Code then offers it in full.
func TestRealClaudeCodeToolSearch(t *testing.T) {
	t.Parallel()
	var loaded *Request
	s := Start(t,
		Step{Name: "search", Expect: Offers("WebFetch"), Reply: Reply{ToolCalls: []ToolCall{ToolSearch("WebFetch")}}},
		Step{Name: "loaded", Expect: All(ToolResultContains("tool_reference:WebFetch"), func(r *Request) error { loaded = r; return nil }),
			Reply: Reply{Text: "loaded"}},
	)
	res, exit := runClaude(t, s, "", "load WebFetch", nil)
	require.Equal(t, 0, exit)
	require.Equal(t, "loaded", res.Result)
	var body struct {
		Tools []struct {
			Name  string `json:"name"`
			Defer bool   `json:"defer_loading"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(loaded.Body, &body))
	var names []string
	for _, tool := range body.Tools {
		names = append(names, tool.Name)
	}
	require.Contains(t, names, "WebFetch", "offered in full once loaded")
}

// Claude Code's own retries: retry-after is a floor under its exponential
// backoff (0.5 s doubling, at most 32 s, CLAUDE_CODE_MAX_RETRIES = 10 by
// default: about three minutes); a retry-after over about a minute makes
// it give up at once. Giving up, it exits 1 with is_error, the status in
// api_error_status and the API's message in result.
func TestRealClaudeCodeRateLimit(t *testing.T) {
	t.Parallel()
	t.Run("retried", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var at []time.Time
		s := Start(t, Step{Name: "limited", Reply: Reply{Error: RateLimit(time.Second)}}, Step{Name: "after", Reply: Reply{Text: "made it"}})
		s.Aside(func(*Request) *Reply {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Now())
			return nil
		})
		res, exit := runClaude(t, s, "", "hello", nil)
		require.Equal(t, 0, exit)
		require.Equal(t, "made it", res.Result)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, at, 2)
		require.GreaterOrEqual(t, at[1].Sub(at[0]), time.Second, "retry-after was waited")
	})
	t.Run("gives up", func(t *testing.T) {
		t.Parallel()
		s := Start(t, Step{Name: "limited", Reply: Reply{Error: RateLimit(time.Second)}, Times: 3})
		res, exit := runClaude(t, s, "", "hello", []string{"CLAUDE_CODE_MAX_RETRIES=2"})
		require.Equal(t, 1, exit)
		requireAPIError(t, res, 429, "rate_limit_error", "API Error: Request rejected (429) · Number of requests has exceeded your rate limit")
	})
	t.Run("long retry-after", func(t *testing.T) {
		t.Parallel()
		s := Start(t, Step{Name: "limited", Reply: Reply{Error: RateLimit(time.Hour)}})
		res, exit := runClaude(t, s, "", "hello", nil)
		require.Equal(t, 1, exit)
		requireAPIError(t, res, 429, "rate_limit_error", "API Error: Request rejected (429) · Number of requests has exceeded your rate limit")
	})
}

func requireAPIError(t *testing.T, res claudeResult, status int, kind, result string) {
	t.Helper()
	require.True(t, res.IsError)
	require.Equal(t, "success", res.Subtype, "Claude Code reports an API failure under subtype success")
	require.Equal(t, "api_error", res.TerminalReason)
	require.NotNil(t, res.APIErrorStatus)
	require.Equal(t, status, *res.APIErrorStatus)
	require.Equal(t, kind, res.APIErrorType)
	require.Equal(t, result, res.Result)
	require.Zero(t, res.Usage.InputTokens)
	require.NotEmpty(t, res.SessionID)
}

// 529 overloaded: three attempts, then it gives up; a 500 is retried like
// a 429.
func TestRealClaudeCodeServerErrors(t *testing.T) {
	t.Parallel()
	t.Run("overloaded", func(t *testing.T) {
		t.Parallel()
		s := Start(t, Step{Name: "overloaded", Reply: Reply{Error: Overloaded()}, Times: 3})
		res, exit := runClaude(t, s, "", "hello", nil)
		require.Equal(t, 1, exit)
		require.True(t, strings.HasPrefix(res.Result, "API Error: Repeated 529 Overloaded errors."), res.Result)
		requireAPIError(t, res, 529, "overloaded_error", res.Result)
	})
	t.Run("500", func(t *testing.T) {
		t.Parallel()
		s := Start(t, Step{Name: "broken", Reply: Reply{Error: ServerError()}, Times: 2})
		res, exit := runClaude(t, s, "", "hello", []string{"CLAUDE_CODE_MAX_RETRIES=1"})
		require.Equal(t, 1, exit)
		require.True(t, strings.HasPrefix(res.Result, "API Error: 500 Internal server error."), res.Result)
		requireAPIError(t, res, 500, "api_error", res.Result)
	})
}
