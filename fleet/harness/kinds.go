package harness

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The command lines below were checked against each CLI's --help (Claude
// Code 2.1.332, Codex 0.171.0, OpenCode 1.18.33, Pi 1.6.0 documentation)
// and by running them in CI (cmd/agent-fleet harness_cli_test.go; whole
// OpenCode and Pi turns against a scripted model in harness_turn_*_test.go). The prompt always goes on standard input, never in
// argv (no length limit, not visible in ps).

// --- Claude Code: claude -p --output-format json -------------------------

type claudeCLI struct{}

// claudeModes are Claude Code's own --permission-mode values, accepted
// as they are.
var claudeModes = []string{"acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan"}

// codexSandboxes are Codex's own sandbox modes accepted beside the portable
// three (read-only and workspace-write are both).
var codexSandboxes = []string{"danger-full-access"}

// PermissionValues is every permission some kind accepts: the portable
// three, then Claude Code's modes and Codex's sandboxes (a kind refuses the
// others').
func PermissionValues() []string {
	return slices.Concat([]string{PermissionReadOnly, PermissionWorkspaceWrite, PermissionFull}, claudeModes, codexSandboxes)
}

func (claudeCLI) check(effort, permission string) error {
	if err := oneOf("effort for claude", effort, "low", "medium", "high", "xhigh", "max"); err != nil {
		return err
	}
	return oneOf("permission for claude", permission,
		append([]string{PermissionReadOnly, PermissionWorkspaceWrite, PermissionFull}, claudeModes...)...)
}

// newSession: Claude takes the id of a new conversation (--session-id), so
// the shim knows it before the turn runs.
func (claudeCLI) newSession(string, string) string { return uuid.NewString() }

func (claudeCLI) systemPrompt() bool { return true }

// RelaysPermissions reports whether a worker of kind with permission
// sends its harness's permission prompts to its manager. Claude Code
// consults --permission-prompt-tool in -p mode wherever its mode would
// prompt: the default mode (agent-fleet's "") and manual, acceptEdits
// (workspace-write: what is not an edit in the working directory), plan
// and auto (when their classifier or plan asks); dontAsk (read-only),
// bypassPermissions (full) never prompt. Codex exec asks nobody
// (approval policy never) unless --approve-for-me routes its approvals
// to PermissionRequest hooks, which it does in the workspace-write
// sandbox. OpenCode's and Pi's turns have no way to ask
// (docs/harness-endpoints.md "Permission prompts").
func RelaysPermissions(kind, permission string) bool {
	switch kind {
	case "codex":
		// --approve-for-me routes approvals to hooks, in the
		// workspace-write sandbox: only where the spawn asked for it.
		return permission == PermissionWorkspaceWrite
	case "claude":
	default:
		return false
	}
	switch permission {
	case PermissionReadOnly, PermissionFull, "bypassPermissions", "dontAsk":
		return false
	}
	return true
}

// claudeToolTimeout bounds each call of agent-fleet's MCP server in a
// Claude turn (the server's "timeout", ms): above intercom_ask's 120 s
// and the permission wait, which the prompt tool's call lasts.
func claudeToolTimeout(spec *Spec) time.Duration {
	return max(spec.PermissionWait(), 2*time.Minute) + time.Minute
}

