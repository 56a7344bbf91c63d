package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pelletier/go-toml/v2"
)

// Stand-in harnesses for the wake loop's end-to-end tests (model turns
// cannot run here). The test binary, started with
// AGENT_FLEET_FAKE_HARNESS=claude|codex|opencode|pi, acts as that CLI: it
// accepts only the flags the real one documents for a turn (an unknown flag
// is a usage error), keeps conversations under $HOME/.fake-harness so that
// a resumed turn must name one that exists, finds agent-fleet's MCP server
// where the real CLI would (Claude's and Pi's --mcp-config file, Codex's -c
// overrides — with no environment but the entry's, as Codex passes —,
// OpenCode's OPENCODE_CONFIG_CONTENT), starts it, calls intercom tools, and
// prints its result in the CLI's own output format.
//
// The "model" obeys the last line of the prompt:
//
//	FAIL-TURN …      the model call fails (a server error)
//	RATE-LIMIT …     the first turn of a conversation with it ends on the
//	                 provider's rate limit, reset in 1 s; later ones work
//	SEND-PROGRESS …  intercom_send to the manager named in the turn header
//	SLEEP …          start a child, then sleep (stop during a turn)
//	anything else    answer "done: <line> [whoami=<id> fleet-tool=<bool>]"
//
// Every turn that works consumes standInTokens (100 input, 20 output, 1000
// read from the cache) and, but for Codex, $0.01, reported in the CLI's
// own format: Claude's and Codex's as the conversation's running totals.
//
// While $HOME/.fake-harness/hold exists every turn waits before its model
// call (at most 60 s).
//
// TestMain runs it when AGENT_FLEET_FAKE_HARNESS names the kind.

// standInCall is one invocation, as recorded in calls.jsonl.
type standInCall struct {
	Kind    string   `json:"kind"`
	Argv    []string `json:"argv"`
	Prompt  string   `json:"prompt"`
	Session string   `json:"session"`
	Resumed bool     `json:"resumed"`
	PID     int      `json:"pid"`
}

type standInTurn struct {
	session    string
	resumed    bool
	mcpCommand []string
	mcpEnv     map[string]string
	onlyEnv    bool // the server gets only mcpEnv (+PATH, HOME), as Codex does
}

func standInDir() string { return filepath.Join(os.Getenv("HOME"), ".fake-harness") }

func usage(kind, format string, args ...any) int {
	fmt.Fprintf(os.Stderr, kind+": "+format+"\n", args...)
	return 2
}

func runStandIn(kind string, args []string) int {
	var t standInTurn
	var code int
	switch kind {
	case "claude":
		t, code = parseClaude(args)
	case "codex":
		t, code = parseCodex(args)
	case "opencode":
		t, code = parseOpencode(args)
	case "pi":
		t, code = parsePi(args)
	default:
		return usage(kind, "unknown stand-in")
	}
	if code != 0 {
		return code
	}
	sessions := filepath.Join(standInDir(), "sessions", kind)
	_ = os.MkdirAll(sessions, 0o700)
	if t.resumed {
		if _, err := os.Stat(filepath.Join(sessions, t.session)); err != nil {
			fmt.Fprintf(os.Stderr, "No conversation found with session ID: %s\n", t.session)
			return 1
		}
	} else if kind != "pi" {
		if t.session == "" {
			t.session = uuid.NewString()
			if kind == "opencode" {
				t.session = "ses_" + strings.ReplaceAll(t.session, "-", "")[:20]
			}
		}
		if _, err := os.Stat(filepath.Join(sessions, t.session)); err == nil {
			fmt.Fprintf(os.Stderr, "Session ID %s is already in use\n", t.session)
			return 1
		}
	}
	conv := filepath.Join(sessions, t.session)
	turns := 0 // the conversation's turns that worked so far
	if data, err := os.ReadFile(conv); err == nil {
		turns, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	_ = os.WriteFile(conv, []byte(strconv.Itoa(turns)), 0o600)
	prompt, _ := io.ReadAll(os.Stdin)
	record(standInCall{Kind: kind, Argv: args, Prompt: string(prompt), Session: t.session, Resumed: t.resumed, PID: os.Getpid()})

	// A test holds the model (the turn) while the file "hold" exists, so
	// that what it sends meanwhile waits for the next turn, however slow
	// the machine.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(standInDir(), "hold")); err != nil {
			break
		}
	}
	line := lastLine(string(prompt))
	if strings.HasPrefix(line, "FAIL-TURN") {
		printOutcome(kind, t.session, "", "API Error: 500 the stand-in model failed", turns)
		return 1
	}
	if limited := conv + ".limited"; strings.HasPrefix(line, "RATE-LIMIT") {
		if _, err := os.Stat(limited); err != nil {
			_ = os.WriteFile(limited, nil, 0o600)
			printRateLimit(kind, t.session, turns)
			return 1
		}
	}
	final, err := standInModel(t, string(prompt), line)
	if err != nil {
		fmt.Fprintln(os.Stderr, kind+" stand-in:", err)
		printOutcome(kind, t.session, "", err.Error(), turns)
		return 1
	}
	_ = os.WriteFile(conv, []byte(strconv.Itoa(turns+1)), 0o600)
	printOutcome(kind, t.session, final, "", turns+1)
	return 0
}

