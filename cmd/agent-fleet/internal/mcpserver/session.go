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

// mcpSession is the session behind an MCP server: its own (a holder), or
// another holder's.
type mcpSession struct {
	ops     intercom.Ops
	session *intercom.Session
	id      string // the session id, the manager of what it spawns
	stop    func()
	team    *factory.SessionTeam // the Boss contract and the team operations
}

// openSession resolves the session of this process's environment and
// opens it: as a fleet worker's turn (worker), or as its own. An unusable
// Boss contract gives a session that takes no part.
func openSession(ctx context.Context, f *factory.Factory, log *slog.Logger, harness string, worker bool) (*mcpSession, error) {
	p, err := f.Paths()
	if err != nil {
		return nil, err
	}
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Harness, Harness: harness})
	if err != nil {
		return nil, factory.Usage(err)
	}
	team, err := f.SessionTeam(p, id)
	switch {
	case err != nil:
		return deniedSession(log, id, err), nil
	case worker:
		return openWorkerSession(ctx, p, id, team)
	default:
		return openOwnSession(ctx, f, log, p, id, team)
	}
}

// openWorkerSession acts as a fleet worker through its shim's holder, and
// only so: a worker's turn never registers a second connection under the
// worker's id. The shim serves its holder before the first turn starts.
func openWorkerSession(ctx context.Context, p intercom.Paths, id intercom.Identity, team *factory.SessionTeam) (*mcpSession, error) {
	var herr error
	for attempt := 0; attempt < 10; attempt++ {
		var hc *intercom.HolderClient
		if hc, herr = intercom.DialHolder(ctx, p, id.SessionID); herr == nil {
			return &mcpSession{ops: team.Through(p, hc), team: team, id: id.SessionID, stop: team.Close}, nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	team.Close()
	return nil, fmt.Errorf("mcp --worker: no worker shim holds session %q (run this server only from a fleet worker's turn): %w", id.SessionID, herr)
}

// openOwnSession holds the session, or acts through its live holder.
func openOwnSession(ctx context.Context, f *factory.Factory, log *slog.Logger, p intercom.Paths, id intercom.Identity, team *factory.SessionTeam) (*mcpSession, error) {
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		log.Info("session already held; acting through its holder", "session", id.SessionID)
		fo := &failoverOps{cur: team.Through(p, hc), through: true, log: log,
			takeOver: func(ctx context.Context) (*mcpSession, error) { return holdSession(ctx, f, p, id, team, log) }}
		return &mcpSession{ops: fo, team: team, id: id.SessionID, stop: func() { fo.stop(); team.Close() }}, nil
	}
	ms, err := holdSession(ctx, f, p, id, team, log)
	if err != nil {
		return nil, err
	}
	stop := ms.stop
	ms.stop = func() { stop(); team.Close() }
	return ms, nil
}

// holdSession registers id and serves its holder socket, or, when another
// holder appeared meanwhile, acts through it. Its stop leaves team open.
func holdSession(ctx context.Context, f *factory.Factory, p intercom.Paths, id intercom.Identity, team *factory.SessionTeam, log *slog.Logger) (*mcpSession, error) {
	var sess *intercom.Session
	var err error
	activity := factory.StartActivity(p, id.SessionID, log)
	for attempt := 0; ; attempt++ {
		sess, err = intercom.OpenSession(ctx, intercom.SessionConfig{
			Paths: p, Identity: id, Start: f.BrokerStarter(), AskTTL: f.AskTTL(), AskWait: f.AskWait(), Reconnect: true, Logger: log,
			Filter: team.Filter(), ReplayFilter: team.Replay(),
			OnMessage: activity.OnMessage,
		})
		if err == nil {
			break
		}
		if errors.Is(err, intercom.ErrSessionIDInUse) {
			// Perhaps a holder appeared meanwhile.
			if hc, herr := intercom.DialHolder(ctx, p, id.SessionID); herr == nil {
				ms := &mcpSession{ops: team.Through(p, hc), team: team, id: id.SessionID, stop: func() {}}
				activity.Close()
				return ms, nil
			}
		}
		if attempt >= 2 || ctx.Err() != nil {
			activity.Close()
			return nil, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	ops, extra := team.Hold(p, sess, log)
	hctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	holder, err := intercom.ListenHolder(intercom.HolderConfig{Paths: p, SessionID: id.SessionID, Ops: ops, Logger: log, Extra: extra})
	if err != nil {
		log.Warn("cannot serve the holder socket", "err", err)
		close(done)
	} else {
		go func() {
			_ = holder.Serve(hctx)
			close(done)
		}()
	}
	janitorDone := make(chan struct{})
	go func() {
		defer close(janitorDone)
		f.RunHolderJanitor(hctx, p, id.SessionID, log)
	}()
	return &mcpSession{ops: ops, session: sess, team: team, id: id.SessionID, stop: func() {
		cancel()
		<-done
		<-janitorDone
		_ = sess.Close() // keeps the outbox and defers open asks
		activity.Close()
	}}, nil
}

// deniedSession is the MCP session of a process whose Boss contract is
// present but unusable: it never registers, and every intercom tool answers
// with the contract's error (spec §7.3, deny-all).
func deniedSession(log *slog.Logger, id intercom.Identity, err error) *mcpSession {
	log.Error("not registering: the Boss team contract is unusable", "err", err)
	who := intercom.WhoamiResult{SessionID: id.SessionID, Name: id.Name, Cwd: id.Cwd, Model: id.Model}
	return &mcpSession{ops: teams.DeniedOps(who, err), id: id.SessionID, stop: func() {}}
}
