package verbs

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
)

// RemoteActions are the actions that run on another host with Host
// (fleet/remote).
var RemoteActions = []string{"spawn", "status", "stop", "logs", "adopt", "wait"}

// checkHost refuses a host for an action that does not run on one, and
// a host that is no node name.
func (a *Args) checkHost() error {
	if a.Host == "" {
		return nil
	}
	if !slices.Contains(RemoteActions, a.Action) {
		return factory.Usagef("%s runs on this host only (a host is for %s)", a.Action, strings.Join(RemoteActions, ", "))
	}
	if !remote.ValidHost(a.Host) {
		return factory.Usagef("host %q is not a node name: lowercase letters, digits and -, at most 63", a.Host)
	}
	switch {
	case a.Action == "stop" && (a.All || len(a.IDs) > 0):
		return factory.Usagef("stop on another host takes one worker id")
	case a.Action == "adopt" && a.All:
		return factory.Usagef("adopt on another host takes one worker id")
	}
	return nil
}

// RunRemote performs a on host a.Host for caller, over f's connection to
// the hosts this one is joined to: the same reports as Run, naming the
// host (output.HostReport). Errors are the host's, as they would be here
// (remote.Error), or of reaching it: factory.ErrNoNode,
// remote.ErrUnknownHost, remote.ErrHostUnreachable.
func RunRemote(ctx context.Context, f *factory.Factory, caller string, a Args) (output.Report, error) {
	if err := a.checkHost(); err != nil {
		return nil, err
	}
	c, closeC, err := f.RemoteFleet(ctx, caller)
	if err != nil {
		return nil, err
	}
	defer closeC()
	return runHostReport(ctx, c, a)
}

// runHostReport is runOn's report naming its host.
func runHostReport(ctx context.Context, c *remote.Client, a Args) (output.Report, error) {
	rep, err := runOn(ctx, c, a)
	if rep != nil {
		rep = output.HostReport{Host: a.Host, R: rep}
	}
	return rep, err
}

func runOn(ctx context.Context, c *remote.Client, a Args) (output.Report, error) {
	h := a.Host
	switch a.Action {
	case "spawn":
		req := a.Spawn
		req.ID, req.Budget = a.ID, a.Budget
		w, err := c.Spawn(ctx, h, req)
		if w == nil {
			return nil, err
		}
		return output.SpawnReport{W: w}, err
	case "status":
		st, err := c.Status(ctx, h, a.ID)
		if err != nil {
			return nil, err
		}
		return output.StatusReport{St: st}, nil
	case "stop":
		res, err := c.Stop(ctx, h, a.ID, fleet.StopOptions{Grace: a.Timeout, Kill: a.Kill})
		if res == nil {
			return nil, err
		}
		return output.StopReport{Res: res}, err
	case "logs":
		lines, err := c.Logs(ctx, h, a.ID, a.LogQuery())
		if err != nil {
			return nil, err
		}
		return output.LogsReport{ID: a.ID, Lines: lines, Timestamps: a.Timestamps}, nil
	case "adopt":
		w, err := c.Adopt(ctx, h, a.ID, a.Force)
		if err != nil {
			return nil, err
		}
		return output.WorkersReport{Verb: "adopt", WS: []*fleet.Worker{w}}, nil
	case "wait":
		ids := a.IDs
		if a.ID != "" {
			ids = []string{a.ID}
		}
		ws, err := c.Wait(ctx, h, ids, a.Any, a.Timeout)
		if ws == nil {
			return nil, err
		}
		return output.WaitReport{WS: ws, Timeout: a.Timeout, TimedOut: errors.Is(err, fleet.ErrWaitTimeout)}, err
	}
	return nil, factory.Usagef("%s runs on this host only", a.Action)
}

// Federate extends what Run did on this host (rep, err) to the hosts this
// one is joined to, when it has a node configuration: list --all gets
// every other host's workers (output.HostsList), and status, stop, logs
// or adopt of an id this host does not know runs on the host whose
// last-known records have it. Without a node configuration, or for
// anything else, rep and err are returned as they are.
func Federate(ctx context.Context, f *factory.Factory, caller string, a Args, rep output.Report, err error) (output.Report, error) {
	if a.Host != "" || !f.HasNode() {
		return rep, err
	}
	switch {
	case a.Action == "list" && a.All && err == nil:
		wr, ok := rep.(output.WorkersReport)
		if !ok {
			return rep, err
		}
		wr.Hosts = listHosts(ctx, f, caller)
		return wr, nil
	case errors.Is(err, fleet.ErrNotFound):
		if erep, eerr, ok := elsewhere(ctx, f, caller, a); ok {
			return erep, eerr
		}
	}
	return rep, err
}

// Elsewhere is Federate for a verb whose fleet could not open here
// (openErr: no user manager on this host, say): status, stop, logs or
// adopt of an id the other hosts' records have runs on its host. Without
// a node configuration, or an id no host has, it is openErr.
func Elsewhere(ctx context.Context, f *factory.Factory, caller string, a Args, openErr error) (output.Report, error) {
	if a.Host != "" || !f.HasNode() {
		return nil, openErr
	}
	if rep, err, ok := elsewhere(ctx, f, caller, a); ok {
		return rep, err
	}
	return nil, openErr
}

// elsewhere runs a on the host whose last-known records have a.ID, for
// the verbs that name one worker; ok is false when a is not such a verb
// or no other host has the id (this host's answer then stands).
func elsewhere(ctx context.Context, f *factory.Factory, caller string, a Args) (output.Report, error, bool) {
	if a.ID == "" || !slices.Contains([]string{"status", "stop", "logs", "adopt"}, a.Action) {
		return nil, nil, false
	}
	// One connection serves the lookup and the verb.
	c, closeC, err := f.RemoteFleet(ctx, caller)
	if err != nil {
		return nil, nil, false
	}
	defer closeC()
	hosts, err := c.Locate(ctx, a.ID)
	if err != nil || len(hosts) == 0 {
		return nil, nil, false
	}
	a.Host = hosts[0] // one with it live first
	if err := a.checkHost(); err != nil {
		return nil, err, true
	}
	rep, err := runHostReport(ctx, c, a)
	return rep, err, true
}

// listHosts asks every other host for its workers.
func listHosts(ctx context.Context, f *factory.Factory, caller string) *output.HostsList {
	c, closeC, err := f.RemoteFleet(ctx, caller)
	if err != nil {
		return &output.HostsList{Err: err}
	}
	defer closeC()
	ls, err := c.ListAll(ctx)
	return &output.HostsList{Self: c.Transport.Self(), Listing: ls, Err: err}
}
