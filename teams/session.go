package teams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// ErrUnusableContract: the process's Boss contract is present but cannot
// be used (invalid, or naming another session): the process must take no
// part at all (spec §7.3, deny-all). It wraps the contract's own error.
var ErrUnusableContract = errors.New("the Boss team contract is unusable")

// SessionTeam is what teams adds to a process acting as a session: the
// Boss contract of its environment (spec §7.3) and the team operations
// (intercom_team, named teams, inbox inspection) of the session as it is
// reached — held here, registered for one command, or through another
// process's holder. Safe for concurrent use.
type SessionTeam struct {
	id     intercom.Identity
	boss   *Boss
	reg    Registry
	askTTL time.Duration

	mu  sync.Mutex // guards svc: a session taken over replaces it
	svc Teams
}

// NewSessionTeam reads the Boss contract for id; reg is the fleet registry
// as teams reads it (nil: no fleet) and askTTL the broker's ask edge TTL.
// A contract that is present but unusable is ErrUnusableContract.
func NewSessionTeam(id intercom.Identity, reg Registry, askTTL time.Duration) (*SessionTeam, error) {
	st := &SessionTeam{id: id, boss: ReadBoss(nil), reg: reg, askTTL: askTTL}
	if err := st.boss.Usable(id.SessionID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnusableContract, err)
	}
	return st, nil
}

// Service returns the team operations of the session as it is reached
// now (nil before the session is).
func (st *SessionTeam) Service() Teams {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.svc
}

func (st *SessionTeam) setService(svc Teams) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.svc = svc
}

// Boss is the session's Boss contract (Present is false without one).
func (st *SessionTeam) Boss() *Boss { return st.boss }

// Filter and Replay go into the SessionConfig of a Boss session: refused
// senders never reach the inbox, and the outbox is not replayed.
func (st *SessionTeam) Filter() func(from wire.SessionInfo, msg *wire.MessageInfo) string {
	return st.boss.Filter(st.id.SessionID)
}

// Replay is the SessionConfig.ReplayFilter of the contract.
func (st *SessionTeam) Replay() func(to string) bool { return st.boss.ReplayFilter() }

func (st *SessionTeam) service(p intercom.Paths, ops intercom.Ops, sw func(context.Context, string) error) *Service {
	return NewService(ServiceConfig{Paths: p, Ops: ops, Switch: sw, Registry: st.reg,
		Connected: brokerConnected(p), Peer: brokerPeer(p), Boss: st.boss, AskTTL: st.askTTL})
}

// Hold attaches the team to a session this process holds: what refused
// senders left in its inbox is dropped, and the team service can move the
// session between named teams. It returns the session's operations with
// the Boss send rules applied, and the holder's extra operations.
func (st *SessionTeam) Hold(p intercom.Paths, sess *intercom.Session, log *slog.Logger) (intercom.Ops, intercom.HolderExtra) {
	if n, err := PurgeInbox(sess.Inbox(), st.boss, st.id.SessionID); err != nil {
		log.Warn("could not drop messages the Boss contract refuses", "err", err)
	} else if n > 0 {
		log.Info("dropped messages the Boss contract refuses", "count", n)
	}
	svc := st.service(p, sess, sess.SwitchScope)
	st.setService(svc)
	return st.withTeams(p, GuardOps(sess, st.boss, st.id.SessionID)), HolderExtra(svc)
}

// Through attaches the team to a session held by another process: team
// operations go to that holder, or run here when it serves none (a worker
// shim's holder; such sessions cannot switch scope).
func (st *SessionTeam) Through(p intercom.Paths, hc *intercom.HolderClient) intercom.Ops {
	st.setService(ViaHolder{Remote: HolderTeams{Client: hc}, Local: st.service(p, hc, nil)})
	return st.withTeams(p, GuardOps(hc, st.boss, st.id.SessionID))
}

// Own attaches the team to a session a one-shot command registered itself:
// it lasts one command, so it cannot switch scope.
func (st *SessionTeam) Own(p intercom.Paths, sess *intercom.Session) intercom.Ops {
	_, _ = PurgeInbox(sess.Inbox(), st.boss, st.id.SessionID)
	st.setService(st.service(p, sess, nil))
	return st.withTeams(p, GuardOps(sess, st.boss, st.id.SessionID))
}

// withTeams adds named-team delivery (TeamOps) to ops; a Boss participant
// belongs to no named team, so its operations stay as they are.
func (st *SessionTeam) withTeams(p intercom.Paths, ops intercom.Ops) intercom.Ops {
	if st.boss.Present {
		return ops
	}
	return &TeamOps{Ops: ops, Self: st.id.SessionID, Store: NewStore(p), Peer: brokerPeer(p), Teams: st.Service}
}

// brokerPeer looks exact session ids up in agent-fleet's broker, in any
// scope (a TypeScript broker has no local API: an error).
func brokerPeer(p intercom.Paths) func(context.Context, string) (*intercom.PeerInfo, error) {
	api := &intercom.LocalAPIClient{Path: p.LocalAPISocket()}
	return func(ctx context.Context, id string) (*intercom.PeerInfo, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return api.Peer(ctx, id)
	}
}

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
// Local for a holder that serves none (ErrUnsupported).
type ViaHolder struct {
	Remote HolderTeams
	Local  Teams
}

