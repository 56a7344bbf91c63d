package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// PiMCPAdapterEnv names the pi-mcp-adapter package directory for pi
// workers when it is installed somewhere agent-fleet does not look.
const PiMCPAdapterEnv = "AGENT_FLEET_PI_MCP_ADAPTER"

// harnessSpec prepares a coding-agent spawn: the harness executable
// (argv[0] of req.Command if given, else the kind's command on the
// caller's PATH), the options checked for the kind, and for pi the MCP
// adapter extension.
func (f *Fleet) harnessSpec(req SpawnRequest, cwd string) (*harness.Spec, error) {
	if err := harness.CheckOptions(req.Kind, req.Model, req.Effort, req.Permission); err != nil {
		if errors.Is(err, harness.ErrInvalidOption) {
			return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		return nil, err
	}
	if req.TurnTimeout < 0 {
		return nil, fmt.Errorf("%w: --turn-timeout must be positive", ErrInvalidRequest)
	}
	if err := checkPermissionWait(req); err != nil {
		return nil, err
	}
	if err := checkClaudeBypassAsRoot(req, os.Geteuid()); err != nil {
		return nil, err
	}
	name := harness.Executables[req.Kind]
	var extra []string
	if len(req.Command) > 0 {
		name, extra = req.Command[0], req.Command[1:]
	}
	exe, err := f.resolveCommand(name, cwd)
	if err != nil {
		if len(req.Command) == 0 {
			return nil, fmt.Errorf("%w: %s is not installed (not on your PATH)%s; or name its executable after -- (agent-fleet spawn --kind %s … -- /path/to/%s)",
				ErrCommandNotFound, name, installHint[req.Kind], req.Kind, name)
		}
		return nil, err
	}
	spec := &harness.Spec{
		Kind: req.Kind, Command: append([]string{exe}, extra...), Task: req.Task, Role: req.Role, Cwd: cwd,
		Model: req.Model, Effort: req.Effort, Permission: req.Permission, TurnTimeoutMs: req.TurnTimeout.Milliseconds(),
		PermissionWaitMs: req.PermissionWait.Milliseconds(),
	}
	b := req.Budget.apply(Budget{})
	spec.BudgetUSD, spec.BudgetTokens = b.USD, b.Tokens
	if req.Kind == "pi" {
		spec.PiExtension, err = findPiMCPAdapter(exe, cwd, f.cfg.Paths.AgentDir, f.cfg.CallerEnv(PiMCPAdapterEnv))
		if err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// checkClaudeBypassAsRoot refuses a claude worker with permission full
// (bypassPermissions) that would run as root (euid 0: the user manager
// runs the caller's units as the caller): Claude Code refuses that mode as
// root outside a sandbox it knows of (IS_SANDBOX=1 or
// CLAUDE_CODE_BUBBLEWRAP in its environment), so every turn would fail.
func checkClaudeBypassAsRoot(req SpawnRequest, euid int) error {
	if req.Kind != "claude" || euid != 0 || (req.Permission != harness.PermissionFull && req.Permission != "bypassPermissions") {
		return nil
	}
	for _, kv := range req.Env {
		if kv == "IS_SANDBOX=1" || strings.HasPrefix(kv, "CLAUDE_CODE_BUBBLEWRAP=") {
			return nil
		}
	}
	return fmt.Errorf("%w: Claude Code refuses --permission %s (bypassPermissions) as root, so every turn would fail: "+
		"spawn it as another user, with another permission, or, in a sandbox (a container), with --env IS_SANDBOX=1", ErrInvalidRequest, req.Permission)
}

// checkPermissionWait refuses a permission wait that would not apply:
// out of range, or for a worker whose prompts are not relayed.
func checkPermissionWait(req SpawnRequest) error {
	switch w := req.PermissionWait; {
	case w == 0:
		return nil
	case w < time.Second || w > harness.MaxPermissionWait:
		return fmt.Errorf("%w: --permission-wait must be between 1s and %s (the broker's ask TTL), not %s", ErrInvalidRequest, harness.MaxPermissionWait, w)
	case !harness.RelaysPermissions(req.Kind, req.Permission) && req.Kind == "claude":
		return fmt.Errorf("%w: --permission-wait has no use with permission %s: nothing prompts (use the default, workspace-write or one of Claude Code's prompting modes)", ErrInvalidRequest, req.Permission)
	case !harness.RelaysPermissions(req.Kind, req.Permission):
		return fmt.Errorf("%w: --permission-wait is for claude workers and codex workers with permission workspace-write: a %s worker with permission %q has no permission prompt to relay", ErrInvalidRequest, req.Kind, req.Permission)
	}
	return nil
}

var installHint = map[string]string{
	"claude":   ": npm install -g @anthropic-ai/claude-code",
	"codex":    ": npm install -g @openai/codex",
	"opencode": ": npm install -g opencode-ai",
	"pi":       ": npm install -g @earendil-works/pi-coding-agent",
}

// errNoPiAdapter: a pi worker cannot reach agent-fleet's MCP server.
var errNoPiAdapter = errors.New("pi workers reach agent-fleet's MCP server through the pi-mcp-adapter extension, which was not found: " +
	"install it with `pi install npm:pi-mcp-adapter` (or `npm install -g pi-mcp-adapter` beside pi), or set " + PiMCPAdapterEnv + " to its directory")

// findPiMCPAdapter finds pi-mcp-adapter for a pi worker. It returns ""
// when pi loads the adapter itself (a package of the user's or the
// project's Pi settings), else the package directory to load with -e:
// override (AGENT_FLEET_PI_MCP_ADAPTER), or the adapter installed beside
// pi's own package (the same node_modules).
func findPiMCPAdapter(piExe, cwd, agentDir, override string) (string, error) {
	if override != "" {
		if !isAdapterDir(override) {
			return "", fmt.Errorf("%w: %s=%s is not the pi-mcp-adapter package directory", ErrCommandNotFound, PiMCPAdapterEnv, override)
		}
		return filepath.Clean(override), nil
	}
	for _, settings := range []string{filepath.Join(agentDir, "settings.json"), filepath.Join(cwd, ".pi", "settings.json")} {
		if piSettingsLoadAdapter(settings) {
			return "", nil
		}
	}
	real, err := filepath.EvalSymlinks(piExe)
	if err != nil {
		real = piExe
	}
	for dir := filepath.Dir(real); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		if filepath.Base(dir) == "node_modules" {
			if cand := filepath.Join(dir, "pi-mcp-adapter"); isAdapterDir(cand) {
				return cand, nil
			}
		}
		if cand := filepath.Join(dir, "lib", "node_modules", "pi-mcp-adapter"); isAdapterDir(cand) {
			return cand, nil // a bin/ directory of an npm prefix
		}
	}
	return "", fmt.Errorf("%w: %w", ErrCommandNotFound, errNoPiAdapter)
}

func isAdapterDir(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return false
	}
	var pkg struct {
		Name string `json:"name"`
	}
	return json.Unmarshal(data, &pkg) == nil && pkg.Name == "pi-mcp-adapter"
}

// piSettingsLoadAdapter reports whether a Pi settings file lists the
// adapter among its packages ("npm:pi-mcp-adapter", or {source: …}).
func piSettingsLoadAdapter(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var s struct {
		Packages []json.RawMessage `json:"packages"`
	}
	if json.Unmarshal(data, &s) != nil {
		return false
	}
	for _, raw := range s.Packages {
		var src string
		if json.Unmarshal(raw, &src) != nil {
			var obj struct {
				Source string `json:"source"`
			}
			_ = json.Unmarshal(raw, &obj)
			src = obj.Source
		}
		if strings.Contains(src, "pi-mcp-adapter") {
			return true
		}
	}
	return false
}

// tidyWorkerDirs removes the worker directories (WorkerDir), untouched for
// the retention period, of incarnations the registry no longer has.
func (f *Fleet) tidyWorkerDirs(ctx context.Context, execute bool) []CleanupAction {
	root := filepath.Join(f.cfg.Paths.OrchestratorDir(), "workers")
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []CleanupAction
	for _, e := range entries {
		i := strings.LastIndexByte(e.Name(), '-')
		if !e.IsDir() || i <= 0 {
			continue
		}
		id, run := e.Name()[:i], e.Name()[i+1:]
		if ValidID(id) != nil || ValidRunID(run) != nil {
			continue
		}
		path := filepath.Join(root, e.Name())
		fi, err := os.Stat(harness.StatePath(path))
		if err != nil {
			fi, err = e.Info()
		}
		if err != nil || !fi.ModTime().Before(f.cfg.Now().Add(-f.cfg.Leases.Retention)) {
			continue
		}
		if _, err := f.cfg.Registry.GetRun(ctx, id, run); !errors.Is(err, ErrNotFound) {
			continue
		}
		a := CleanupAction{Kind: "remove-file", ID: id, RunID: run, Reason: path + " belongs to a record that is gone"}
		if execute {
			a.Done = os.RemoveAll(path) == nil
		}
		out = append(out, a)
	}
	return out
}
