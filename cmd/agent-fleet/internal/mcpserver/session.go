package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// workerHolderWait is how long a worker's turn waits for its shim's
// holder; the shim serves it before the first turn starts.
const workerHolderWait = 2 * time.Second

// mcpSession is the session behind an MCP server.
type mcpSession struct {
	ops  intercom.Ops
	id   string // the session id, the manager of what it spawns
	team *teams.SessionTeam
	stop func()
	// permission asks a worker's shim about a permission prompt (nil
	// outside a worker).
	permission askShim
	// denied: the session takes no part (an unusable Boss contract).
	denied bool
}

// openSession resolves the session of this process's environment and
// reaches it by the session policy: as a fleet worker's turn, only
// through the worker shim's holder (worker); otherwise through a live
// holder of its id (taking the session over when that holder goes) or by
// holding it, with the janitor of a manager. An unusable Boss contract
// gives a session that takes no part.
func openSession(ctx context.Context, f *factory.Factory, log *slog.Logger, opts ServeOptions) (*mcpSession, error) {
	harness, worker := opts.Harness, opts.Worker
	p, err := f.Paths()
	if err != nil {
		return nil, err
	}
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Harness, Harness: harness, Getenv: f.Env})
	if err != nil {
		return nil, factory.Usage(err)
	}
	o := factory.AttachOptions{Mode: intercom.AttachHold, Logger: log, Janitor: true, Share: opts.Share}
	if worker {
		o = factory.AttachOptions{Mode: intercom.AttachThrough, Logger: log, HolderWait: workerHolderWait}
	}
	s, err := f.Attach(ctx, p, id, o)
	switch {
	case errors.Is(err, teams.ErrUnusableContract):
		return deniedSession(log, id, err), nil
	case err != nil && worker:
		return nil, fmt.Errorf("mcp --worker: no worker shim holds session %q (run this server only from a fleet worker's turn): %w", id.SessionID, err)
	case err != nil:
		return nil, err
	}
	if s.Holder {
		log.Info("session already held; acting through its holder", "session", id.SessionID)
	}
	ms := &mcpSession{ops: s.Ops, id: id.SessionID, team: s.Team, stop: s.Close}
	if worker {
		ms.permission = shimPermission(p, id.SessionID)
	}
	return ms, nil
}

// deniedSession is the MCP session of a process whose Boss contract is
// present but unusable: it never registers, and every intercom tool answers
// with the contract's error (spec §7.3, deny-all).
func deniedSession(log *slog.Logger, id intercom.Identity, err error) *mcpSession {
	log.Error("not registering: the Boss team contract is unusable", "err", err)
	return &mcpSession{ops: teams.RefusedOps(err), id: id.SessionID, stop: func() {}, denied: true}
}
