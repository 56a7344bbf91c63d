package teams

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/manifest"
)

// Session is a live session as the caller's session list shows it.
type Session struct {
	ID     string
	Name   string
	Model  string
	Origin string
}

// SessionsOf converts a session list; list it with IncludeSelf so the
// caller itself counts as connected.
func SessionsOf(res *intercom.ListResult) []Session {
	if res == nil {
		return nil
	}
	out := make([]Session, 0, len(res.Sessions))
	for _, v := range res.Sessions {
		out = append(out, Session{ID: v.ID, Name: v.Name, Model: v.Model, Origin: v.Origin})
	}
	return out
}

// WorkerRecord is what team resolution needs of a fleet registry record.
type WorkerRecord struct {
	ID, RunID string
	// Manager is the worker's current manager's session id (it changes on
	// adoption).
	Manager string
	Harness string // the worker kind: exec, claude, codex, opencode, pi
	Role    string
	State   string // the fleet state as list shows it (paused included)
	Live    bool   // provisioning, running or stopping
}

// Registry is the fleet registry as teams reads it; cmd implements it over
// fleet.Registry. Implementations must be safe for concurrent use.
type Registry interface {
	// Worker returns incarnation runID of worker id, or with runID "" the
	// id's live incarnation (else its latest); nil and no error when there
	// is none.
	Worker(ctx context.Context, id, runID string) (*WorkerRecord, error)
	// LiveWorkers returns every live incarnation.
	LiveWorkers(ctx context.Context) ([]WorkerRecord, error)
}

// Resolver resolves intercom_team (spec §7, first match wins):
//  1. the fleet registry: the caller is a worker (AGENT_INTERCOM_WORKER_ID,
//     and AGENT_INTERCOM_RUN_ID when set) — its current manager from the
//     registry, coworkers the other live workers of that manager — or the
//     caller manages live workers and is their manager;
//  2. the TmuxDeck manifest named by AGENT_INTERCOM_TEAM_MANIFEST — any
//     problem with it is an error, never a fall-through;
//  3. the same-scope live roster when AGENT_INTERCOM_SCOPE_ID is set;
//  4. standalone.
//
// The manager comes from the registry on every call, so a worker follows
// adoption without a restart. Safe for concurrent use.
type Resolver struct {
	// Env is read for the variables above (nil: the process environment).
	Env Env
	// Registry is the fleet registry (nil: none on this host).
	Registry Registry
	// Connected, when set, says whether an exact session id is connected
	// although the caller's session list does not show it (it is in another
	// scope): the broker's local API. Only registry teams use it.
	Connected func(ctx context.Context, id string) bool
}

// Resolve returns the team of selfID. sessions is the caller's live
// session list (itself included). Errors: ErrRegistry (the caller is a
// worker and the registry failed), manifest.ErrInvalid and
// manifest.ErrUnavailable.
func (r *Resolver) Resolve(ctx context.Context, selfID string, sessions []Session) (*Team, error) {
	env := r.Env
	if env == nil {
		env = ProcessEnv
	}
	if t, err := r.fromRegistry(ctx, env, selfID, sessions); t != nil || err != nil {
		return t, err
	}
	if path, set := env.LookupEnv(EnvManifest); set {
		return fromManifest(path, selfID, sessions)
	}
	if trimmed(env, EnvScope) != "" {
		return r.liveRoster(ctx, env, selfID, sessions), nil
	}
	return &Team{Source: SourceStandalone, Self: Self{ID: selfID}, Coworkers: []Member{}}, nil
}