func (claudeCLI) command(spec *Spec, t *Turn) (*TurnCommand, error) {
	srv := mcpServerJSON(t.MCP)
	relay := RelaysPermissions("claude", spec.Permission)
	if relay {
		srv["timeout"] = claudeToolTimeout(spec).Milliseconds()
	}
	cfg, err := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{MCPServerName: srv}}, "", "  ")
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(t.Dir, "claude-mcp.json")
	argv := append(slices.Clone(spec.Command), "-p", "--output-format", "json")
	if t.Session != "" {
		argv = append(argv, "--resume", t.Session)
	} else if t.NewSession != "" {
		argv = append(argv, "--session-id", t.NewSession)
	}
	// A permission prompt goes to the manager through the worker-only
	// prompt tool; in a mode that never prompts, nothing would ask. The
	// worker's own intercom tools are allowed (they act only as the
	// worker, through its shim).
	argv = append(argv, "--mcp-config", cfgPath, "--allowedTools", "mcp__"+MCPServerName)
	if relay {
		argv = append(argv, "--permission-prompts", "host", "--permission-prompt-tool", "mcp__"+MCPServerName+"__"+PermissionPromptTool)
	} else {
		argv = append(argv, "--permission-prompts", "none")
	}
	switch spec.Permission {
	case PermissionDefault:
	case PermissionReadOnly:
		argv = append(argv, "--permission-mode", "dontAsk", "--disallowedTools", "Bash,Edit,Write,NotebookEdit")
	case PermissionWorkspaceWrite:
		argv = append(argv, "--permission-mode", "acceptEdits")
	case PermissionFull:
		argv = append(argv, "--permission-mode", "bypassPermissions")
	default:
		argv = append(argv, "--permission-mode", spec.Permission)
	}
	if spec.Model != "" {
		argv = append(argv, "--model", spec.Model)
	}
	if spec.Effort != "" {
		argv = append(argv, "--effort", spec.Effort)
	}
	argv = append(argv, "--append-system-prompt", t.Mandate)
	return &TurnCommand{Argv: argv, Stdin: t.Prompt, Files: map[string][]byte{cfgPath: cfg}}, nil
}

// parse reads the one result object of --output-format json:
// {"type":"result","subtype":"success","is_error":false,"result":"…",
// "session_id":"…","terminal_reason":…,"total_cost_usd":…,"usage":{…},
// "modelUsage":{"<model>":{inputTokens,outputTokens,cacheReadInputTokens,
// cacheCreationInputTokens,costUSD}}}. Without credentials Claude Code
// answers is_error with result "Not logged in · Please run /login". An API
// error that outlasted its retries is is_error with api_error_status (429,
// 529, …), api_error_type (rate_limit_error, overloaded_error) and the
// message as result ("API Error: Request rejected (429) · …", "API Error:
// Repeated 529 Overloaded errors. …"); it names no reset time.
//
// total_cost_usd and modelUsage are running totals of the conversation: a
// resumed session goes on from the totals its transcript saved (Claude
// Code's own description of the fields), so the usage is cumulative.
// modelUsage covers every model call (subagents too); usage, the main loop
// alone, is the fallback.
func (claudeCLI) parse(out []byte, now time.Time) TurnResult {
	var r TurnResult
	found := false
	jsonLines(out, func(line []byte) {
		var v struct {
			Type           string   `json:"type"`
			Subtype        string   `json:"subtype"`
			IsError        bool     `json:"is_error"`
			Result         string   `json:"result"`
			Errors         []string `json:"errors"`
			SessionID      string   `json:"session_id"`
			TerminalReason string   `json:"terminal_reason"`
			APIErrorStatus *int     `json:"api_error_status"`
			APIErrorType   string   `json:"api_error_type"`
			APIError       string   `json:"api_error"`
			TotalCostUSD   *float64 `json:"total_cost_usd"`
			Usage          *struct {
				InputTokens              int64 `json:"input_tokens"`
				OutputTokens             int64 `json:"output_tokens"`
				CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
				CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
			} `json:"usage"`
			ModelUsage map[string]struct {
				InputTokens              int64   `json:"inputTokens"`
				OutputTokens             int64   `json:"outputTokens"`
				CacheReadInputTokens     int64   `json:"cacheReadInputTokens"`
				CacheCreationInputTokens int64   `json:"cacheCreationInputTokens"`
				CostUSD                  float64 `json:"costUSD"`
			} `json:"modelUsage"`
		}
		if json.Unmarshal(line, &v) != nil || v.Type != "result" {
			return
		}
		found = true
		r = TurnResult{Session: v.SessionID, Final: v.Result}
		if len(v.ModelUsage) > 0 {
			u := &Usage{}
			var lead struct {
				cost float64
				out  int64
			}
			for _, model := range slices.Sorted(maps.Keys(v.ModelUsage)) {
				m := v.ModelUsage[model]
				u.InputTokens += m.InputTokens
				u.OutputTokens += m.OutputTokens
				u.CacheReadTokens += m.CacheReadInputTokens
				u.CacheWriteTokens += m.CacheCreationInputTokens
				u.CostUSD += m.CostUSD
				// The model that did most: the costliest, else the most output.
				if u.Model == "" || m.CostUSD > lead.cost || (m.CostUSD == lead.cost && m.OutputTokens > lead.out) {
					u.Model, lead.cost, lead.out = model, m.CostUSD, m.OutputTokens
				}
			}
			if v.TotalCostUSD != nil {
				u.CostUSD = *v.TotalCostUSD // the same calls, as Claude Code sums them
			}
			u.CostKnown = true
			r.Usage, r.UsageCumulative = u, true
		} else if v.Usage != nil && (v.Usage.InputTokens+v.Usage.OutputTokens+v.Usage.CacheReadInputTokens+v.Usage.CacheCreationInputTokens) > 0 {
			// No per-model totals: the main loop's own usage of this call,
			// without a cost (total_cost_usd would be a running total).
			r.Usage = &Usage{InputTokens: v.Usage.InputTokens, OutputTokens: v.Usage.OutputTokens,
				CacheReadTokens: v.Usage.CacheReadInputTokens, CacheWriteTokens: v.Usage.CacheCreationInputTokens}
		} else if v.TotalCostUSD != nil {
			r.Usage, r.UsageCumulative = &Usage{CostUSD: *v.TotalCostUSD, CostKnown: true}, true
		}
		if v.IsError || (v.Subtype != "" && v.Subtype != "success") {
			r.Failed, r.Final = true, ""
			r.Error = firstNonEmpty(strings.TrimSpace(v.Result), strings.Join(v.Errors, "; "), v.Subtype)
			if v.TerminalReason != "" && v.TerminalReason != "completed" {
				r.Error += " (" + v.TerminalReason + ")"
			}
			kind := ""
			if v.APIErrorStatus != nil {
				kind = rateLimitOfStatus(*v.APIErrorStatus)
			}
			kind = firstNonEmpty(kind, rateLimitOfType(v.APIErrorType), rateLimitOfType(v.APIError))
			if kind == "" && (v.APIErrorStatus != nil || strings.HasPrefix(v.Result, "API Error")) {
				kind = rateLimitOfText(v.Result)
			}
			if kind != "" && !notTransient.MatchString(v.Result) {
				r.RateLimit = &RateLimit{Kind: kind, ResetAt: resetOfText(v.Result, now)}
			}
		}
	})
	if !found {
		return TurnResult{Failed: true, Error: ErrNoOutput.Error()}
	}
	return r
}