// What one stand-in turn consumes.
const (
	standInInput, standInOutput, standInCacheRead = 100, 20, 1000
	standInTokens                                 = standInInput + standInOutput + standInCacheRead
	standInCost                                   = 0.01
)

// claudeTotals is Claude Code's usage of a conversation after turns turns
// (running totals).
func claudeTotals(turns int) map[string]any {
	n := float64(turns)
	return map[string]any{"total_cost_usd": n * standInCost, "modelUsage": map[string]any{"stand-in-model": map[string]any{
		"inputTokens": n * standInInput, "outputTokens": n * standInOutput, "cacheReadInputTokens": n * standInCacheRead,
		"cacheCreationInputTokens": 0, "costUSD": n * standInCost}}}
}

// printRateLimit prints a turn that ended on the provider's rate limit, as
// each CLI does once its own retries are spent, with a reset in 1 s.
func printRateLimit(kind, session string, turns int) {
	emit := func(v any) {
		data, _ := json.Marshal(v)
		fmt.Println(string(data))
	}
	switch kind {
	case "claude":
		res := map[string]any{"type": "result", "subtype": "success", "is_error": true, "session_id": session,
			"api_error_status": 429, "api_error_type": "rate_limit_error", "terminal_reason": "api_error",
			"result": "API Error: Request rejected (429) · Number of requests has exceeded your rate limit. Please try again in 1s."}
		maps.Copy(res, claudeTotals(turns))
		emit(res)
	case "codex":
		msg := "stream disconnected before completion: Rate limit reached for stand-in-model. Please try again in 1s."
		emit(map[string]any{"type": "thread.started", "thread_id": session})
		emit(map[string]any{"type": "turn.started"})
		emit(map[string]any{"type": "error", "message": "Reconnecting... 5/5 (" + msg + ")"})
		emit(map[string]any{"type": "turn.failed", "error": map[string]any{"message": msg}})
	case "opencode":
		emit(map[string]any{"type": "error", "sessionID": session, "error": map[string]any{"name": "APIError", "data": map[string]any{
			"message": "Rate limit exceeded", "statusCode": 429, "isRetryable": true, "responseHeaders": map[string]any{"retry-after": "1"}}}})
	case "pi":
		emit(map[string]any{"type": "session", "version": 3, "id": session})
		emit(map[string]any{"type": "message_end", "message": map[string]any{"role": "assistant", "content": []any{}, "stopReason": "error",
			"errorMessage": "429 Rate limit reached for stand-in-model. Please try again in 1s.", "model": "stand-in-model",
			"usage": map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": map[string]any{"total": 0}}}})
	}
}

func record(c standInCall) {
	_ = os.MkdirAll(standInDir(), 0o700)
	data, _ := json.Marshal(c)
	f, err := os.OpenFile(filepath.Join(standInDir(), "calls.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		_, _ = f.Write(append(data, '\n'))
		f.Close()
	}
}

func lastLine(prompt string) string {
	lines := strings.Split(strings.TrimSpace(prompt), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "This is an ask") && !strings.HasPrefix(l, "Answer each ask") {
			return l
		}
	}
	return ""
}

var managerRe = regexp.MustCompile(`\[agent-fleet\] Turn \d+ · your manager: (\S+)`)

// standInModel is the scripted model: it uses the intercom tools through
// the configured MCP server, as a real turn would.
func standInModel(t standInTurn, prompt, line string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.Command(t.mcpCommand[0], t.mcpCommand[1:]...)
	// What the real CLI's environment would be: without the variable that
	// made this process a stand-in.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AGENT_FLEET_FAKE_HARNESS=") })
	if t.onlyEnv {
		env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	}
	for k, v := range t.mcpEnv {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stand-in", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return "", fmt.Errorf("MCP server %v: %w", t.mcpCommand, err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		return "", err
	}
	fleetTool := slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "agent_fleet" })
	who, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "intercom_whoami", Arguments: map[string]any{}})
	if err != nil || who.IsError {
		return "", fmt.Errorf("intercom_whoami: %v %v", err, who)
	}
	var me struct {
		SessionID string `json:"session_id"`
	}
	data, _ := json.Marshal(who.StructuredContent)
	_ = json.Unmarshal(data, &me)
	switch {
	case strings.HasPrefix(line, "SEND-PROGRESS"):
		m := managerRe.FindStringSubmatch(prompt)
		if m == nil {
			return "", errors.New("no manager in the turn header")
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "intercom_send", Arguments: map[string]any{"to": m[1], "message": "progress: " + line}})
		if err != nil || res.IsError {
			return "", fmt.Errorf("intercom_send: %v %v", err, res)
		}
	case strings.HasPrefix(line, "SLEEP"):
		child := exec.Command("sleep", "300")
		if err := child.Start(); err != nil {
			return "", err
		}
		_ = os.WriteFile(filepath.Join(standInDir(), "sleeping.pids"), []byte(strconv.Itoa(os.Getpid())+" "+strconv.Itoa(child.Process.Pid)), 0o600)
		time.Sleep(300 * time.Second)
	}
	return fmt.Sprintf("done: %s [whoami=%s fleet-tool=%t]", line, me.SessionID, fleetTool), nil
}

