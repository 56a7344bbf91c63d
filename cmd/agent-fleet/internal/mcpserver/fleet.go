package mcpserver

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
)

// addFleetTool adds agent_fleet: workers as systemd user services, managed
// by caller. It runs the CLI's fleet verbs (package verbs).
func addFleetTool(server *mcp.Server, f *factory.Factory, caller string) {
	// It starts, stops and forgets workers: destructive, never read-only.
	ann := &mcp.ToolAnnotations{DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(true)}
	mcp.AddTool(server, &mcp.Tool{Name: "agent_fleet", InputSchema: verbs.Schema(), Description: fleetToolDescription(f), Annotations: ann},
		func(ctx context.Context, _ *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, any, error) {
			return FleetAction(ctx, f, caller, args), nil, nil
		})
}

// fleetToolDescription is agent_fleet's description; off Linux it says
// first that only doctor and capabilities work there.
func fleetToolDescription(f *factory.Factory) string {
	d := "Run and manage worker processes as systemd user services that you own: spawn (a command, with a worker id; returns once it runs and is on the intercom as that id; memory, cpu and tasks set resource limits; worktree=true or branch gives it a git worktree and branch of its own, so writers in one repository never collide), list, status (state, unit, processes, lease), stop (verified: nothing it started survives; ids for several at once, all=true for every live worker of yours, timeout for the SIGTERM→SIGKILL grace, kill=true for SIGKILL at once), pause/resume (freeze a worker's processes and thaw them; its idle lease is held meanwhile, and it cannot read or answer messages until resumed), wait (until the workers named by id or ids have ended, any=true for the first; returns how each ended, or after timeout, default 45s, what still runs: call again to wait longer), logs, usage (tokens and cost of coding-agent workers' turns: since, by worker|manager|kind), adopt (become the manager of a worker whose manager went away; all=true adopts every orphan), renew (a fresh idle lease; budgetUsd/budgetTokens set a coding agent's budget), forget/prune (delete ended records; acknowledge=true; a worktree goes only once its work is committed and merged or pushed, else it is kept and named), cleanup (the janitor; execute=true acts), doctor, capabilities. Workers talk to you over the intercom; you are their manager, and a worker's messages to you keep its idle lease alive. A coding-agent worker spawned with budgetUsd or budgetTokens starts no turn past its budget (it tells you, and keeps your messages until renew raises it); one that hits the provider's rate limit pauses and resumes by itself."
	if f.GOOS != "linux" {
		d = "Unavailable on this host (" + f.GOOS + ") except doctor and capabilities: " + fleet.BrokerOnlyNote + ". " + d
	}
	return d
}

// FleetAction runs one agent_fleet call (its decoded arguments) as caller:
// the same verbs.Run as the CLI verb, the same report.
func FleetAction(ctx context.Context, f *factory.Factory, caller string, args map[string]any) *mcp.CallToolResult {
	a, err := verbs.Decode(args)
	if err != nil {
		return fleetFailure(nil, err)
	}
	if !verbs.NeedsFleet(a.Action) {
		rep, err := verbs.Host(ctx, f, a)
		return report(rep, err)
	}
	if err := a.Check(); err != nil {
		return fleetFailure(nil, err)
	}
	if a.Host != "" { // runs there: this host needs no user manager
		rep, err := verbs.RunRemote(ctx, f, caller, a)
		return report(rep, err)
	}
	if err := f.RequireWorkerPlatform(); err != nil {
		return fleetFailure(nil, err)
	}
	if a.Action == "wait" && a.Timeout == 0 {
		a.Timeout = verbs.ToolWaitTimeout // within the client's tool-call timeout
	}
	p, err := f.Paths()
	if err != nil {
		return fleetFailure(nil, err)
	}
	open := f.FleetAs
	if verbs.ReadOnly(a.Action) {
		open = f.ReadFleetAs // records and logs need no user manager
	}
	fe, err := open(ctx, p, caller)
	if err != nil {
		if rep, err := verbs.Elsewhere(ctx, f, caller, a, err); rep != nil {
			return report(rep, err)
		}
		return fleetFailure(nil, err)
	}
	defer fe.Close()
	rep, err := verbs.Run(ctx, fe, a)
	rep, err = verbs.Federate(ctx, f, caller, a, rep, err)
	var ended *fleet.WaitError
	switch {
	case errors.As(err, &ended) && !ended.TimedOut:
		err = nil // workers that ended badly are news, not a failed call
	case errors.As(err, &ended):
		r := report(rep, err)
		if t, ok := r.Content[0].(*mcp.TextContent); ok {
			t.Text += `; call agent_fleet {action: "wait"} again to wait on`
		}
		return r
	}
	return report(rep, err)
}

// report is a verb's outcome as a tool result.
func report(rep output.Report, err error) *mcp.CallToolResult {
	if err != nil {
		return fleetFailure(rep, err)
	}
	return result(rep.Text(output.Tool), rep.Structured(), false)
}

// fleetFailure is a failed fleet action: the error's text, and in
// structuredContent ok false, the error and what the report has (a failed
// spawn's record, a stop's survivors).
func fleetFailure(rep output.Report, err error) *mcp.CallToolResult {
	structured := output.Failure(err)
	if rep != nil {
		structured["result"] = rep.Structured()
	}
	// The text names the calls an agent can make; structuredContent stays
	// the CLI's --json error object (json_contract_test.go).
	text := toolHints(err.Error())
	if several, ok := output.Local(rep).(output.StopsReport); ok {
		// The error only counts the failures; each worker's line says
		// what happened to it.
		text = several.Text(output.Tool) + "\n" + text + "."
	}
	return result(text, structured, true)
}