// --- Codex: codex exec --json / codex exec resume --json -----------------

type codexCLI struct{}

func (codexCLI) check(effort, permission string) error {
	if err := oneOf("effort for codex", effort, "low", "medium", "high", "xhigh"); err != nil {
		return err
	}
	return oneOf("permission for codex", permission, slices.Concat([]string{PermissionReadOnly, PermissionWorkspaceWrite, PermissionFull}, codexSandboxes)...)
}

func (codexCLI) newSession(string, string) string { return "" }

func (codexCLI) systemPrompt() bool { return true }

// codexSandbox maps a permission to Codex's sandbox_mode.
func codexSandbox(permission string) string {
	switch permission {
	case PermissionReadOnly:
		return "read-only"
	case PermissionWorkspaceWrite:
		return "workspace-write"
	case PermissionFull, "danger-full-access":
		return "danger-full-access"
	}
	return ""
}

// codexOverrides are the -c key=value overrides of a turn. Codex has no
// MCP configuration file flag and passes a server only the environment its
// entry names, so the whole entry goes here; the user's config.toml is left
// alone. intercom_ask may wait 120 s, past Codex's default 60 s tool
// timeout.
func codexOverrides(spec *Spec, t *Turn) []string {
	srv := "mcp_servers." + MCPServerName + "."
	kv := []string{
		srv + "command=" + tomlString(t.MCP.Command),
		srv + "args=" + tomlStrings(t.MCP.Args),
		srv + "env=" + tomlTable(t.MCP.Env),
		srv + "startup_timeout_sec=30",
		srv + "tool_timeout_sec=130",
		srv + "required=true",
		srv + `default_tools_approval_mode="approve"`,
		"developer_instructions=" + tomlString(t.Mandate),
	}
	if spec.Effort != "" {
		kv = append(kv, "model_reasoning_effort="+tomlString(spec.Effort))
	}
	if s := codexSandbox(spec.Permission); s != "" {
		kv = append(kv, "sandbox_mode="+tomlString(s))
	}
	if RelaysPermissions("codex", spec.Permission) {
		kv = append(kv, "hooks.PermissionRequest="+codexPermissionHook(spec, t))
	}
	return kv
}

