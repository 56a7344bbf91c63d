package harness

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode"
)

// A coding agent's permission prompt, relayed to the worker's manager as
// an intercom ask (docs/harness-endpoints.md "Permission prompts"): Claude
// Code's --permission-prompt-tool calls PermissionPromptTool of the
// worker's MCP server, which hands the request to the worker's shim
// (OpPermission through its holder); the shim asks the manager, waits up
// to the spawn's permission wait and answers with a PermissionDecision.

// PermissionPromptTool is the worker-only MCP tool Claude Code consults
// for a permission prompt (mcp__agent-fleet__permission_prompt). Claude
// Code does not offer it to the model.
const PermissionPromptTool = "permission_prompt"

// OpPermission is the worker shim's holder operation that relays a
// permission prompt: its argument a PermissionRequest, its result a
// PermissionDecision.
const OpPermission = "permission"

// Permission waits: how long a worker waits for its manager's answer
// before the action is denied. The longest is the broker's default ask
// TTL: a later reply would find no ask to answer.
const (
	DefaultPermissionWait = 5 * time.Minute
	MaxPermissionWait     = 10 * time.Minute
)

// PermissionWait is the spec's wait for a permission answer.
func (s *Spec) PermissionWait() time.Duration {
	if s.PermissionWaitMs <= 0 {
		return DefaultPermissionWait
	}
	return time.Duration(s.PermissionWaitMs) * time.Millisecond
}

// PermissionRequest is what a harness wants permission for: the tool's
// name as the harness calls it (Bash, Edit, mcp__server__tool, …), its
// input object, and the harness's id of the tool call.
type PermissionRequest struct {
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"toolUseId,omitempty"`
}

// PermissionDecision answers a PermissionRequest: Allow, or not with
// Message saying why (for the model).
type PermissionDecision struct {
	Allow   bool   `json:"allow"`
	Message string `json:"message,omitempty"`
}

// PermissionAnswer is a manager's reply to a permission ask.
type PermissionAnswer int

const (
	AnswerDeny PermissionAnswer = iota
	AnswerAllow
	AnswerAlways
)

// ParsePermissionReply reads a manager's reply by its first word: allow
// (yes, y, ok, approve), always, or deny (no, n, reject); the rest of the
// text is the manager's note. A reply that starts with none of these is a
// denial whose note is the whole reply.
func ParsePermissionReply(text string) (PermissionAnswer, string) {
	text = strings.TrimSpace(text)
	word, rest := text, ""
	if i := strings.IndexFunc(text, unicode.IsSpace); i >= 0 {
		word, rest = text[:i], text[i+1:]
	}
	word = strings.ToLower(strings.TrimRightFunc(word, func(r rune) bool { return unicode.IsPunct(r) }))
	rest = strings.TrimSpace(strings.TrimLeftFunc(rest, func(r rune) bool { return unicode.IsPunct(r) || unicode.IsSpace(r) }))
	switch word {
	case "allow", "allowed", "yes", "y", "ok", "approve", "approved":
		return AnswerAllow, rest
	case "always":
		return AnswerAlways, rest
	case "deny", "denied", "no", "n", "reject", "rejected":
		return AnswerDeny, rest
	}
	return AnswerDeny, text
}

// shellControl are the characters that let one Bash command line run
// more than its first command (or redirect it): a command with any of
// them is never covered by an "always" prefix.
const shellControl = ";&|<>$`()\n\\"

// PermissionRule is what an "always" answer allows for the rest of a
// worker's run: for Bash, the commands that start with the same words
// as the one asked about (its first word and, when it is a plain word,
// the second: `npm install`, `go test`), unless the command line holds a
// shell control character (then only that exact command); for every other
// tool, the tool itself. Covers reports whether req falls under it.
type PermissionRule struct {
	Tool string `json:"tool"`
	// Prefix is the Bash command prefix (words); Exact, a whole command.
	Prefix []string `json:"prefix,omitempty"`
	Exact  string   `json:"exact,omitempty"`
}

// RuleFor is the rule an "always" answer to req grants.
func RuleFor(req PermissionRequest) PermissionRule {
	if req.Tool != "Bash" {
		return PermissionRule{Tool: req.Tool}
	}
	cmd := strings.TrimSpace(bashCommand(req.Input))
	if strings.ContainsAny(cmd, shellControl) {
		return PermissionRule{Tool: "Bash", Exact: cmd}
	}
	words := strings.Fields(cmd)
	if len(words) > 2 {
		words = words[:2]
	}
	if len(words) == 2 && !plainWord(words[1]) {
		words = words[:1]
	}
	return PermissionRule{Tool: "Bash", Prefix: words}
}

// plainWord: a subcommand (install, test, run:dev), not a flag or a path.
func plainWord(w string) bool {
	for _, r := range w {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_' || r == ':') {
			return false
		}
	}
	return w != "" && w[0] != '-'
}