var _ Teams = ViaHolder{}

// Team implements Teams.
func (v ViaHolder) Team(ctx context.Context) (*Team, error) {
	t, err := v.Remote.Team(ctx)
	if errors.Is(err, ErrUnsupported) {
		return v.Local.Team(ctx)
	}
	return t, err
}

// Join implements Teams.
func (v ViaHolder) Join(ctx context.Context, req JoinRequest) (*JoinResult, error) {
	r, err := v.Remote.Join(ctx, req)
	if errors.Is(err, ErrUnsupported) {
		return v.Local.Join(ctx, req)
	}
	return r, err
}

// Leave implements Teams.
func (v ViaHolder) Leave(ctx context.Context, req LeaveRequest) (*LeaveResult, error) {
	r, err := v.Remote.Leave(ctx, req)
	if errors.Is(err, ErrUnsupported) {
		return v.Local.Leave(ctx, req)
	}
	return r, err
}

// Delete implements Teams.
func (v ViaHolder) Delete(ctx context.Context, req LeaveRequest) (*LeaveResult, error) {
	r, err := v.Remote.Delete(ctx, req)
	if errors.Is(err, ErrUnsupported) {
		return v.Local.Delete(ctx, req)
	}
	return r, err
}

// Rosters implements Teams.
func (v ViaHolder) Rosters(ctx context.Context, name string) ([]Roster, error) {
	r, err := v.Remote.Rosters(ctx, name)
	if errors.Is(err, ErrUnsupported) {
		return v.Local.Rosters(ctx, name)
	}
	return r, err
}

// NamedTeams implements Teams.
func (v ViaHolder) NamedTeams(ctx context.Context) ([]NamedTeam, error) {
	r, err := v.Remote.NamedTeams(ctx)
	if errors.Is(err, ErrUnsupported) {
		return v.Local.NamedTeams(ctx)
	}
	return r, err
}

// InspectInbox implements Teams.
func (v ViaHolder) InspectInbox(ctx context.Context, req InspectRequest) (*Inspection, error) {
	r, err := v.Remote.InspectInbox(ctx, req)
	if errors.Is(err, ErrUnsupported) {
		return v.Local.InspectInbox(ctx, req)
	}
	return r, err
}

// AttachConfig configures Attach.
type AttachConfig struct {
	Mode intercom.AttachMode
	// Session is the session to reach: Paths, Identity, the broker
	// starter, ask TTL and wait, Logger, OnMessage. The Boss filters are
	// added here.
	Session intercom.SessionConfig
	// Registry is the fleet registry as teams reads it (nil: no fleet).
	Registry Registry
	// While runs while this process holds the session (HoldConfig.While).
	While func(ctx context.Context)
	// HolderWait bounds AttachThrough's wait for the holder.
	HolderWait time.Duration
}

// Attached is a session reached with its team.
type Attached struct {
	*intercom.Attached
	Team *SessionTeam
}

// Attach reaches the session of cfg.Session.Identity by the session policy
// (intercom.Attach) with the Boss contract applied in one place: refused
// senders filtered before the inbox, the outbox not replayed to them,
// sends guarded, and the team operations of the session as reached. A
// contract that is present but unusable is ErrUnusableContract: nothing
// registers.
func Attach(ctx context.Context, cfg AttachConfig) (*Attached, error) {
	sc := cfg.Session
	st, err := NewSessionTeam(sc.Identity, cfg.Registry, sc.AskTTL)
	if err != nil {
		return nil, err
	}
	sc.Filter, sc.ReplayFilter = st.Filter(), st.Replay()
	log := sc.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := sc.Paths
	a, err := intercom.Attach(ctx, intercom.AttachConfig{
		Mode: cfg.Mode,
		Hold: intercom.HoldConfig{Session: sc, While: cfg.While,
			Wrap: func(s *intercom.Session) (intercom.Ops, intercom.HolderExtra) { return st.Hold(p, s, log) }},
		Through:    func(hc *intercom.HolderClient) intercom.Ops { return st.Through(p, hc) },
		Own:        func(s *intercom.Session) intercom.Ops { return st.Own(p, s) },
		HolderWait: cfg.HolderWait,
	})
	if err != nil {
		return nil, err
	}
	return &Attached{Attached: a, Team: st}, nil
}

// ForSession is the team operations of session id for a process that does
// not hold it (a CLI verb): through its live holder, which can move it
// between scopes (held true); else in this process on the named-teams
// store alone, where joins record memberships and nothing moves.
func ForSession(ctx context.Context, p intercom.Paths, id intercom.Identity, st *SessionTeam) (t Teams, held bool) {
	local := NewService(ServiceConfig{Paths: p, Peer: brokerPeer(p), Connected: brokerConnected(p), Registry: st.reg, Boss: st.boss,
		Ops: DeniedOps(intercom.WhoamiResult{SessionID: id.SessionID, Name: id.Name}, intercom.ErrNotConnected)})
	hc, err := intercom.DialHolder(ctx, p, id.SessionID)
	if err != nil {
		return local, false
	}
	return ViaHolder{Remote: HolderTeams{Client: hc}, Local: local}, true
}
