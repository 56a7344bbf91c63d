package harness

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

func testTurn(t *testing.T) *Turn {
	return &Turn{N: 1, Dir: t.TempDir(), Prompt: "the prompt", Mandate: "standing\ninstructions \"quoted\" é",
		MCP: MCPServer{Command: "/usr/bin/agent-fleet", Args: []string{"mcp", "--harness", "x", "--worker"},
			Env: map[string]string{"AGENT_INTERCOM_SESSION_ID": "w1", "AGENT_INTERCOM_WORKER_ID": "w1", "PI_CODING_AGENT_DIR": "/a dir"}}}
}

// after returns the argument after flag, failing when it is absent.
func after(t *testing.T, argv []string, flag string) string {
	t.Helper()
	i := slices.Index(argv, flag)
	require.True(t, i >= 0 && i+1 < len(argv), "%s in %q", flag, argv)
	return argv[i+1]
}

func TestClaudeTurnCommand(t *testing.T) {
	spec := &Spec{Kind: "claude", Command: []string{"/bin/claude", "--verbose"}, Cwd: "/w", Model: "sonnet", Effort: "high", Permission: PermissionWorkspaceWrite}
	tt := testTurn(t)
	tt.NewSession = "11111111-2222-4333-8444-555555555555"
	c, err := BuildTurn(spec, tt)
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/claude", "--verbose", "-p", "--output-format", "json"}, c.Argv[:5], "extra args come first")
	require.Equal(t, tt.NewSession, after(t, c.Argv, "--session-id"))
	require.NotContains(t, c.Argv, "--resume")
	require.Equal(t, "mcp__agent-fleet", after(t, c.Argv, "--allowedTools"))
	// workspace-write prompts for what is not an edit here: the manager answers.
	require.Equal(t, "host", after(t, c.Argv, "--permission-prompts"))
	require.Equal(t, "mcp__agent-fleet__permission_prompt", after(t, c.Argv, "--permission-prompt-tool"))
	require.Equal(t, "acceptEdits", after(t, c.Argv, "--permission-mode"))
	require.Equal(t, "sonnet", after(t, c.Argv, "--model"))
	require.Equal(t, "high", after(t, c.Argv, "--effort"))
	require.Equal(t, tt.Mandate, after(t, c.Argv, "--append-system-prompt"))
	require.Equal(t, "the prompt", c.Stdin, "the prompt goes on stdin, never in argv")
	require.NotContains(t, c.Argv, "the prompt")

	// The MCP configuration file: one stdio server, the worker's identity.
	cfgPath := after(t, c.Argv, "--mcp-config")
	require.Equal(t, filepath.Join(tt.Dir, "claude-mcp.json"), cfgPath)
	var cfg struct {
		MCPServers map[string]struct {
			Type, Command string
			Args          []string
			Env           map[string]string
			Timeout       int64
		} `json:"mcpServers"`
	}
	require.NoError(t, json.Unmarshal(c.Files[cfgPath], &cfg))
	srv := cfg.MCPServers[MCPServerName]
	require.Equal(t, "stdio", srv.Type)
	require.Equal(t, "/usr/bin/agent-fleet", srv.Command)
	require.Equal(t, tt.MCP.Args, srv.Args)
	require.Equal(t, "w1", srv.Env["AGENT_INTERCOM_SESSION_ID"])
	require.Equal(t, (DefaultPermissionWait + time.Minute).Milliseconds(), srv.Timeout, "a tool call may last as long as the permission wait")

	// Resumed; each permission mode; default adds none.
	tt.Session, tt.NewSession = "abc", ""
	for perm, want := range map[string][]string{
		PermissionDefault:  nil,
		PermissionReadOnly: {"--permission-mode", "dontAsk", "--disallowedTools", "Bash,Edit,Write,NotebookEdit"},
		PermissionFull:     {"--permission-mode", "bypassPermissions"},
		"plan":             {"--permission-mode", "plan"},
	} {
		spec.Permission = perm
		c, err = BuildTurn(spec, tt)
		require.NoError(t, err)
		require.Equal(t, "abc", after(t, c.Argv, "--resume"))
		require.NotContains(t, c.Argv, "--session-id")
		// Modes that never prompt keep nobody to ask.
		prompts := map[bool]string{true: "host", false: "none"}[perm != PermissionReadOnly && perm != PermissionFull]
		require.Equal(t, prompts, after(t, c.Argv, "--permission-prompts"), perm)
		require.Equal(t, prompts == "host", slices.Contains(c.Argv, "--permission-prompt-tool"), perm)
		i := slices.Index(c.Argv, "--permission-mode")
		if want == nil {
			require.Equal(t, -1, i, "the default adds no permission flag")
			continue
		}
		require.Equal(t, want, c.Argv[i:i+len(want)], perm)
	}
}