func (r *Resolver) fromRegistry(ctx context.Context, env Env, selfID string, sessions []Session) (*Team, error) {
	if r.Registry == nil {
		return nil, nil
	}
	workerID := trimmed(env, EnvWorkerID)
	if workerID != "" {
		cur, err := r.Registry.Worker(ctx, workerID, trimmed(env, EnvRunID))
		if err != nil {
			return nil, fmt.Errorf("%w: resolve the team of worker %s: %v", ErrRegistry, workerID, err)
		}
		if cur == nil {
			return nil, nil // not a worker of this registry: on to the manifest
		}
		manager := firstNonEmpty(strings.TrimSpace(cur.Manager), trimmed(env, EnvManagerTarget), trimmed(env, EnvManagerID))
		t := &Team{Source: SourceOrchestrator, TeamID: manager, fromRegistry: true,
			Self: Self{ID: selfID, WorkerID: workerID}, Coworkers: []Member{}}
		if manager == "" {
			return t, nil
		}
		live, err := r.Registry.LiveWorkers(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: resolve the team of worker %s: %v", ErrRegistry, workerID, err)
		}
		t.Manager = &Endpoint{Target: manager, Connected: r.connected(ctx, sessions, manager)}
		t.Coworkers = r.members(ctx, live, manager, sessions, workerID, selfID)
		return t, nil
	}
	live, err := r.Registry.LiveWorkers(ctx)
	if err != nil {
		return nil, nil // a caller that is no worker still gets a team from elsewhere
	}
	coworkers := r.members(ctx, live, selfID, sessions, selfID)
	if len(coworkers) == 0 {
		return nil, nil
	}
	return &Team{Source: SourceOrchestrator, TeamID: selfID, fromRegistry: true,
		Self: Self{ID: selfID, IsManager: true}, Manager: &Endpoint{Target: selfID, Connected: true},
		Coworkers: coworkers}, nil
}

// members are the live workers of manager, minus the excluded ids.
func (r *Resolver) members(ctx context.Context, live []WorkerRecord, manager string, sessions []Session, exclude ...string) []Member {
	out := []Member{}
	for _, w := range live {
		id := strings.TrimSpace(w.ID)
		if !w.Live || id == "" || strings.TrimSpace(w.Manager) != manager || slices.Contains(exclude, id) {
			continue
		}
		out = append(out, Member{ID: id, Target: id, Harness: strings.TrimSpace(w.Harness),
			Role: strings.TrimSpace(w.Role), State: strings.TrimSpace(w.State), Connected: r.connected(ctx, sessions, id)})
	}
	return out
}

// connected: an exact id or a case-insensitive name in the session list
// (as the adapters match), else an exact id the broker says is connected.
func (r *Resolver) connected(ctx context.Context, sessions []Session, target string) bool {
	if connectedTo(sessions, target) {
		return true
	}
	return r.Connected != nil && r.Connected(ctx, target)
}

func connectedTo(sessions []Session, target string) bool {
	for _, s := range sessions {
		if s.ID == target || (s.Name != "" && wire.SameName(s.Name, target)) {
			return true
		}
	}
	return false
}

func fromManifest(path, selfID string, sessions []Session) (*Team, error) {
	m, err := manifest.Read(path) // a blank path is invalid too
	if err != nil {
		return nil, err
	}
	me, ok := m.Member(selfID)
	if !ok {
		return nil, manifest.NotAMember
	}
	t := &Team{Source: SourceManifest, TeamID: m.RunID,
		Self:      Self{ID: selfID, IsManager: selfID == m.LeadID, Role: string(me.Role)},
		Manager:   &Endpoint{Target: m.LeadID, Connected: connectedTo(sessions, m.LeadID)},
		Coworkers: []Member{}}
	for _, mb := range m.Members {
		if mb.SessionID == selfID || mb.SessionID == m.LeadID {
			continue
		}
		t.Coworkers = append(t.Coworkers, Member{ID: mb.SessionID, Target: mb.SessionID, Role: string(mb.Role),
			Connected: connectedTo(sessions, mb.SessionID)})
	}
	return t, nil
}

// liveRoster is the team of the sessions live in selfID's scope. Its
// manager may be connected in another scope (a named team's, whose
// members still reach it by name): the broker's word counts, as for
// registry teams.
func (r *Resolver) liveRoster(ctx context.Context, env Env, selfID string, sessions []Session) *Team {
	manager := firstNonEmpty(trimmed(env, EnvManagerTarget), trimmed(env, EnvManagerID))
	isManager := manager == "" || manager == selfID
	if isManager {
		manager = selfID
	}
	t := &Team{Source: SourceLiveRoster, TeamID: manager, Self: Self{ID: selfID, IsManager: isManager},
		Manager: &Endpoint{Target: manager, Connected: r.connected(ctx, sessions, manager)}, Coworkers: []Member{}}
	for _, s := range sessions {
		if s.ID == selfID || s.Model == "human" || (!isManager && s.ID == manager) {
			continue
		}
		t.Coworkers = append(t.Coworkers, Member{ID: s.ID, Target: s.ID, Connected: true})
	}
	return t
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