// codexPermissionHook is the PermissionRequest hook of a Codex turn:
// agent-fleet's MCP server command in its hook mode (mcp --worker
// --permission-hook), with the worker's identity in its environment, for
// as long as the permission wait lasts.
func codexPermissionHook(spec *Spec, t *Turn) string {
	words := []string{"/usr/bin/env"}
	for _, k := range slices.Sorted(maps.Keys(t.MCP.Env)) {
		words = append(words, k+"="+t.MCP.Env[k])
	}
	words = append(append(append(words, t.MCP.Command), t.MCP.Args...), "--permission-hook")
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	timeout := int64((spec.PermissionWait() + time.Minute) / time.Second)
	return fmt.Sprintf(`[{matcher="*",hooks=[{type="command",command=%s,timeout=%d}]}]`, tomlString(strings.Join(words, " ")), timeout)
}

// shellQuote quotes s for sh: as it is when it is plain, else in single
// quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (codexCLI) command(spec *Spec, t *Turn) (*TurnCommand, error) {
	argv := append(slices.Clone(spec.Command), "exec")
	if t.Session != "" {
		argv = append(argv, "resume")
	}
	argv = append(argv, "--json", "--skip-git-repo-check")
	if RelaysPermissions("codex", spec.Permission) {
		// Approvals go to the hook (agent-fleet's own, which Codex has no
		// record of trusting); without it Codex exec asks nobody.
		argv = append(argv, "--approve-for-me", "--dangerously-bypass-hook-trust")
	}
	if spec.Model != "" {
		argv = append(argv, "-m", spec.Model)
	}
	for _, kv := range codexOverrides(spec, t) {
		argv = append(argv, "-c", kv)
	}
	if t.Session != "" {
		argv = append(argv, t.Session)
	}
	argv = append(argv, "-") // the prompt is read from stdin
	return &TurnCommand{Argv: argv, Stdin: t.Prompt}, nil
}

// parse reads codex exec's JSONL events: thread.started{thread_id},
// item.completed{item{type:"agent_message",text}},
// turn.completed{usage{input_tokens,cached_input_tokens,output_tokens}},
// turn.failed{error{message}}, error{message}. The usage is the thread's
// running total (Codex restores it from the rollout on exec resume), input
// including the cached part and output the reasoning; Codex reports no
// cost and, in these events, no model. A rate limit that outlasted Codex's
// retries fails the turn with "exceeded retry limit, last status: 429 Too
// Many Requests", a plan's limit with "You've hit your usage limit. … Try
// again at 3:04 PM.", a provider's pace with "… Please try again in
// 11.054s."; an overloaded model with a 5xx status or "Selected model is
// at capacity.".
func (codexCLI) parse(out []byte, now time.Time) TurnResult {
	var r TurnResult
	completed, failed := false, false
	lastError := ""
	jsonLines(out, func(line []byte) {
		var v struct {
			Type     string `json:"type"`
			ThreadID string `json:"thread_id"`
			Message  string `json:"message"`
			Item     struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				Message string `json:"message"`
			} `json:"item"`
			Usage *struct {
				InputTokens       int64 `json:"input_tokens"`
				CachedInputTokens int64 `json:"cached_input_tokens"`
				CacheWriteTokens  int64 `json:"cache_write_input_tokens"`
				OutputTokens      int64 `json:"output_tokens"`
			} `json:"usage"`
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(line, &v) != nil {
			return
		}
		switch v.Type {
		case "thread.started":
			r.Session = v.ThreadID
		case "item.completed":
			if v.Item.Type == "agent_message" {
				r.Final = v.Item.Text
			}
		case "turn.completed":
			completed = true
			if u := v.Usage; u != nil {
				// input_tokens counts the cached and the cache-written
				// tokens too.
				cached := min(u.CachedInputTokens, u.InputTokens)
				written := min(u.CacheWriteTokens, u.InputTokens-cached)
				r.Usage = &Usage{InputTokens: u.InputTokens - cached - written, CacheReadTokens: cached,
					CacheWriteTokens: written, OutputTokens: u.OutputTokens}
				r.UsageCumulative = true
			}
		case "turn.failed":
			failed = true
			lastError = firstNonEmpty(v.Error.Message, "turn failed")
		case "error":
			lastError = v.Message
		}
	})
	if failed || !completed {
		r.Failed = true
		r.Error = firstNonEmpty(lastError, ErrNoOutput.Error())
		r.Final = ""
		if kind := rateLimitOfText(lastError); kind != "" {
			r.RateLimit = &RateLimit{Kind: kind, ResetAt: resetOfText(lastError, now)}
		}
	}
	return r
}