func TestCodexTurnCommand(t *testing.T) {
	spec := &Spec{Kind: "codex", Command: []string{"/bin/codex"}, Cwd: "/w", Model: "gpt-5", Effort: "medium", Permission: PermissionReadOnly}
	tt := testTurn(t)
	c, err := BuildTurn(spec, tt)
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/codex", "exec", "--json", "--skip-git-repo-check", "-m", "gpt-5"}, c.Argv[:6])
	require.Equal(t, "-", c.Argv[len(c.Argv)-1], "the prompt is read from stdin")
	require.Equal(t, "the prompt", c.Stdin)
	require.Empty(t, c.Files, "codex gets its MCP server by -c overrides, not a file")

	// Every -c value is TOML: parse them as Codex would.
	var doc strings.Builder
	for i, a := range c.Argv {
		if a == "-c" {
			k, v, ok := strings.Cut(c.Argv[i+1], "=")
			require.True(t, ok)
			doc.WriteString(k + " = " + v + "\n")
		}
	}
	var cfg struct {
		DeveloperInstructions string `toml:"developer_instructions"`
		ReasoningEffort       string `toml:"model_reasoning_effort"`
		SandboxMode           string `toml:"sandbox_mode"`
		MCPServers            map[string]struct {
			Command         string            `toml:"command"`
			Args            []string          `toml:"args"`
			Env             map[string]string `toml:"env"`
			ToolTimeout     int               `toml:"tool_timeout_sec"`
			Required        bool              `toml:"required"`
			DefaultApproval string            `toml:"default_tools_approval_mode"`
		} `toml:"mcp_servers"`
	}
	require.NoError(t, toml.Unmarshal([]byte(doc.String()), &cfg), doc.String())
	require.Equal(t, tt.Mandate, cfg.DeveloperInstructions)
	require.Equal(t, "medium", cfg.ReasoningEffort)
	require.Equal(t, "read-only", cfg.SandboxMode)
	srv := cfg.MCPServers[MCPServerName]
	require.Equal(t, "/usr/bin/agent-fleet", srv.Command)
	require.Equal(t, tt.MCP.Args, srv.Args)
	require.Equal(t, tt.MCP.Env, srv.Env, "codex passes a server only the environment its entry names")
	require.GreaterOrEqual(t, srv.ToolTimeout, 125, "intercom_ask waits up to 120 s")
	require.True(t, srv.Required)
	require.Equal(t, "approve", srv.DefaultApproval)

	tt.Session = "0199-thread"
	c, err = BuildTurn(spec, tt)
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/codex", "exec", "resume", "--json", "--skip-git-repo-check"}, c.Argv[:5])
	require.Equal(t, []string{"0199-thread", "-"}, c.Argv[len(c.Argv)-2:])

	spec.Permission, spec.Effort = "", ""
	c, err = BuildTurn(spec, tt)
	require.NoError(t, err)
	for _, a := range c.Argv {
		require.False(t, strings.HasPrefix(a, "sandbox_mode="), "the default leaves the sandbox to the user's configuration")
		require.False(t, strings.HasPrefix(a, "model_reasoning_effort="))
	}
}