// printOutcome prints a turn's end in the CLI's format; turns is how many
// of the conversation's turns worked, this one included.
func printOutcome(kind, session, final, failure string, turns int) {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	emit := func(v any) {
		data, _ := json.Marshal(v)
		out.Write(append(data, '\n'))
	}
	switch kind {
	case "claude":
		res := map[string]any{"type": "result", "subtype": "success", "is_error": failure != "", "session_id": session,
			"result": final, "terminal_reason": "completed"}
		if failure != "" {
			res["result"], res["terminal_reason"] = failure, "api_error"
		}
		maps.Copy(res, claudeTotals(turns))
		emit(res)
	case "codex":
		emit(map[string]any{"type": "thread.started", "thread_id": session})
		emit(map[string]any{"type": "turn.started"})
		if failure != "" {
			emit(map[string]any{"type": "error", "message": "Reconnecting... 1/5"})
			emit(map[string]any{"type": "turn.failed", "error": map[string]any{"message": failure}})
			return
		}
		emit(map[string]any{"type": "item.completed", "item": map[string]any{"id": "item_0", "type": "agent_message", "text": final}})
		emit(map[string]any{"type": "turn.completed", "usage": map[string]any{"input_tokens": turns * (standInInput + standInCacheRead),
			"cached_input_tokens": turns * standInCacheRead, "output_tokens": turns * standInOutput}})
	case "opencode":
		if failure != "" {
			emit(map[string]any{"type": "error", "sessionID": session, "error": map[string]any{"name": "APIError", "data": map[string]any{"message": failure}}})
			return
		}
		emit(map[string]any{"type": "step_start", "sessionID": session, "part": map[string]any{}})
		emit(map[string]any{"type": "text", "sessionID": session, "part": map[string]any{"text": final}})
		emit(map[string]any{"type": "step_finish", "sessionID": session, "part": map[string]any{"cost": standInCost,
			"tokens": map[string]any{"input": standInInput, "output": standInOutput, "reasoning": 0, "cache": map[string]any{"read": standInCacheRead, "write": 0}}}})
	case "pi":
		emit(map[string]any{"type": "session", "version": 3, "id": session})
		msg := map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": final}}, "stopReason": "stop",
			"model": "stand-in-model", "usage": map[string]any{"input": standInInput, "output": standInOutput, "cacheRead": standInCacheRead,
				"cacheWrite": 0, "totalTokens": standInTokens, "cost": map[string]any{"total": standInCost}}}
		if failure != "" {
			msg = map[string]any{"role": "assistant", "content": []any{}, "stopReason": "error", "errorMessage": failure}
		}
		emit(map[string]any{"type": "message_end", "message": msg})
		emit(map[string]any{"type": "agent_settled", "aborted": false})
	}
}

