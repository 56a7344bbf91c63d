package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// fleetActions are the agent_fleet actions this build implements.
var fleetActions = []any{"spawn", "list", "status", "stop", "logs", "doctor", "capabilities"}

// fleetArgs are agent_fleet's arguments (DESIGN.md "CLI").
type fleetArgs struct {
	Action     string            `json:"action"`
	ID         string            `json:"id,omitempty"`
	Kind       string            `json:"kind,omitempty"`
	Role       string            `json:"role,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Task       string            `json:"task,omitempty"`
	Command    []string          `json:"command,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Model      string            `json:"model,omitempty"`
	Effort     string            `json:"effort,omitempty"`
	Permission string            `json:"permission,omitempty"`
	Lease      string            `json:"lease,omitempty"`
	All        bool              `json:"all,omitempty"`
	Lines      int               `json:"lines,omitempty"`
}

var fleetSchema = map[string]any{
	"type": "object", "additionalProperties": false, "required": []any{"action"},
	"properties": map[string]any{
		"action":     map[string]any{"type": "string", "enum": fleetActions},
		"id":         map[string]any{"type": "string", "pattern": intercom.SessionIDPattern, "description": "worker id (spawn, status, stop, logs)"},
		"kind":       map[string]any{"type": "string", "enum": []any{"exec"}, "description": "worker kind (default exec)"},
		"role":       map[string]any{"type": "string", "maxLength": 64},
		"cwd":        map[string]any{"type": "string", "description": "working directory (default: this session's)"},
		"task":       map[string]any{"type": "string", "maxLength": 8000},
		"command":    map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1, "description": "argv of an exec worker; argv[0] is looked up on PATH"},
		"env":        map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "extra environment; values are never recorded"},
		"model":      map[string]any{"type": "string"},
		"effort":     map[string]any{"type": "string"},
		"permission": map[string]any{"type": "string"},
		"lease":      map[string]any{"type": "string", "description": "idle lease as a Go duration, e.g. 30m"},
		"all":        map[string]any{"type": "boolean", "description": "list every manager's workers"},
		"lines":      map[string]any{"type": "integer", "minimum": 1, "maximum": 500, "description": "log lines (default 50)"},
	},
}

// addFleetTool adds agent_fleet to the MCP server: workers as systemd user
// services, managed by this session.
func addFleetTool(server *mcp.Server, caller string) {
	mcp.AddTool(server, &mcp.Tool{Name: "agent_fleet", InputSchema: fleetSchema,
		Description: "Run and manage worker processes as systemd user services that you own: spawn (a command, with a worker id; returns once it runs and is on the intercom as that id), list, status (state, unit, processes), stop (verified: nothing it started survives), logs, doctor, capabilities. Workers talk to you over the intercom; you are their manager."},
		func(ctx context.Context, _ *mcp.CallToolRequest, a fleetArgs) (*mcp.CallToolResult, any, error) {
			return runFleetAction(ctx, caller, a), nil, nil
		})
}

func runFleetAction(ctx context.Context, caller string, a fleetArgs) *mcp.CallToolResult {
	p, err := intercom.DefaultPaths()
	if err != nil {
		return failure(err)
	}
	switch a.Action {
	case "doctor":
		checks := fleet.Doctor(ctx, fleet.DoctorConfig{Paths: p, Journal: journaldRuns()})
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
		c := fleet.ProbeCapabilities(ctx, journaldRuns())
		data, _ := json.MarshalIndent(c, "", "  ")
		return result(string(data), c, false)
	}
	needID := a.Action != "list"
	if needID && a.ID == "" {
		return result(fmt.Sprintf("agent_fleet %s needs an id.", a.Action), map[string]any{"ok": false}, true)
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
		w, err := env.fleet.Spawn(ctx, req)
		if err != nil {
			return fleetFailure(err)
		}
		return result(fmt.Sprintf("Spawned worker %s (run %s, unit %s, pid %d, %s). It is on the intercom as %q; you are its manager.",
			w.ID, w.RunID, w.Unit, w.MainPID, w.State, w.ID), viewWorker(w), false)
	case "list":
		ws, err := env.fleet.List(ctx, a.All)
		if err != nil {
			return fleetFailure(err)
		}
		views := make([]workerView, len(ws))
		var b strings.Builder
		for i, w := range ws {
			views[i] = viewWorker(w)
			state := string(w.State)
			if e := exitText(w); e != "" {
				state += " (" + e + ")"
			}
			fmt.Fprintf(&b, "- %s [%s] %s, manager %s: %s\n", w.ID, state, w.Role, w.Manager, shortCommand(w.Command))
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
		v := statusView(st)
		data, _ := json.MarshalIndent(v, "", "  ")
		return result(string(data), v, false)
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
	}
	return result("unknown action "+a.Action, map[string]any{"ok": false}, true)
}

func fleetFailure(err error) *mcp.CallToolResult {
	return result(err.Error(), map[string]any{"ok": false, "error": err.Error()}, true)
}