func TestOpencodeTurnCommand(t *testing.T) {
	spec := &Spec{Kind: "opencode", Command: []string{"/bin/opencode"}, Cwd: "/w", Model: "anthropic/claude", Effort: "high", Permission: PermissionFull}
	tt := testTurn(t)
	tt.WorkerID = "w1"
	c, err := BuildTurn(spec, tt)
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/opencode", "run", "--format", "json"}, c.Argv[:4])
	require.Equal(t, "anthropic/claude", after(t, c.Argv, "-m"))
	require.Equal(t, "high", after(t, c.Argv, "--variant"))
	require.Contains(t, c.Argv, "--auto", "full permission approves what would ask")
	require.NotContains(t, c.Argv, "--session")
	require.Equal(t, "agent-fleet worker w1", after(t, c.Argv, "--title"))
	require.Len(t, c.Env, 1)
	content, ok := strings.CutPrefix(c.Env[0], "OPENCODE_CONFIG_CONTENT=")
	require.True(t, ok)
	var cfg struct {
		MCP map[string]struct {
			Type        string            `json:"type"`
			Command     []string          `json:"command"`
			Environment map[string]string `json:"environment"`
			Enabled     bool              `json:"enabled"`
		} `json:"mcp"`
		Permission map[string]string `json:"permission"`
	}
	require.NoError(t, json.Unmarshal([]byte(content), &cfg))
	srv := cfg.MCP[MCPServerName]
	require.Equal(t, "local", srv.Type)
	require.Equal(t, append([]string{"/usr/bin/agent-fleet"}, tt.MCP.Args...), srv.Command)
	require.Equal(t, "w1", srv.Environment["AGENT_INTERCOM_SESSION_ID"])
	require.True(t, srv.Enabled)
	require.Equal(t, "allow", cfg.Permission["bash"])

	spec.Permission = PermissionReadOnly
	tt.Session = "ses_1"
	c, err = BuildTurn(spec, tt)
	require.NoError(t, err)
	require.Equal(t, "ses_1", after(t, c.Argv, "--session"))
	require.NotContains(t, c.Argv, "--auto")
	cfg.Permission = nil
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(c.Env[0], "OPENCODE_CONFIG_CONTENT=")), &cfg))
	require.Equal(t, map[string]string{"edit": "deny", "bash": "deny", "external_directory": "deny"}, cfg.Permission)
}

func TestPiTurnCommand(t *testing.T) {
	spec := &Spec{Kind: "pi", Command: []string{"/bin/pi"}, Cwd: "/w", Model: "sonnet", Effort: "low", Permission: PermissionReadOnly,
		PiExtension: "/lib/node_modules/pi-mcp-adapter"}
	tt := testTurn(t)
	tt.NewSession = NewSession("pi", "w1", "0123456789ab")
	require.Equal(t, "agent-fleet-w1-0123456789ab", tt.NewSession)
	c, err := BuildTurn(spec, tt)
	require.NoError(t, err)
	require.Equal(t, []string{"/bin/pi", "--mode", "json", "--session-id", tt.NewSession}, c.Argv[:5])
	require.Equal(t, "sonnet", after(t, c.Argv, "--model"))
	require.Equal(t, "low", after(t, c.Argv, "--thinking"))
	require.Equal(t, "bash,edit,write", after(t, c.Argv, "--exclude-tools"))
	require.NotContains(t, c.Argv, "--tools", "an allowlist would drop the MCP tools too")
	require.Contains(t, c.Argv, "--no-mcp")
	require.Equal(t, spec.PiExtension, after(t, c.Argv, "-e"))
	require.Equal(t, tt.Mandate, after(t, c.Argv, "--append-system-prompt"))
	require.Equal(t, "the prompt", c.Stdin)
	cfgPath := after(t, c.Argv, "--mcp-config")
	var cfg struct {
		MCPServers map[string]map[string]any `json:"mcpServers"`
	}
	require.NoError(t, json.Unmarshal(c.Files[cfgPath], &cfg))
	srv := cfg.MCPServers[MCPServerName]
	require.Equal(t, "/usr/bin/agent-fleet", srv["command"])
	require.Equal(t, "eager", srv["lifecycle"])
	require.Equal(t, true, srv["directTools"])
	require.Equal(t, "none", srv["toolPrefix"], "the tools keep their names (intercom_send)")

	// The same conversation id every turn; no -e when pi loads the adapter.
	tt.Session, tt.NewSession, spec.PiExtension, spec.Permission = tt.NewSession, "", "", PermissionFull
	c, err = BuildTurn(spec, tt)
	require.NoError(t, err)
	require.Equal(t, tt.Session, after(t, c.Argv, "--session-id"))
	require.NotContains(t, c.Argv, "-e")
	require.NotContains(t, c.Argv, "--exclude-tools")
}

