package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// fleetActions are the agent_fleet actions this build implements.
var fleetActions = []any{"spawn", "list", "status", "stop", "logs", "adopt", "renew", "forget", "prune", "cleanup", "doctor", "capabilities"}

// fleetArgs are agent_fleet's arguments (DESIGN.md "CLI").
type fleetArgs struct {
	Action      string            `json:"action"`
	ID          string            `json:"id,omitempty"`
	Kind        string            `json:"kind,omitempty"`
	Role        string            `json:"role,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Task        string            `json:"task,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Model       string            `json:"model,omitempty"`
	Effort      string            `json:"effort,omitempty"`
	Permission  string            `json:"permission,omitempty"`
	Lease       string            `json:"lease,omitempty"`
	All         bool              `json:"all,omitempty"`
	Force       bool              `json:"force,omitempty"`
	Acknowledge bool              `json:"acknowledge,omitempty"`
	Execute     bool              `json:"execute,omitempty"`
	Lines       int               `json:"lines,omitempty"`
	TurnTimeout string            `json:"turnTimeout,omitempty"`
}

var fleetSchema = map[string]any{
	"type": "object", "additionalProperties": false, "required": []any{"action"},
	"properties": map[string]any{
		"action":      map[string]any{"type": "string", "enum": fleetActions},
		"id":          map[string]any{"type": "string", "pattern": intercom.SessionIDPattern, "description": "worker id (spawn, status, stop, logs, adopt, forget; renew: omit for all yours)"},
		"kind":        map[string]any{"type": "string", "enum": []any{"exec", "claude", "codex", "opencode", "pi"}, "description": "worker kind (default exec): exec runs command; claude, codex, opencode and pi run that coding agent as a coworker — a turn for task, then one per batch of intercom messages it gets; each turn's final answer reaches you"},
		"role":        map[string]any{"type": "string", "maxLength": 64},
		"cwd":         map[string]any{"type": "string", "description": "working directory (default: this session's)"},
		"task":        map[string]any{"type": "string", "maxLength": 8000, "description": "the task (a coding agent's first turn)"},
		"command":     map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1, "description": "argv of an exec worker (argv[0] is looked up on PATH); for a coding-agent kind, the harness executable to use (and arguments put before every turn's), default the installed one"},
		"env":         map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "extra environment; values are never recorded"},
		"model":       map[string]any{"type": "string", "description": "coding agents: the harness's model"},
		"effort":      map[string]any{"type": "string", "description": "coding agents: reasoning effort (claude low…max, codex low…xhigh, pi off…max, opencode a variant)"},
		"permission":  map[string]any{"type": "string", "enum": append([]string{""}, harness.PermissionValues()...), "description": "coding agents: read-only, workspace-write or full (default: the harness's own configuration); claude also takes its own permission modes, codex danger-full-access"},
		"turnTimeout": map[string]any{"type": "string", "description": "coding agents: end a turn after this long, a Go duration (default 2h)"},
		"lease":       map[string]any{"type": "string", "description": "idle lease as a Go duration, e.g. 30m"},
		"all":         map[string]any{"type": "boolean", "description": "list: every manager's workers; adopt: every orphan (live workers of disconnected agent managers whose lease expired); prune: every manager's records"},
		"force":       map[string]any{"type": "boolean", "description": "adopt even though the worker's manager is connected"},
		"acknowledge": map[string]any{"type": "boolean", "description": "forget/prune delete history: must be true"},
		"execute":     map[string]any{"type": "boolean", "description": "cleanup: act instead of previewing"},
		"lines":       map[string]any{"type": "integer", "minimum": 1, "maximum": 500, "description": "log lines (default 50)"},
	},
}

// addFleetTool adds agent_fleet to the MCP server: workers as systemd user
// services, managed by this session.
func addFleetTool(server *mcp.Server, caller string) {
	mcp.AddTool(server, &mcp.Tool{Name: "agent_fleet", InputSchema: fleetSchema,
		Description: fleetToolDescription()},
		func(ctx context.Context, _ *mcp.CallToolRequest, a fleetArgs) (*mcp.CallToolResult, any, error) {
			return runFleetAction(ctx, caller, a), nil, nil
		})
}

// fleetToolDescription is agent_fleet's description; off Linux it says
// first that only doctor and capabilities work there.
func fleetToolDescription() string {
	d := "Run and manage worker processes as systemd user services that you own: spawn (a command, with a worker id; returns once it runs and is on the intercom as that id), list, status (state, unit, processes, lease), stop (verified: nothing it started survives), logs, adopt (become the manager of a worker whose manager went away; all=true adopts every orphan), renew (a fresh idle lease), forget/prune (delete ended records; acknowledge=true), cleanup (the janitor; execute=true acts), doctor, capabilities. Workers talk to you over the intercom; you are their manager, and a worker's messages to you keep its idle lease alive."
	if hostOS != "linux" {
		d = "Unavailable on this host (" + hostOS + ") except doctor and capabilities: " + fleet.BrokerOnlyNote + ". " + d
	}
	return d
}

