// Package harness knows the coding-agent worker kinds (claude, codex,
// opencode, pi): the model, effort and permission each takes, the command
// line of one non-interactive turn, the prompts, what a turn's output says,
// and the files a worker's spec and turns are kept in. It is pure: it starts
// no process and talks to no service. fleet spawns coding-agent workers
// with it; fleet/shim runs their turns, one for the task and then one per
// batch of inbound intercom messages, resuming the same conversation
// (docs/architecture.md "Workers").
package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Kinds are the coding-agent worker kinds.
var Kinds = []string{"claude", "codex", "opencode", "pi"}

// IsKind reports whether kind is a coding-agent kind.
func IsKind(kind string) bool { return slices.Contains(Kinds, kind) }

// Executables are the commands of the kinds, looked up on the caller's PATH
// when a spawn names none.
var Executables = map[string]string{"claude": "claude", "codex": "codex", "opencode": "opencode", "pi": "pi"}

// MCPServerName is the name of agent-fleet's MCP server in every harness
// configuration a worker turn gets (Claude's tools are then
// mcp__agent-fleet__intercom_send, …).
const MCPServerName = "agent-fleet"

// Permission modes a spawn may ask for, the same words for every kind. A
// worker never runs with more than the spawn asked for: "" (the harness's
// own configured default) adds no flag at all.
const (
	PermissionDefault        = ""
	PermissionReadOnly       = "read-only"       // read and search; no edits, no commands
	PermissionWorkspaceWrite = "workspace-write" // edits inside the working directory
	PermissionFull           = "full"            // everything the harness can do, unprompted
)

// DefaultTurnTimeout bounds one harness turn when the spawn names none.
const DefaultTurnTimeout = 2 * time.Hour

// Spec is what a coding-agent worker's shim needs to run its turns. Spawn
// writes it to the worker's directory before the unit starts (WriteSpec);
// the shim reads it there (ReadSpec).
type Spec struct {
	Kind string `json:"kind"`
	// Command is the harness executable (absolute) and extra arguments
	// placed before every turn's own.
	Command    []string `json:"command"`
	Task       string   `json:"task,omitempty"`
	Role       string   `json:"role,omitempty"`
	Cwd        string   `json:"cwd"`
	Model      string   `json:"model,omitempty"`
	Effort     string   `json:"effort,omitempty"`
	Permission string   `json:"permission,omitempty"`
	// TurnTimeoutMs bounds one turn (ms); 0 is DefaultTurnTimeout.
	TurnTimeoutMs int64 `json:"turnTimeoutMs,omitempty"`
	// PermissionWaitMs is how long a permission prompt relayed to the
	// manager waits for its answer (ms); 0 is DefaultPermissionWait.
	PermissionWaitMs int64 `json:"permissionWaitMs,omitempty"`
	// BudgetUSD and BudgetTokens are the budget the worker was spawned
	// with (0: none), for when the registry cannot be read; the registry's
	// (renew changes it) is the authority.
	BudgetUSD    float64 `json:"budgetUsd,omitempty"`
	BudgetTokens int64   `json:"budgetTokens,omitempty"`
	// PiExtension is the pi-mcp-adapter package directory a pi turn loads
	// with -e; "" when pi loads the adapter itself (installed with
	// `pi install npm:pi-mcp-adapter`).
	PiExtension string `json:"piExtension,omitempty"`
}

// TurnTimeout is the spec's turn bound.
func (s *Spec) TurnTimeout() time.Duration {
	if s.TurnTimeoutMs <= 0 {
		return DefaultTurnTimeout
	}
	return time.Duration(s.TurnTimeoutMs) * time.Millisecond
}

func specPath(dir string) string { return filepath.Join(dir, "spec.json") }

