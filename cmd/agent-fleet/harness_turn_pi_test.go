//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// The real Pi (with pi-mcp-adapter, as a pi worker runs it) against the
// scripted model endpoint: a custom provider of Pi's openai-completions
// API in models.json of the agent directory, which for a worker is
// agent-fleet's own (PI_CODING_AGENT_DIR). docs/harness-endpoints.md "Pi"
// has the recipe.

// piModel is the model a turn names with --model (provider/model).
const piModel = "modeltest/scripted"

// piNodeDir is a directory holding a Node.js new enough for Pi 1.6.0
// (22.19 or later): the one .ci/run installs beside the CLIs, else the
// PATH's. Without one the test skips, or fails under AGENT_FLEET_CI.
func piNodeDir(t *testing.T) string {
	t.Helper()
	var cands []string
	if dir := os.Getenv("AGENT_FLEET_NODE_TOOLS"); dir != "" {
		cands = append(cands, filepath.Join(dir, "node_modules", ".bin", "node"))
	}
	if p, err := exec.LookPath("node"); err == nil {
		cands = append(cands, p)
	}
	var seen []string
	for _, c := range cands {
		real, err := filepath.EvalSymlinks(c)
		if err != nil {
			continue
		}
		out, err := exec.Command(real, "-p", "process.versions.node").Output()
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(out))
		seen = append(seen, real+" "+v)
		if nodeAtLeast(v, 22, 19) {
			return filepath.Dir(real) // node's own bin directory: nothing else on PATH changes
		}
	}
	if os.Getenv("AGENT_FLEET_CI") == "1" {
		t.Fatalf("Pi needs Node.js 22.19 or later (.ci/run installs it); found %v", seen)
	}
	t.Skipf("Pi needs Node.js 22.19 or later; found %v", seen)
	return ""
}

func nodeAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (ma > major || ma == major && mi >= minor)
}

// piEndpoint writes the provider for s into the agent directory's
// models.json and returns the environment that keeps Pi off the network
// (no catalog refresh, version check or telemetry).
func piEndpoint(t *testing.T, agentDir string, s *modeltest.Server) []string {
	t.Helper()
	models := map[string]any{"providers": map[string]any{"modeltest": map[string]any{
		"baseUrl": s.URL + "/v1", "api": "openai-completions", "apiKey": "modeltest-key",
		"models": []any{map[string]any{"id": "scripted", "name": "Scripted"}},
	}}}
	data, err := json.Marshal(models)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(agentDir, "models.json"), data, 0o600))
	return []string{"PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1", "PI_TELEMETRY=0"}
}

// A pi worker's turns through the real Pi and pi-mcp-adapter: a task
// whose model messages the manager through agent-fleet's MCP server, a
// resumed conversation past a 429, and a limit that does not pass.
func TestRealPiTurnsAgainstScriptedModel(t *testing.T) {
	t.Parallel()
	pi := nodeTool(t, "pi")
	adapter := nodeTool(t, "pi-mcp-adapter")
	nodeDir := piNodeDir(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "pi-turn")
	boss := startListener(t, dir, "boss")
	s := modeltest.Start(t,
		modeltest.Step{Name: "task", API: modeltest.ChatCompletions, Expect: modeltest.All(
			modeltest.PromptContains("Your task from boss:\n\nsay hello"),
			modeltest.Offers("intercom_send", "intercom_reply", "read", "bash", "edit", "write"), modeltest.Lacks("agent_fleet"),
			modeltest.SystemContains(`You are "pi-turn", a coding agent (pi)`)),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call("intercom_send",
				map[string]string{"to": "boss", "message": "pi-turn started on it"})}}},
		modeltest.Step{Name: "after send", Expect: modeltest.ToolResultContains("Message sent to boss."),
			Reply: modeltest.Reply{Text: "pi told boss", Usage: modeltest.Usage{Input: 1000, Output: 20, CacheRead: 300}}},
		modeltest.Step{Name: "limited once", Reply: modeltest.Reply{Error: modeltest.RateLimit(time.Second)}},
		modeltest.Step{Name: "after the limit", Expect: modeltest.PromptContains("go on"), Reply: modeltest.Reply{Text: "went on"}},
		// Pi retries three times (2, 4, 8 s, whatever retry-after says).
		modeltest.Step{Name: "limited", Reply: modeltest.Reply{Error: modeltest.RateLimit(time.Second)}, Times: 4},
	)
	env := append(piEndpoint(t, dir, s), "PATH="+nodeDir+string(os.PathListSeparator)+os.Getenv("PATH"), "PI_CODING_AGENT_DIR="+dir)
	c := newCLITurn(t, "pi", pi, dir, "pi-turn")
	c.spec.Model = piModel
	real, err := filepath.EvalSymlinks(adapter)
	require.NoError(t, err)
	c.spec.PiExtension = filepath.Dir(real)
	turn := func(prompt string) (harness.TurnResult, string) {
		t.Helper()
		if prompt != "" {
			c.turn.Prompt = prompt
		}
		c.build(t)
		c.cmd.Env = append(c.cmd.Env, env...)
		stdout, stderr, exit := c.run(t, c.cmd.Argv, 5*time.Minute)
		require.Zero(t, exit, "Pi exits 0 even when the model call failed: stdout %s, stderr %s", stdout, stderr)
		return harness.ParseTurnOutput("pi", []byte(stdout)), stdout
	}

	res, stdout := turn("")
	require.False(t, res.Failed, res.Error)
	require.Equal(t, "pi told boss", res.Final)
	require.Equal(t, c.turn.NewSession, res.Session, "the conversation the shim named")
	require.Contains(t, stdout, `"usage":{"input":1000,"output":20,"cacheRead":300,"cacheWrite":0,"reasoning":0,"totalTokens":1320`,
		"Pi reports the usage the model gave, cached tokens apart")
	require.Equal(t, [4]int64{12 + 1000, 5 + 20, 300, 0}, turnTokens(t, res), "agent-fleet adds up the turn's two model calls")
	msgs := boss.messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "pi-turn", msgs[0].From.ID)
	require.Equal(t, "pi-turn started on it", msgs[0].Text)
	first := s.Requests()[0]
	require.Equal(t, "/v1/chat/completions", first.Path)
	require.True(t, first.Stream)
	require.Equal(t, "scripted", first.Model)
	require.Equal(t, "Bearer modeltest-key", first.Header.Get("authorization"))

	// Resumed, past one 429.
	c.turn.Session, c.turn.NewSession = res.Session, ""
	res, stdout = turn("go on")
	require.False(t, res.Failed, res.Error)
	require.Equal(t, "went on", res.Final)
	require.Contains(t, stdout, `"type":"auto_retry_start","attempt":1`)
	resumed := s.Requests()[len(s.Requests())-1]
	require.Contains(t, resumed.Prompt(), "say hello", "the conversation so far")

	// A limit that does not pass fails the turn with the provider's error.
	res, stdout = turn("once more")
	require.True(t, res.Failed)
	require.NotNil(t, res.RateLimit, "a rate limit, not a failed worker")
	require.Equal(t, harness.RateLimited, res.RateLimit.Kind)
	require.Contains(t, res.Error, "429")
	require.Contains(t, res.Error, "rate_limit_exceeded")
	require.Contains(t, stdout, `"type":"auto_retry_end","success":false`)
	require.Equal(t, 0, s.Remaining())
}

