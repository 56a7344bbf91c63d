package factory

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/teams"
)

// SessionTeam is what teams adds to a process acting as a session: the
// Boss contract of its environment (spec §7.3) and the team operations
// (intercom_team, named teams, inbox inspection). Session holders (mcp,
// listen) build it around the session they hold; other processes around
// the holder they act through.
type SessionTeam struct {
	id     intercom.Identity
	boss   *teams.Boss
	reg    *teamRegistry
	askTTL time.Duration

	mu  sync.Mutex  // guards svc: an MCP server that takes its session over replaces it
	svc teams.Teams // read it with service
}

// Service returns the team operations of the session as it is held now.
func (st *SessionTeam) Service() teams.Teams {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.svc
}

func (st *SessionTeam) setService(svc teams.Teams) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.svc = svc
}

// SessionTeam reads the Boss contract for id. A contract that is present
// but not usable (invalid, or naming another session) is returned as the
// error: the process must then take no part at all (deny-all).
func (f *Factory) SessionTeam(p intercom.Paths, id intercom.Identity) (*SessionTeam, error) {
	st := &SessionTeam{id: id, boss: teams.ReadBoss(nil), reg: newTeamRegistry(p), askTTL: f.AskTTL()}
	if err := st.boss.Usable(id.SessionID); err != nil {
		return nil, err
	}
	return st, nil
}

// Filter and Replay go into the SessionConfig of a Boss session: refused
// senders never reach the inbox, and the outbox is not replayed.
func (st *SessionTeam) Filter() func(from wire.SessionInfo, msg *wire.MessageInfo) string {
	return st.boss.Filter(st.id.SessionID)
}

func (st *SessionTeam) Replay() func(to string) bool { return st.boss.ReplayFilter() }

// Hold attaches the team to a session this process holds: what refused
// senders left in its inbox is dropped, and the team service can move the
// session between named teams. It returns the session's operations with
// the Boss send rules applied, and the holder's extra operations.
func (st *SessionTeam) Hold(p intercom.Paths, sess *intercom.Session, log *slog.Logger) (intercom.Ops, func(context.Context, string, json.RawMessage) (any, bool, error)) {
	if n, err := teams.PurgeInbox(sess.Inbox(), st.boss, st.id.SessionID); err != nil {
		log.Warn("could not drop messages the Boss contract refuses", "err", err)
	} else if n > 0 {
		log.Info("dropped messages the Boss contract refuses", "count", n)
	}
	svc := teams.NewService(teams.ServiceConfig{Paths: p, Ops: sess, Switch: sess.SwitchScope,
		Registry: st.reg, Connected: brokerConnected(p), Boss: st.boss, AskTTL: st.askTTL})
	st.setService(svc)
	return teams.GuardOps(sess, st.boss, st.id.SessionID), teams.HolderExtra(svc)
}

// Through attaches the team to a session held by another process: team
// operations go to that holder, or run here when it serves none (a worker
// shim's holder; such sessions cannot switch scope).
func (st *SessionTeam) Through(p intercom.Paths, hc *intercom.HolderClient) intercom.Ops {
	local := teams.NewService(teams.ServiceConfig{Paths: p, Ops: hc, Registry: st.reg,
		Connected: brokerConnected(p), Boss: st.boss, AskTTL: st.askTTL})
	st.setService(ViaHolder{Remote: teams.HolderTeams{Client: hc}, Local: local})
	return teams.GuardOps(hc, st.boss, st.id.SessionID)
}

// Own attaches the team to a session a one-shot command registered itself:
// it lasts one command, so it cannot switch scope.
func (st *SessionTeam) Own(p intercom.Paths, sess *intercom.Session) intercom.Ops {
	_, _ = teams.PurgeInbox(sess.Inbox(), st.boss, st.id.SessionID)
	st.setService(teams.NewService(teams.ServiceConfig{Paths: p, Ops: sess, Registry: st.reg,
		Connected: brokerConnected(p), Boss: st.boss, AskTTL: st.askTTL}))
	return teams.GuardOps(sess, st.boss, st.id.SessionID)
}

// Close releases the team's registry handle.
func (st *SessionTeam) Close() { st.reg.close() }

// brokerConnected asks agent-fleet's broker whether an exact session id is
// connected in any scope (a TypeScript broker has no local API: false).
func brokerConnected(p intercom.Paths) func(context.Context, string) bool {
	api := &intercom.LocalAPIClient{Path: p.LocalAPISocket()}
	return func(ctx context.Context, id string) bool {
		peer, err := api.Peer(ctx, id)
		return err == nil && peer != nil && peer.Connected
	}
}

// ViaHolder runs team operations in the session's holder, falling back to
// this process for a holder that serves none.
type ViaHolder struct {
	Remote teams.HolderTeams
	Local  *teams.Service
}

func (v ViaHolder) Team(ctx context.Context) (*teams.Team, error) {
	t, err := v.Remote.Team(ctx)
	if errors.Is(err, teams.ErrUnsupported) {
		return v.Local.Team(ctx)
	}
	return t, err
}

func (v ViaHolder) Join(ctx context.Context, req teams.JoinRequest) (*teams.JoinResult, error) {
	r, err := v.Remote.Join(ctx, req)
	if errors.Is(err, teams.ErrUnsupported) {
		return v.Local.Join(ctx, req)
	}
	return r, err
}

func (v ViaHolder) NamedTeams(ctx context.Context) ([]teams.NamedTeam, error) {
	r, err := v.Remote.NamedTeams(ctx)
	if errors.Is(err, teams.ErrUnsupported) {
		return v.Local.NamedTeams(ctx)
	}
	return r, err
}

func (v ViaHolder) InspectInbox(ctx context.Context, req teams.InspectRequest) (*teams.Inspection, error) {
	r, err := v.Remote.InspectInbox(ctx, req)
	if errors.Is(err, teams.ErrUnsupported) {
		return v.Local.InspectInbox(ctx, req)
	}
	return r, err
}

// Boss is the session's Boss contract (Present is false without one).
func (st *SessionTeam) Boss() *teams.Boss { return st.boss }