// WriteSpec writes spec as spec.json into the worker directory dir
// (created 0700 with its parent, the file 0600, replaced atomically).
func WriteSpec(dir string, spec *Spec) error {
	if err := intercom.EnsureDir(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := intercom.EnsureDir(dir); err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return intercom.WriteFileAtomic(specPath(dir), data)
}

// ReadSpec reads the spec WriteSpec wrote into dir. A file that is not a
// coding-agent spec (unknown kind, no command) is an error naming it.
func ReadSpec(dir string) (*Spec, error) {
	data, err := os.ReadFile(specPath(dir))
	if err != nil {
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", specPath(dir), err)
	}
	if !IsKind(s.Kind) || len(s.Command) == 0 {
		return nil, fmt.Errorf("%s: not a coding-agent worker spec", specPath(dir))
	}
	return &s, nil
}

// MCPServer is how a turn's harness starts agent-fleet's MCP server: the
// agent-fleet executable with `mcp --harness KIND --worker` and the
// worker's identity in its environment, so that its intercom tools act as
// the worker through the shim's holder.
type MCPServer struct {
	Command string
	Args    []string
	Env     map[string]string
}

// WorkerMCPServer is the agent-fleet MCP server entry of a coding-agent
// worker's turns: agentFleet (the agent-fleet executable, and any argv
// prefix) with `mcp --harness KIND --worker`, and in its environment the
// worker's identity (every AGENT_INTERCOM_ variable) and agent directory
// from env (so that it acts as the worker through the shim's holder even
// where the harness passes a server no environment of its own, as Codex
// does) plus extra ("K=V" entries, all kept).
func WorkerMCPServer(agentFleet []string, kind string, env, extra []string) MCPServer {
	m := MCPServer{Command: agentFleet[0], Args: append(append([]string(nil), agentFleet[1:]...), "mcp", "--harness", kind, "--worker"),
		Env: map[string]string{}}
	for _, kv := range append(append([]string(nil), env...), extra...) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if strings.HasPrefix(k, "AGENT_INTERCOM_") || k == intercom.AgentDirEnv || containsKey(extra, k) {
			m.Env[k] = v
		}
	}
	return m
}

func containsKey(env []string, key string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == key {
			return true
		}
	}
	return false
}

// Turn is one harness turn to run.
type Turn struct {
	N int // 1-based
	// WorkerID names the worker (OpenCode titles its conversation with it).
	WorkerID string
	// Session is the harness conversation to resume; "" starts one.
	Session string
	// NewSession is the id a started conversation gets where the harness
	// lets the caller choose it (claude, pi: NewSession); "" lets the
	// harness choose.
	NewSession string
	Prompt     string
	// Mandate is the worker's standing instructions (system prompt where
	// the harness takes one, else the start of a new conversation:
	// TakesSystemPrompt).
	Mandate string
	MCP     MCPServer
	// Dir is where the turn's configuration files go (the worker dir).
	Dir string
}

// TurnCommand is a turn's process: argv, environment added to the
// worker's, standard input, and files to write first (path → content).
type TurnCommand struct {
	Argv  []string
	Env   []string
	Stdin string
	Files map[string][]byte
}

// TurnResult is what a turn's output says.
type TurnResult struct {
	// Session is the conversation id the harness reported ("" if none).
	Session string
	// Final is the turn's final answer text.
	Final string
	// Failed: the harness reported an error or printed no result; Error
	// says why in one line (ErrNoOutput's text for no result).
	Failed bool
	Error  string
	// Usage is what the turn's model calls consumed as the output reports
	// it; nil when it reports nothing. With UsageCumulative the figures
	// are the conversation's running totals, which Claude Code and Codex
	// carry across a resume: TurnUsage takes the turn's share.
	Usage           *Usage
	UsageCumulative bool
	// RateLimit is set (with Failed) when the turn ended on the provider's
	// rate limit or overload after the harness's own retries: not the
	// worker's failure, and the conversation can go on after the reset.
	RateLimit *RateLimit
}