func TestCheckOptions(t *testing.T) {
	for _, ok := range [][4]string{
		{"claude", "opus", "max", "read-only"}, {"claude", "", "", "acceptEdits"}, {"codex", "gpt-5", "xhigh", "workspace-write"},
		{"opencode", "anthropic/x", "high", "full"}, {"pi", "", "off", "full"}, {"pi", "", "", ""},
	} {
		require.NoError(t, CheckOptions(ok[0], ok[1], ok[2], ok[3]), ok)
	}
	for _, bad := range [][4]string{
		{"claude", "", "minimal", ""}, {"codex", "", "minimal", ""}, {"codex", "", "", "yolo"},
		{"pi", "", "", "workspace-write"}, {"claude", "--model", "", ""}, {"opencode", "", "a b", ""},
	} {
		require.ErrorIs(t, CheckOptions(bad[0], bad[1], bad[2], bad[3]), ErrInvalidOption, bad)
	}
	require.ErrorIs(t, CheckOptions("gemini", "", "", ""), ErrUnsupportedKind)
}

// Output as the real CLIs print it (Claude Code's from a run without
// credentials on this machine; the others in their documented formats).
func TestParseTurnOutput(t *testing.T) {
	claudeNoCreds := `{"duration_api_ms":0,"stop_reason":"stop_sequence","session_id":"11111111-2222-4333-8444-555555555555","total_cost_usd":0,"permission_denials":[],"terminal_reason":"api_error","is_error":true,"num_turns":1,"subtype":"success","api_error_status":null,"result":"Not logged in · Please run /login","type":"result","duration_ms":139}`
	r := ParseTurnOutput("claude", []byte(claudeNoCreds+"\n"))
	require.True(t, r.Failed)
	require.Equal(t, "11111111-2222-4333-8444-555555555555", r.Session)
	require.Equal(t, "Not logged in · Please run /login (api_error)", r.Error)

	r = ParseTurnOutput("claude", []byte(`{"type":"result","subtype":"success","is_error":false,"result":"All done.","session_id":"s1"}`))
	require.Equal(t, TurnResult{Session: "s1", Final: "All done."}, r)
	r = ParseTurnOutput("claude", []byte("error: unknown option '--bogus'\n"))
	require.True(t, r.Failed)

	codex := `{"type":"thread.started","thread_id":"01a2"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"thinking"}}
{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"First."}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Fixed it."}}
{"type":"turn.completed","usage":{"input_tokens":1}}`
	require.Equal(t, TurnResult{Session: "01a2", Final: "Fixed it.", Usage: &Usage{InputTokens: 1}, UsageCumulative: true},
		ParseTurnOutput("codex", []byte(codex)))
	codexFail := `{"type":"thread.started","thread_id":"01a3"}
{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 2/5 (stream disconnected before completion)"}
{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}`
	r = ParseTurnOutput("codex", []byte(codexFail))
	require.Equal(t, TurnResult{Session: "01a3", Failed: true, Error: "stream disconnected before completion"}, r)
	r = ParseTurnOutput("codex", []byte(`{"type":"thread.started","thread_id":"01a4"}`+"\n"+`{"type":"error","message":"Reconnecting... waiting for network"}`))
	require.True(t, r.Failed, "no turn.completed")
	require.Equal(t, "01a4", r.Session)

	opencodeNoNet := `{"type":"error","timestamp":1796014520688,"sessionID":"ses_dd53","error":{"name":"APIError","data":{"message":"Cannot connect to API: Unable to connect.","isRetryable":true}}}`
	r = ParseTurnOutput("opencode", []byte(opencodeNoNet))
	require.Equal(t, TurnResult{Session: "ses_dd53", Failed: true, Error: "Cannot connect to API: Unable to connect."}, r)
	opencodeOK := `{"type":"step_start","sessionID":"ses_1","part":{}}
{"type":"text","sessionID":"ses_1","part":{"text":"Let me look."}}
{"type":"tool_use","sessionID":"ses_1","part":{"tool":"read"}}
{"type":"step_finish","sessionID":"ses_1","part":{}}
{"type":"step_start","sessionID":"ses_1","part":{}}
{"type":"text","sessionID":"ses_1","part":{"text":"The answer is 42."}}
{"type":"step_finish","sessionID":"ses_1","part":{}}
{"type":"step_start","sessionID":"ses_1","part":{}}
{"type":"step_finish","sessionID":"ses_1","part":{}}`
	require.Equal(t, TurnResult{Session: "ses_1", Final: "The answer is 42.", Usage: &Usage{}}, ParseTurnOutput("opencode", []byte(opencodeOK)))

	pi := `{"type":"session","version":3,"id":"agent-fleet-w1-0123456789ab","timestamp":"2024-12-03T14:00:00.000Z","cwd":"/w"}
{"type":"agent_start"}
{"type":"message_end","message":{"role":"user","content":"hi"}}
{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Hello"},{"type":"toolCall","id":"x"}],"stopReason":"toolUse"}}
{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Done."}],"stopReason":"stop"}}
{"type":"agent_settled","aborted":false}`
	require.Equal(t, TurnResult{Session: "agent-fleet-w1-0123456789ab", Final: "Done."}, ParseTurnOutput("pi", []byte(pi)))
	piErr := `{"type":"session","id":"s"}
{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"No API key for provider anthropic"}}`
	require.Equal(t, TurnResult{Session: "s", Failed: true, Error: "No API key for provider anthropic"}, ParseTurnOutput("pi", []byte(piErr)))
}