// flagSet parses "--flag value" and bare "--flag" arguments.
type flagSet struct {
	values map[string][]string
	bools  map[string]bool
	rest   []string
}

func parseFlags(kind string, args []string, withValue, bare []string) (*flagSet, int) {
	fs := &flagSet{values: map[string][]string{}, bools: map[string]bool{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case slices.Contains(withValue, a):
			if i+1 >= len(args) {
				return nil, usage(kind, "option '%s' argument missing", a)
			}
			fs.values[a] = append(fs.values[a], args[i+1])
			i++
		case slices.Contains(bare, a):
			fs.bools[a] = true
		case strings.HasPrefix(a, "-") && a != "-":
			return nil, usage(kind, "error: unknown option '%s'", a)
		default:
			fs.rest = append(fs.rest, a)
		}
	}
	return fs, 0
}

func (fs *flagSet) one(name string) string {
	if v := fs.values[name]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// mcpFile reads an mcpServers file (Claude's and Pi's format).
func mcpFile(path string) (standInTurn, error) {
	var t standInTurn
	data, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return t, err
	}
	srv, ok := cfg.MCPServers["agent-fleet"]
	if !ok || srv.Command == "" {
		return t, fmt.Errorf("%s has no agent-fleet server", path)
	}
	t.mcpCommand, t.mcpEnv = append([]string{srv.Command}, srv.Args...), srv.Env
	return t, nil
}

func parseClaude(args []string) (standInTurn, int) {
	fs, code := parseFlags("claude", args,
		[]string{"--output-format", "--session-id", "--resume", "--mcp-config", "--allowedTools", "--disallowedTools", "--permission-prompts", "--permission-prompt-tool", "--permission-mode", "--model", "--effort", "--append-system-prompt"},
		[]string{"-p"})
	if code != 0 {
		return standInTurn{}, code
	}
	if !fs.bools["-p"] || fs.one("--output-format") != "json" || len(fs.rest) > 0 {
		return standInTurn{}, usage("claude", "a turn is -p --output-format json with the prompt on stdin")
	}
	t, err := mcpFile(fs.one("--mcp-config"))
	if err != nil {
		return t, usage("claude", "--mcp-config: %v", err)
	}
	if s := fs.one("--resume"); s != "" {
		t.session, t.resumed = s, true
	} else if t.session = fs.one("--session-id"); uuid.Validate(t.session) != nil {
		return t, usage("claude", "--session-id must be a valid UUID")
	}
	return t, 0
}