// Covers reports whether the rule allows req.
func (r PermissionRule) Covers(req PermissionRequest) bool {
	if req.Tool != r.Tool {
		return false
	}
	if r.Tool != "Bash" {
		return true
	}
	cmd := strings.TrimSpace(bashCommand(req.Input))
	if r.Exact != "" || len(r.Prefix) == 0 {
		return cmd == r.Exact
	}
	if strings.ContainsAny(cmd, shellControl) {
		return false
	}
	words := strings.Fields(cmd)
	if len(words) < len(r.Prefix) {
		return false
	}
	for i, w := range r.Prefix {
		if words[i] != w {
			return false
		}
	}
	return true
}

// Text says what the rule allows: "`npm install …` commands", "every
// Edit".
func (r PermissionRule) Text() string {
	switch {
	case r.Tool != "Bash":
		return "every " + r.Tool + " use"
	case r.Exact != "" || len(r.Prefix) == 0:
		return "this exact command"
	}
	return "`" + strings.Join(r.Prefix, " ") + " …` commands"
}

func bashCommand(input json.RawMessage) string {
	var in struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(input, &in)
	return in.Command
}

// maxShown bounds what a permission ask quotes of a tool's input.
const maxShown = 2000

// DescribeToolUse says what req would do, for a person or a model
// deciding on it: "run `npm install` in ~/src/app", "edit ~/src/app/x.go",
// "fetch https://…". cwd is where the harness runs; paths under home are
// shown with ~. A command or input too long for one line is quoted in a
// fenced block on lines of its own.
func DescribeToolUse(req PermissionRequest, cwd, home string) string {
	var in map[string]any
	_ = json.Unmarshal(req.Input, &in)
	str := func(k string) string { s, _ := in[k].(string); return s }
	path := func(k string) string { return tildePath(str(k), cwd, home) }
	switch req.Tool {
	case "Bash":
		return "run " + quoteCode(str("command")) + " in " + tildePath(cwd, cwd, home)
	case "Edit", "MultiEdit":
		return "edit " + path("file_path")
	case "Write":
		return "write " + path("file_path")
	case "NotebookEdit":
		return "edit the notebook " + path("notebook_path")
	case "Read":
		return "read " + path("file_path")
	case "Glob", "Grep":
		where := cmp.Or(path("path"), tildePath(cwd, cwd, home))
		return "search " + where + " for " + quoteCode(str("pattern"))
	case "WebFetch":
		return "fetch " + str("url")
	case "WebSearch":
		return "search the web for " + quoteCode(str("query"))
	}
	args := clipText(string(req.Input), maxShown)
	if server, tool, ok := strings.Cut(strings.TrimPrefix(req.Tool, "mcp__"), "__"); ok && strings.HasPrefix(req.Tool, "mcp__") {
		return fmt.Sprintf("call the MCP tool %s of server %s with %s", tool, server, quoteCode(args))
	}
	return "use " + req.Tool + " with " + quoteCode(args)
}

// NeedsInputText is the short form of what a worker waits for, for its
// presence status and status: "permission to run `npm install`".
func NeedsInputText(req PermissionRequest, cwd, home string) string {
	d := DescribeToolUse(req, cwd, home)
	if req.Tool == "Bash" {
		d = "run " + quoteCode(oneLine(bashCommand(req.Input), 120))
	}
	return "permission to " + oneLine(d, 200)
}

// quoteCode quotes s as inline code, or as a fenced block when it spans
// lines or holds a backtick.
func quoteCode(s string) string {
	s = clipText(s, maxShown)
	if strings.ContainsAny(s, "`\n") {
		return "\n```\n" + s + "\n```\n"
	}
	return "`" + s + "`"
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return clipText(s, n)
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// tildePath is p (relative to cwd when not absolute) with home shown as ~.
func tildePath(p, cwd, home string) string {
	if p == "" {
		return ""
	}
	if !filepath.IsAbs(p) && cwd != "" {
		p = filepath.Join(cwd, p)
	}
	if home != "" && home != "/" {
		if p == home {
			return "~"
		}
		if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(home, "/")+"/"); ok {
			return "~/" + rest
		}
	}
	return p
}