func TestPrompts(t *testing.T) {
	spec := &Spec{Kind: "claude", Role: "reviewer", Cwd: "/src/app"}
	m := Mandate(spec, "rev", "boss")
	for _, want := range []string{`"rev"`, `"reviewer"`, `"boss"`, "intercom_send", "intercom_ask only when you are blocked", "intercom_reply", "/src/app"} {
		require.Contains(t, m, want)
	}
	require.Equal(t, "[agent-fleet] Turn 1 · your manager: boss\n\nYour task from boss:\n\nfix it", TaskPrompt(1, "boss", "fix it"))

	one := []intercom.MessageView{{From: intercom.Sender{ID: "boss"}, Text: "also the docs"}}
	p := BatchPrompt(2, "boss", one)
	require.Equal(t, "[agent-fleet] Turn 2 · your manager: boss\n\n📨 From boss:\nalso the docs", p)

	batch := []intercom.MessageView{
		{From: intercom.Sender{ID: "boss"}, Text: "one"},
		{From: intercom.Sender{ID: "peer-7", Name: "peer"}, Text: "two?", ExpectsReply: true, AskID: "ask-xyz"},
	}
	p = BatchPrompt(3, "boss", batch)
	require.Contains(t, p, "📨 Intercom batch (2 messages)")
	require.Contains(t, p, "[1/2] From boss:\none")
	require.Contains(t, p, "[2/2] From peer (peer-7) · ask ask-xyz, awaiting your reply:\ntwo?")
	require.Contains(t, p, "intercom_reply")

}
