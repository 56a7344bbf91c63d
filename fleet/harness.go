package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Coding-agent workers (kinds claude, codex, opencode, pi): the worker shim
// runs one non-interactive turn of the harness for the task, then one per
// batch of inbound intercom messages, resuming the same conversation
// (DESIGN.md "Workers"). This file holds what a turn's command line is made
// of; wake.go runs the turns.

// HarnessKinds are the coding-agent worker kinds.
var HarnessKinds = []string{"claude", "codex", "opencode", "pi"}

// IsHarnessKind reports whether kind is a coding-agent kind.
func IsHarnessKind(kind string) bool { return slices.Contains(HarnessKinds, kind) }

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

// HarnessSpec is what a coding-agent worker's shim needs to run its turns.
// Spawn writes it to the worker's directory (WorkerDir) before the unit
// starts; the shim reads it there.
type HarnessSpec struct {
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
	// PiExtension is the pi-mcp-adapter package directory a pi turn loads
	// with -e; "" when pi loads the adapter itself (installed with
	// `pi install npm:pi-mcp-adapter`).
	PiExtension string `json:"piExtension,omitempty"`
}

// TurnTimeout is the spec's turn bound.
func (s *HarnessSpec) TurnTimeout() time.Duration {
	if s.TurnTimeoutMs <= 0 {
		return DefaultTurnTimeout
	}
	return time.Duration(s.TurnTimeoutMs) * time.Millisecond
}

// WorkerDir holds a coding-agent incarnation's files: spec.json (written
// by Spawn), state.json (the shim's turn record) and the MCP configuration
// files of its turns. 0700, files 0600.
func WorkerDir(p intercom.Paths, id, run string) string {
	return filepath.Join(p.OrchestratorDir(), "workers", id+"-"+run)
}

func specPath(dir string) string { return filepath.Join(dir, "spec.json") }

// WriteHarnessSpec writes spec into dir (created 0700).
func WriteHarnessSpec(dir string, spec *HarnessSpec) error {
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

// ReadHarnessSpec reads the spec Spawn wrote into dir.
func ReadHarnessSpec(dir string) (*HarnessSpec, error) {
	data, err := os.ReadFile(specPath(dir))
	if err != nil {
		return nil, err
	}
	var s HarnessSpec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", specPath(dir), err)
	}
	if !IsHarnessKind(s.Kind) || len(s.Command) == 0 {
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

// Turn is one harness turn to run.
type Turn struct {
	N int // 1-based
	// Session is the harness conversation to resume; "" starts one.
	Session string
	// NewSession is the id a started conversation gets where the harness
	// lets the caller choose it (claude, pi); "" lets the harness choose.
	NewSession string
	Prompt     string
	// Mandate is the worker's standing instructions (system prompt where
	// the harness takes one, else the start of a new conversation).
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
	// Failed: the harness reported an error or exited non-zero; Error says
	// why in one line.
	Failed bool
	Error  string
}

// harness is one kind's command line and output format.
type harness interface {
	// check validates the spawn's model, effort and permission.
	check(model, effort, permission string) error
	// newSession is the id to give a new conversation ("" = harness's).
	newSession(workerID, runID string) string
	command(spec *HarnessSpec, t *Turn) (*TurnCommand, error)
	// parse reads a finished turn's standard output.
	parse(stdout []byte) TurnResult
	// systemPrompt says whether the mandate goes into a system prompt
	// (else it opens every new conversation's first prompt).
	systemPrompt() bool
}

func harnessOf(kind string) (harness, error) {
	switch kind {
	case "claude":
		return claudeHarness{}, nil
	case "codex":
		return codexHarness{}, nil
	case "opencode":
		return opencodeHarness{}, nil
	case "pi":
		return piHarness{}, nil
	}
	return nil, fmt.Errorf("%w %q (want exec, claude, codex, opencode or pi)", ErrUnsupportedKind, kind)
}

// CheckHarnessOptions validates a coding-agent spawn's model, effort and
// permission for kind; the error wraps ErrInvalidRequest (or
// ErrUnsupportedKind).
func CheckHarnessOptions(kind, model, effort, permission string) error {
	h, err := harnessOf(kind)
	if err != nil {
		return err
	}
	if strings.ContainsAny(model, "\x00\n") || strings.HasPrefix(model, "-") {
		return fmt.Errorf("%w: model %q is not a model name", ErrInvalidRequest, model)
	}
	return h.check(model, effort, permission)
}

// BuildTurn returns the command line of turn t of a worker with spec.
func BuildTurn(spec *HarnessSpec, t *Turn) (*TurnCommand, error) {
	h, err := harnessOf(spec.Kind)
	if err != nil {
		return nil, err
	}
	return h.command(spec, t)
}

// ParseTurnOutput reads the standard output of a finished turn of kind.
func ParseTurnOutput(kind string, stdout []byte) TurnResult {
	h, err := harnessOf(kind)
	if err != nil {
		return TurnResult{Failed: true, Error: err.Error()}
	}
	return h.parse(stdout)
}

// NewHarnessSession is the conversation id a new conversation of kind
// gets ("" where the harness chooses it).
func NewHarnessSession(kind, workerID, runID string) string {
	h, err := harnessOf(kind)
	if err != nil {
		return ""
	}
	return h.newSession(workerID, runID)
}

// oneOf checks v against allowed values (or "").
func oneOf(what, v string, allowed ...string) error {
	if v == "" || slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("%w: %s %q is not one of %s", ErrInvalidRequest, what, v, strings.Join(allowed, ", "))
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

// errNoOutput is the error of a turn whose output said nothing usable.
var errNoOutput = errors.New("the harness printed no result")