// cli is one kind's command line and output format.
type cli interface {
	// check validates the spawn's effort and permission.
	check(effort, permission string) error
	// newSession is the id to give a new conversation ("" = harness's).
	newSession(workerID, runID string) string
	command(spec *Spec, t *Turn) (*TurnCommand, error)
	// parse reads a finished turn's standard output; now resolves the
	// relative reset times of rate limits.
	parse(stdout []byte, now time.Time) TurnResult
	// systemPrompt says whether the mandate goes into a system prompt
	// (else it opens every new conversation's first prompt).
	systemPrompt() bool
}

func cliOf(kind string) (cli, error) {
	switch kind {
	case "claude":
		return claudeCLI{}, nil
	case "codex":
		return codexCLI{}, nil
	case "opencode":
		return opencodeCLI{}, nil
	case "pi":
		return piCLI{}, nil
	}
	return nil, fmt.Errorf("%w %q (want exec, claude, codex, opencode or pi)", ErrUnsupportedKind, kind)
}

// CheckOptions validates a coding-agent spawn's model, effort and
// permission for kind. Errors: ErrInvalidOption, ErrUnsupportedKind.
func CheckOptions(kind, model, effort, permission string) error {
	c, err := cliOf(kind)
	if err != nil {
		return err
	}
	if strings.ContainsAny(model, "\x00\n") || strings.HasPrefix(model, "-") {
		return invalidOption("model %q is not a model name", model)
	}
	return c.check(effort, permission)
}

// BuildTurn returns the command line of turn t of a worker with spec.
// Errors: ErrUnsupportedKind.
func BuildTurn(spec *Spec, t *Turn) (*TurnCommand, error) {
	c, err := cliOf(spec.Kind)
	if err != nil {
		return nil, err
	}
	return c.command(spec, t)
}

// ParseTurnOutput reads the standard output of a finished turn of kind,
// resolving relative rate-limit resets against the current time.
func ParseTurnOutput(kind string, stdout []byte) TurnResult {
	return ParseTurnOutputAt(kind, stdout, time.Now())
}

// ParseTurnOutputAt is ParseTurnOutput with the time the turn ended: a
// reset the output gives as "in 30s" or as a local time of day is resolved
// against now (and now's location).
func ParseTurnOutputAt(kind string, stdout []byte, now time.Time) TurnResult {
	c, err := cliOf(kind)
	if err != nil {
		return TurnResult{Failed: true, Error: err.Error()}
	}
	return c.parse(stdout, now)
}

// NewSession is the conversation id a new conversation of kind gets (""
// where the harness chooses it).
func NewSession(kind, workerID, runID string) string {
	c, err := cliOf(kind)
	if err != nil {
		return ""
	}
	return c.newSession(workerID, runID)
}

// TakesSystemPrompt reports whether kind takes the mandate as a system
// prompt; where it does not, the mandate opens every new conversation's
// first prompt.
func TakesSystemPrompt(kind string) bool {
	c, err := cliOf(kind)
	return err == nil && c.systemPrompt()
}

// oneOf checks v against allowed values (or "").
func oneOf(what, v string, allowed ...string) error {
	if v == "" || slices.Contains(allowed, v) {
		return nil
	}
	return invalidOption("%s %q is not one of %s", what, v, strings.Join(allowed, ", "))
}

// jsonLines calls fn for every line of out that is a JSON object.
func jsonLines(out []byte, fn func(line []byte)) {
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "{") && json.Valid([]byte(line)) {
			fn([]byte(line))
		}
	}
}

// mcpServerJSON is the usual JSON form of a stdio server entry.
func mcpServerJSON(m MCPServer) map[string]any {
	args := m.Args
	if args == nil {
		args = []string{}
	}
	return map[string]any{"type": "stdio", "command": m.Command, "args": args, "env": envObject(m.Env)}
}

func envObject(env map[string]string) map[string]string {
	if env == nil {
		return map[string]string{}
	}
	return env
}