// misplaced names the first argument given that a's action does not use:
// an argument that would be ignored must not look applied.
func misplaced(a fleetArgs) string {
	uses := func(actions ...string) bool { return slices.Contains(actions, a.Action) }
	for _, f := range []struct {
		name    string
		given   bool
		actions []string
	}{
		{"kind", a.Kind != "", []string{"spawn"}}, {"role", a.Role != "", []string{"spawn"}}, {"cwd", a.Cwd != "", []string{"spawn"}},
		{"task", a.Task != "", []string{"spawn"}}, {"command", len(a.Command) > 0, []string{"spawn"}}, {"env", len(a.Env) > 0, []string{"spawn"}},
		{"model", a.Model != "", []string{"spawn"}}, {"effort", a.Effort != "", []string{"spawn"}}, {"permission", a.Permission != "", []string{"spawn"}},
		{"lease", a.Lease != "", []string{"spawn"}}, {"turnTimeout", a.TurnTimeout != "", []string{"spawn"}},
		{"all", a.All, []string{"list", "adopt", "prune"}}, {"force", a.Force, []string{"adopt"}},
		{"acknowledge", a.Acknowledge, []string{"forget", "prune"}}, {"execute", a.Execute, []string{"cleanup"}},
		{"lines", a.Lines != 0, []string{"logs"}},
	} {
		if f.given && !uses(f.actions...) {
			return f.name
		}
	}
	return ""
}