func parseCodex(args []string) (standInTurn, int) {
	if len(args) == 0 || args[0] != "exec" {
		return standInTurn{}, usage("codex", "a turn is codex exec")
	}
	args = args[1:]
	resumed := len(args) > 0 && args[0] == "resume"
	if resumed {
		args = args[1:]
	}
	fs, code := parseFlags("codex", args, []string{"-c", "-m"}, []string{"--json", "--skip-git-repo-check", "--approve-for-me", "--dangerously-bypass-hook-trust"})
	if code != 0 {
		return standInTurn{}, code
	}
	var t standInTurn
	want := 1
	if resumed {
		want = 2
		t.session, t.resumed = fs.rest[0], true
	}
	if !fs.bools["--json"] || len(fs.rest) != want || fs.rest[len(fs.rest)-1] != "-" {
		return t, usage("codex", "a turn is exec [resume ID] --json … - (got %q)", fs.rest)
	}
	var doc strings.Builder
	for _, kv := range fs.values["-c"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return t, usage("codex", "-c wants key=value")
		}
		doc.WriteString(k + " = " + v + "\n")
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `toml:"command"`
			Args    []string          `toml:"args"`
			Env     map[string]string `toml:"env"`
		} `toml:"mcp_servers"`
	}
	if err := toml.Unmarshal([]byte(doc.String()), &cfg); err != nil {
		return t, usage("codex", "Error: failed to load configuration: %v", err)
	}
	srv, ok := cfg.MCPServers["agent-fleet"]
	if !ok {
		return t, usage("codex", "no agent-fleet MCP server configured")
	}
	t.mcpCommand, t.mcpEnv, t.onlyEnv = append([]string{srv.Command}, srv.Args...), srv.Env, true
	return t, 0
}

func parseOpencode(args []string) (standInTurn, int) {
	if len(args) == 0 || args[0] != "run" {
		return standInTurn{}, usage("opencode", "a turn is opencode run")
	}
	fs, code := parseFlags("opencode", args[1:], []string{"--format", "--session", "--title", "-m", "--variant"}, []string{"--auto"})
	if code != 0 {
		return standInTurn{}, code
	}
	var t standInTurn
	if fs.one("--format") != "json" || len(fs.rest) > 0 {
		return t, usage("opencode", "a turn is run --format json with the message on stdin")
	}
	var cfg struct {
		MCP map[string]struct {
			Type        string            `json:"type"`
			Command     []string          `json:"command"`
			Environment map[string]string `json:"environment"`
		} `json:"mcp"`
	}
	if err := json.Unmarshal([]byte(os.Getenv("OPENCODE_CONFIG_CONTENT")), &cfg); err != nil {
		return t, usage("opencode", "OPENCODE_CONFIG_CONTENT: %v", err)
	}
	srv, ok := cfg.MCP["agent-fleet"]
	if !ok || srv.Type != "local" || len(srv.Command) == 0 {
		return t, usage("opencode", "no local agent-fleet MCP server configured")
	}
	t.mcpCommand, t.mcpEnv = srv.Command, srv.Environment
	if s := fs.one("--session"); s != "" {
		t.session, t.resumed = s, true
	}
	return t, 0
}

func parsePi(args []string) (standInTurn, int) {
	fs, code := parseFlags("pi", args, []string{"--mode", "--session-id", "--model", "--thinking", "--exclude-tools", "-e", "--mcp-config", "--append-system-prompt"},
		[]string{"--no-mcp"})
	if code != 0 {
		return standInTurn{}, code
	}
	if fs.one("--mode") != "json" || len(fs.rest) > 0 {
		return standInTurn{}, usage("pi", "a turn is --mode json with the prompt on stdin")
	}
	t, err := mcpFile(fs.one("--mcp-config"))
	if err != nil {
		return t, usage("pi", "--mcp-config: %v", err)
	}
	t.session = fs.one("--session-id")
	_, err = os.Stat(filepath.Join(standInDir(), "sessions", "pi", t.session))
	t.resumed = err == nil // --session-id opens the session or creates it
	return t, 0
}