// Pi workers end to end: `agent-fleet spawn --kind pi` with the real Pi,
// which fleet finds pi-mcp-adapter beside; its model messages the
// manager, answers the manager's ask with the reply tool, and a read-only
// worker's writes are refused.
func TestRealPiWorker(t *testing.T) {
	t.Parallel()
	pi := nodeTool(t, "pi")
	nodeTool(t, "pi-mcp-adapter")
	nodeDir := piNodeDir(t)
	unitstest.Require(t)
	w := newHarnessWorld(t)
	w.real = map[string]string{"pi": pi}
	w.path = nodeDir + string(os.PathListSeparator) + os.Getenv("PATH")

	s := modeltest.Start(t,
		modeltest.Step{Name: "task", Expect: modeltest.All(modeltest.PromptContains("Your task from boss:\n\nWrite the parser"),
			modeltest.Offers("intercom_send", "intercom_reply"), modeltest.Lacks("agent_fleet")),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{modeltest.Call("intercom_send",
				map[string]string{"to": "boss", "message": "pi-w: the parser is under way"})}}},
		modeltest.Step{Name: "after send", Expect: modeltest.ToolResultContains("Message sent to boss."),
			Reply: modeltest.Reply{Text: "Parser started; boss knows."}},
		modeltest.Step{Name: "ask", Expect: modeltest.PromptContains("From boss · ask", "Which file holds the parser?"),
			Respond: answerAsk("intercom_reply", "parser.go, in package syntax")},
		modeltest.Step{Name: "after reply", Expect: modeltest.ToolResultContains("boss"),
			Reply: modeltest.Reply{Text: "Answered the ask."}},
	)
	cwd := t.TempDir()
	env := spawnEnv(piEndpoint(t, w.dir, s))
	w.spawn("pi-w", "pi", append(env, "--model", piModel, "--cwd", cwd, "--task", "Write the parser")...)
	got := w.received("pi-w", "pi-w: the parser is under way")
	require.Equal(t, "pi-w", got.From.ID)
	require.Eventually(t, func() bool { return s.Remaining() == 2 && w.status("pi-w").Turns.Turns == 1 }, 2*time.Minute, 100*time.Millisecond)

	out := w.must("intercom", "ask", "pi-w", "Which file holds the parser?")
	require.Contains(t, out, "parser.go, in package syntax")
	require.NotContains(t, out, "Answered the ask.")
	<-s.Done()
	require.True(t, strings.HasPrefix(w.status("pi-w").Turns.Session, "agent-fleet-pi-w-"))
	require.Contains(t, w.must("stop", "pi-w"), "nothing of it is left in its cgroup")
	for _, m := range w.boss.messages() {
		require.NotContains(t, m.Text, "failed", "no turn failed: %s", m.Text)
	}

	// Read-only: Pi is given no tool that writes or runs commands, and
	// refuses the model's calls of them.
	ro := modeltest.Start(t,
		modeltest.Step{Name: "write", Expect: modeltest.Lacks("write", "edit", "bash"),
			Reply: modeltest.Reply{ToolCalls: []modeltest.ToolCall{
				modeltest.Call("write", map[string]string{"path": filepath.Join(cwd, "notes.txt"), "content": "x"}),
				modeltest.Call("bash", map[string]string{"command": "touch ran.txt"}),
			}}},
		modeltest.Step{Name: "refused", Expect: refused("Tool write not found", "Tool bash not found"),
			Reply: modeltest.Reply{Text: "Read-only: I could not write notes.txt."}},
	)
	w.spawn("pi-ro", "pi", append(spawnEnv(piEndpoint(t, w.dir, ro)), "--model", piModel, "--cwd", cwd,
		"--permission", "read-only", "--task", "Write notes.txt")...)
	w.received("pi-ro", "Read-only: I could not write notes.txt.")
	for _, f := range []string{"notes.txt", "ran.txt"} {
		require.NoFileExists(t, filepath.Join(cwd, f))
	}
	require.Contains(t, w.must("stop", "pi-ro"), "nothing of it is left in its cgroup")
}