func runFleetAction(ctx context.Context, caller string, a fleetArgs) *mcp.CallToolResult {
	if name := misplaced(a); name != "" {
		msg := fmt.Sprintf("agent_fleet %s does not take %s: leave it out (it would be ignored).", a.Action, name)
		return result(msg, map[string]any{"ok": false, "error": msg}, true)
	}
	p, err := intercom.DefaultPaths()
	if err != nil {
		return failure(err)
	}
	switch a.Action {
	case "doctor":
		checks := doctorChecks(ctx, fleet.DoctorConfig{Paths: p})
		var lines []string
		for _, c := range checks {
			line := fmt.Sprintf("%s %s: %s", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
			if c.Fix != "" {
				line += " (fix: " + c.Fix + ")"
			}
			lines = append(lines, line)
		}
		return result(strings.Join(lines, "\n"), map[string]any{"checks": checks}, false)
	case "capabilities":
		c := capabilities(ctx)
		data, _ := json.MarshalIndent(c, "", "  ")
		return result(string(data), c, false)
	}
	if err := requireWorkerPlatform(); err != nil {
		return fleetFailure(err)
	}
	needID := a.Action != "list" && a.Action != "renew" && a.Action != "prune" && a.Action != "cleanup" && !(a.Action == "adopt" && a.All)
	if needID && a.ID == "" {
		msg := fmt.Sprintf("agent_fleet %s needs an id.", a.Action)
		return result(msg, map[string]any{"ok": false, "error": msg}, true)
	}
	env, err := openFleetAs(ctx, p, caller)
	if err != nil {
		return fleetFailure(err)
	}
	defer env.close()
	switch a.Action {
	case "spawn":
		req := fleet.SpawnRequest{ID: a.ID, Kind: a.Kind, Role: a.Role, Cwd: a.Cwd, Task: a.Task, Command: a.Command,
			Model: a.Model, Effort: a.Effort, Permission: a.Permission}
		keys := make([]string, 0, len(a.Env))
		for k := range a.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			req.Env = append(req.Env, k+"="+a.Env[k])
		}
		if a.Lease != "" {
			d, err := time.ParseDuration(a.Lease)
			if err != nil || d <= 0 {
				return result("lease must be a positive duration like 30m.", map[string]any{"ok": false}, true)
			}
			req.Lease = d
		}
		if a.TurnTimeout != "" {
			d, err := time.ParseDuration(a.TurnTimeout)
			if err != nil || d <= 0 {
				return result("turnTimeout must be a positive duration like 45m.", map[string]any{"ok": false}, true)
			}
			req.TurnTimeout = d
		}
		w, err := env.fleet.Spawn(ctx, req)
		if err != nil {
			return fleetFailure(err)
		}
		text := fmt.Sprintf("Spawned worker %s (run %s, unit %s, pid %d, %s). It is on the intercom as %q; you are its manager.",
			w.ID, w.RunID, w.Unit, w.MainPID, w.State, w.ID)
		if harness.IsKind(w.Kind) {
			text += harnessSpawnNote(w)
		}
		return result(text, viewWorker(w), false)
	case "list":
		ws, err := env.fleet.List(ctx, a.All)
		if err != nil {
			return fleetFailure(err)
		}
		views := make([]workerView, len(ws))
		var b strings.Builder
		for i, w := range ws {
			views[i] = viewWorker(w)
			role := ""
			if w.Role != "" {
				role = " " + w.Role + ","
			}
			fmt.Fprintf(&b, "- %s [%s]%s manager %s: %s\n", w.ID, stateText(w), role, w.Manager, workerCommand(w))
		}
		text := strings.TrimSuffix(b.String(), "\n")
		if text == "" {
			text = "No workers."
		}
		return result(text, map[string]any{"workers": views}, false)
	case "status":
		st, err := env.fleet.Status(ctx, a.ID)
		if err != nil {
			return fleetFailure(err)
		}
		var b strings.Builder
		printStatus(&b, st)
		return result(strings.TrimRight(b.String(), "\n"), statusView(st), false)
	case "stop":
		res, err := env.fleet.Stop(ctx, a.ID)
		if err != nil {
			return fleetFailure(err)
		}
		text := fmt.Sprintf("Stopped %s; its cgroup is empty.", a.ID)
		if res.AlreadyEnded {
			text = fmt.Sprintf("Worker %s had already ended (%s).", a.ID, res.Worker.State)
		}
		return result(text, map[string]any{"worker": viewWorker(res.Worker), "killed": res.Killed}, false)
	case "logs":
		lines, err := env.fleet.Logs(ctx, a.ID, a.Lines)
		if err != nil {
			return fleetFailure(err)
		}
		return result(strings.Join(lines, "\n"), map[string]any{"lines": lines}, false)
	case "adopt":
		var ws []*fleet.Worker
		if a.All {
			ws, err = env.fleet.AdoptOrphans(ctx)
		} else {
			var w *fleet.Worker
			if w, err = env.fleet.Adopt(ctx, a.ID, a.Force); err == nil {
				ws = append(ws, w)
			}
		}
		if err != nil {
			return fleetFailure(err)
		}
		var ids []string
		for _, w := range ws {
			ids = append(ids, w.ID)
		}
		text := "No orphaned workers to adopt."
		if len(ids) > 0 {
			text = "You now manage " + strings.Join(ids, ", ") + "; leases renewed. Their messages now reach you."
		}
		return result(text, map[string]any{"workers": viewWorkers(ws)}, false)
	case "renew":
		var ws []*fleet.Worker
		if a.ID != "" {
			var w *fleet.Worker
			if w, err = env.fleet.Renew(ctx, a.ID); err == nil {
				ws = append(ws, w)
			}
		} else {
			ws, err = env.fleet.RenewAll(ctx)
		}
		if err != nil {
			return fleetFailure(err)
		}
		var b strings.Builder
		for _, w := range ws {
			if w.LeaseDeadline.IsZero() {
				fmt.Fprintf(&b, "%s has no idle lease.\n", w.ID)
			} else {
				fmt.Fprintf(&b, "%s renewed until %s.\n", w.ID, w.LeaseDeadline.UTC().Format(time.RFC3339))
			}
		}
		text := strings.TrimSuffix(b.String(), "\n")
		if text == "" {
			text = "You have no live workers."
		}
		return result(text, map[string]any{"workers": viewWorkers(ws)}, false)
	case "forget":
		n, err := env.fleet.Forget(ctx, a.ID, a.Acknowledge)
		if err != nil {
			return fleetFailure(err)
		}
		return result(fmt.Sprintf("Forgot %d ended records of %s.", n, a.ID), map[string]any{"deleted": n}, false)
	case "prune":
		n, err := env.fleet.Prune(ctx, time.Now(), a.All, a.Acknowledge)
		if err != nil {
			return fleetFailure(err)
		}
		return result(fmt.Sprintf("Pruned %d ended records.", n), map[string]any{"deleted": n}, false)
	case "cleanup":
		rep, err := env.fleet.Cleanup(ctx, fleet.CleanupOptions{Execute: a.Execute})
		if errors.Is(err, fleet.ErrCleanupInProgress) {
			return result("A cleanup is in progress in another process.", map[string]any{"skipped": "in progress"}, false)
		}
		if err != nil {
			return fleetFailure(err)
		}
		var b strings.Builder
		for _, act := range rep.Actions {
			state := "would do"
			if act.Done {
				state = "done"
			}
			if act.Error != "" {
				state = "failed: " + act.Error
			}
			fmt.Fprintf(&b, "- %s %s: %s (%s)\n", act.Kind, act.ID, act.Reason, state)
		}
		text := strings.TrimSuffix(b.String(), "\n")
		if text == "" {
			text = "Nothing to clean up."
		}
		return result(text, rep, false)
	}
	return result("unknown action "+a.Action, map[string]any{"ok": false}, true)
}

func fleetFailure(err error) *mcp.CallToolResult {
	return result(err.Error(), map[string]any{"ok": false, "error": err.Error()}, true)
}