// tomlString is a TOML basic string. Go's JSON string encoding is one
// (it never writes \/, and writes other escapes as \uXXXX).
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func tomlStrings(ss []string) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = tomlString(s)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// tomlTable is an inline table with quoted keys, in key order.
func tomlTable(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = tomlString(k) + "=" + tomlString(m[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// --- OpenCode: opencode run --format json ---------------------------------

type opencodeCLI struct{}

func (opencodeCLI) check(effort, permission string) error {
	if strings.ContainsAny(effort, " \n\x00") {
		return invalidOption("effort %q is not an OpenCode model variant", effort)
	}
	return oneOf("permission for opencode", permission, PermissionReadOnly, PermissionWorkspaceWrite, PermissionFull)
}

func (opencodeCLI) newSession(string, string) string { return "" }

func (opencodeCLI) systemPrompt() bool { return false }

// opencodeConfig is the OPENCODE_CONFIG_CONTENT of a turn: agent-fleet's
// MCP server (OpenCode merges it over the user's configuration) and, for
// a permission mode, the tool permissions. `opencode run` rejects what
// would ask (nobody can answer), so "ask" denies.
func opencodeConfig(spec *Spec, t *Turn) map[string]any {
	cmd := append([]string{t.MCP.Command}, t.MCP.Args...)
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"mcp": map[string]any{MCPServerName: map[string]any{
			"type": "local", "command": cmd, "environment": envObject(t.MCP.Env), "enabled": true,
		}},
	}
	switch spec.Permission {
	case PermissionReadOnly:
		cfg["permission"] = map[string]any{"edit": "deny", "bash": "deny", "external_directory": "deny"}
	case PermissionWorkspaceWrite:
		cfg["permission"] = map[string]any{"edit": "allow", "bash": "ask", "external_directory": "deny"}
	case PermissionFull:
		cfg["permission"] = map[string]any{"edit": "allow", "bash": "allow", "external_directory": "allow", "webfetch": "allow"}
	}
	return cfg
}

func (opencodeCLI) command(spec *Spec, t *Turn) (*TurnCommand, error) {
	cfg, err := json.Marshal(opencodeConfig(spec, t))
	if err != nil {
		return nil, err
	}
	argv := append(slices.Clone(spec.Command), "run", "--format", "json")
	if t.Session != "" {
		argv = append(argv, "--session", t.Session)
	} else {
		argv = append(argv, "--title", "agent-fleet worker "+t.WorkerID)
	}
	if spec.Model != "" {
		argv = append(argv, "-m", spec.Model)
	}
	if spec.Effort != "" {
		argv = append(argv, "--variant", spec.Effort)
	}
	if spec.Permission == PermissionFull {
		argv = append(argv, "--auto")
	}
	return &TurnCommand{Argv: argv, Env: []string{"OPENCODE_CONFIG_CONTENT=" + string(cfg)}, Stdin: t.Prompt}, nil
}

// parse reads opencode run's JSON events: {type, sessionID, part} for
// step_start, text, tool_use, step_finish (part.tokens{input, output,
// reasoning, cache{read, write}} and part.cost, US dollars, of that step's
// model call); {type:"error", error{name, data{message, statusCode,
// isRetryable, responseHeaders, responseBody}}} once OpenCode's retries
// are spent. The final answer is the text of the last step that wrote any;
// the usage is the steps' sum (the session's own steps: a subagent's are
// not in the output). A rate limit or overload is the error's statusCode
// (429, 529, 503), else its wording; its reset the retry-after-ms or
// retry-after response header.
func (opencodeCLI) parse(out []byte, now time.Time) TurnResult {
	var r TurnResult
	var step, last []string
	sawAny := false
	jsonLines(out, func(line []byte) {
		var v struct {
			Type      string `json:"type"`
			SessionID string `json:"sessionID"`
			Part      struct {
				Text   string   `json:"text"`
				Cost   *float64 `json:"cost"`
				Tokens *struct {
					Input     int64 `json:"input"`
					Output    int64 `json:"output"`
					Reasoning int64 `json:"reasoning"`
					Cache     struct {
						Read  int64 `json:"read"`
						Write int64 `json:"write"`
					} `json:"cache"`
				} `json:"tokens"`
			} `json:"part"`
			Error struct {
				Name string `json:"name"`
				Data struct {
					Message         string            `json:"message"`
					StatusCode      int               `json:"statusCode"`
					ResponseHeaders map[string]string `json:"responseHeaders"`
					ResponseBody    string            `json:"responseBody"`
				} `json:"data"`
			} `json:"error"`
		}
		if json.Unmarshal(line, &v) != nil || v.Type == "" {
			return
		}
		sawAny = true
		if v.SessionID != "" {
			r.Session = v.SessionID
		}
		switch v.Type {
		case "step_start":
			step = nil
		case "text":
			if t := strings.TrimSpace(v.Part.Text); t != "" {
				step = append(step, t)
				last = step
			}
		case "step_finish":
			if r.Usage == nil {
				r.Usage = &Usage{}
			}
			if t := v.Part.Tokens; t != nil {
				*r.Usage = r.Usage.plus(Usage{InputTokens: t.Input, OutputTokens: t.Output + t.Reasoning,
					CacheReadTokens: t.Cache.Read, CacheWriteTokens: t.Cache.Write})
			}
			if v.Part.Cost != nil {
				r.Usage.CostUSD += *v.Part.Cost
				r.Usage.CostKnown = true
			}
		case "error":
			d := v.Error.Data
			r.Failed = true
			r.Error = firstNonEmpty(d.Message, v.Error.Name, "error")
			kind := rateLimitOfStatus(d.StatusCode)
			if d.StatusCode == 0 { // no HTTP status: the wording says
				kind = firstNonEmpty(rateLimitOfText(d.ResponseBody), rateLimitOfText(d.Message))
			}
			r.RateLimit = nil
			if kind != "" && !notTransient.MatchString(d.Message+" "+d.ResponseBody) {
				reset := resetOfHeaders(d.ResponseHeaders, now)
				if reset.IsZero() {
					reset = resetOfText(d.Message, now)
				}
				r.RateLimit = &RateLimit{Kind: kind, ResetAt: reset}
			}
		}
	})
	if !sawAny {
		return TurnResult{Failed: true, Error: ErrNoOutput.Error()}
	}
	if !r.Failed {
		r.Final = strings.Join(last, "\n\n")
	}
	return r
}

// --- Pi: pi --mode json, MCP through pi-mcp-adapter -----------------------

type piCLI struct{}

func (piCLI) check(effort, permission string) error {
	if err := oneOf("effort for pi", effort, "off", "minimal", "low", "medium", "high", "xhigh", "max"); err != nil {
		return err
	}
	if permission == PermissionWorkspaceWrite {
		return invalidOption("pi has no sandbox that keeps writes inside the workspace; use permission read-only or full")
	}
	return oneOf("permission for pi", permission, PermissionReadOnly, PermissionFull)
}

// newSession: --session-id opens the conversation with that id or creates
// it, so every turn of a worker names the same one.
func (piCLI) newSession(id, run string) string { return "agent-fleet-" + id + "-" + run }

func (piCLI) systemPrompt() bool { return true }

// piMCPConfig is the --mcp-config file of pi-mcp-adapter: the server
// connects at start, its tools are declared directly under their own names,
// and a request may take as long as intercom_ask waits.
func piMCPConfig(t *Turn) map[string]any {
	srv := map[string]any{
		"command": t.MCP.Command, "args": t.MCP.Args, "env": envObject(t.MCP.Env),
		"lifecycle": "eager", "directTools": true, "toolPrefix": "none", "requestTimeoutMs": 130000,
	}
	if t.MCP.Args == nil {
		srv["args"] = []string{}
	}
	return map[string]any{"mcpServers": map[string]any{MCPServerName: srv}}
}

func (piCLI) command(spec *Spec, t *Turn) (*TurnCommand, error) {
	cfg, err := json.MarshalIndent(piMCPConfig(t), "", "  ")
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(t.Dir, "pi-mcp.json")
	session := firstNonEmpty(t.Session, t.NewSession)
	argv := append(slices.Clone(spec.Command), "--mode", "json", "--session-id", session)
	if spec.Model != "" {
		argv = append(argv, "--model", spec.Model)
	}
	if spec.Effort != "" {
		argv = append(argv, "--thinking", spec.Effort)
	}
	if spec.Permission == PermissionReadOnly {
		// Pi has no sandbox: read-only takes away the tools that write or
		// run commands (--tools would also drop the MCP tools).
		argv = append(argv, "--exclude-tools", "bash,edit,write")
	}
	// The adapter replaces Pi's built-in MCP support for this run.
	argv = append(argv, "--no-mcp")
	if spec.PiExtension != "" {
		argv = append(argv, "-e", spec.PiExtension)
	}
	argv = append(argv, "--mcp-config", cfgPath, "--append-system-prompt", t.Mandate)
	return &TurnCommand{Argv: argv, Stdin: t.Prompt, Files: map[string][]byte{cfgPath: cfg}}, nil
}

// parse reads pi's JSON event stream: {"type":"session","id"} first, then
// message_end{message{role:"assistant", content[{type:"text",text}],
// model, usage{input, output, cacheRead, cacheWrite, totalTokens,
// cost{total, …}}, stopReason, errorMessage}}, one per model call (a call
// that failed and was retried too); stopReason error or aborted fails the
// turn. The usage is the calls' sum, in US dollars as Pi's model catalog
// prices them (or as the provider billed), output including reasoning. A
// rate limit or overload after Pi's own retries is the last call's
// errorMessage (the provider SDK's "429 …", "529 {…overloaded_error…}").
func (piCLI) parse(out []byte, now time.Time) TurnResult {
	var r TurnResult
	sawAssistant := false
	jsonLines(out, func(line []byte) {
		var v struct {
			Type    string `json:"type"`
			ID      string `json:"id"`
			Message struct {
				Role    string `json:"role"`
				Content json.RawMessage
				Model   string `json:"model"`
				Stop    string `json:"stopReason"`
				Err     string `json:"errorMessage"`
				Usage   *struct {
					Input      int64 `json:"input"`
					Output     int64 `json:"output"`
					CacheRead  int64 `json:"cacheRead"`
					CacheWrite int64 `json:"cacheWrite"`
					Cost       *struct {
						Total float64 `json:"total"`
					} `json:"cost"`
				} `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(line, &v) != nil {
			return
		}
		switch {
		case v.Type == "session":
			r.Session = v.ID
		case v.Type == "message_end" && v.Message.Role == "assistant":
			sawAssistant = true
			if u := v.Message.Usage; u != nil {
				if r.Usage == nil {
					r.Usage = &Usage{}
				}
				call := Usage{InputTokens: u.Input, OutputTokens: u.Output, CacheReadTokens: u.CacheRead, CacheWriteTokens: u.CacheWrite}
				if u.Cost != nil {
					call.CostUSD, call.CostKnown = u.Cost.Total, true
				}
				*r.Usage = r.Usage.plus(call)
				if v.Message.Model != "" {
					r.Usage.Model = v.Message.Model
				}
			}
			text := piText(v.Message.Content)
			switch v.Message.Stop {
			case "error", "aborted":
				r.Failed, r.Final = true, ""
				r.Error = firstNonEmpty(v.Message.Err, "the model call ended with "+v.Message.Stop)
				r.RateLimit = nil
				if kind := rateLimitOfText(v.Message.Err); kind != "" && v.Message.Stop == "error" {
					r.RateLimit = &RateLimit{Kind: kind, ResetAt: resetOfText(v.Message.Err, now)}
				}
			default:
				r.Failed, r.Error, r.RateLimit = false, "", nil
				if text != "" {
					r.Final = text
				}
			}
		}
	})
	if !sawAssistant && !r.Failed {
		r.Failed, r.Error = true, ErrNoOutput.Error()
	}
	return r
}

func piText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return strings.TrimSpace(s)
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &blocks)
	var parts []string
	for _, b := range blocks {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			parts = append(parts, strings.TrimSpace(b.Text))
		}
	}
	return strings.Join(parts, "\n\n")
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
