package teams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Teams is what a session can do about its team. *Service implements it in
// the process that holds the session; HolderTeams implements it for other
// processes, through the holder.
type Teams interface {
	// Team resolves the session's team (intercom_team).
	Team(ctx context.Context) (*Team, error)
	// Join creates or joins a named team and moves the session into it.
	Join(ctx context.Context, req JoinRequest) (*JoinResult, error)
	// NamedTeams lists the named teams (never their scopes).
	NamedTeams(ctx context.Context) ([]NamedTeam, error)
	// InspectInbox reads an owned coworker's pending asks (managers only).
	InspectInbox(ctx context.Context, req InspectRequest) (*Inspection, error)
}

// JoinRequest names a team to join, or with Create to create and join as
// its manager.
type JoinRequest struct {
	Name   string `json:"name"`
	Create bool   `json:"create,omitempty"`
}

// JoinResult is the outcome of a join: the Codex adapter's {ok, team,
// role} plus the manager.
type JoinResult struct {
	OK      bool   `json:"ok"`
	Team    string `json:"team"`
	Role    string `json:"role"` // "manager" or "teammate"
	Manager string `json:"manager"`
	Created bool   `json:"created,omitempty"`
}

// InspectRequest names the coworker session whose inbox to read, and
// optionally one ask to show in full.
type InspectRequest struct {
	Session string `json:"session"`
	AskID   string `json:"askId,omitempty"`
}

// ServiceConfig configures a Service.
type ServiceConfig struct {
	Paths intercom.Paths
	// Ops are the session's operations, without GuardOps (the service
	// applies the Boss contract itself).
	Ops intercom.Ops
	// Switch moves the session to another scope in place
	// (intercom.Session.SwitchScope); nil when this process cannot.
	Switch func(ctx context.Context, scope string) error
	// Env is read for team resolution and written by a switch so that what
	// this process starts afterwards is in the team (nil: the process
	// environment).
	Env      Env
	Registry Registry
	// Connected: see Resolver.Connected.
	Connected func(ctx context.Context, id string) bool
	// Boss is the session's Boss contract (nil: read from Env).
	Boss *Boss
	// AskTTL bounds the asks an inspection shows (default 10 min).
	AskTTL time.Duration
	Now    func() time.Time
}

// Service implements Teams for a session this process holds (or reaches).
// Safe for concurrent use; joins run one at a time.
type Service struct {
	cfg   ServiceConfig
	store *Store
	mu    sync.Mutex
}

// NewService returns the team service of a session.
func NewService(cfg ServiceConfig) *Service {
	if cfg.Env == nil {
		cfg.Env = ProcessEnv
	}
	if cfg.Boss == nil {
		cfg.Boss = ReadBoss(cfg.Env)
	}
	if cfg.AskTTL <= 0 {
		cfg.AskTTL = intercom.DefaultAskTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, store: NewStore(cfg.Paths)}
}

// CanSwitch reports whether this service can move its session.
func (s *Service) CanSwitch() bool { return s.cfg.Switch != nil }

func (s *Service) self(ctx context.Context) (string, error) {
	w, err := s.cfg.Ops.Whoami(ctx)
	if err != nil {
		return "", err
	}
	return w.SessionID, nil
}

// team resolves the team and returns it with the session list it used.
func (s *Service) team(ctx context.Context) (*Team, []Session, error) {
	self, err := s.self(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.cfg.Boss.Usable(self); err != nil {
		return nil, nil, err
	}
	res, err := s.cfg.Ops.List(ctx, intercom.ListRequest{IncludeSelf: true})
	if err != nil {
		return nil, nil, err
	}
	sessions := SessionsOf(res)
	if s.cfg.Boss.Present && s.cfg.Boss.Restricted {
		t, err := s.cfg.Boss.Team(self, sessions)
		return t, sessions, err
	}
	r := &Resolver{Env: s.cfg.Env, Registry: s.cfg.Registry, Connected: s.cfg.Connected}
	t, err := r.Resolve(ctx, self, sessions)
	return t, sessions, err
}

// Team implements Teams.
func (s *Service) Team(ctx context.Context) (*Team, error) {
	t, _, err := s.team(ctx)
	return t, err
}

// ManagedReason says why a session may not join a named team ("" when it
// may): a fleet worker, an orchestrator-owned session, a TmuxDeck team
// member (spec §7.2), or a Boss participant.
func ManagedReason(env Env, b *Boss) string {
	if env == nil {
		env = ProcessEnv
	}
	switch {
	case trimmed(env, EnvWorkerID) != "":
		return "it is fleet worker " + trimmed(env, EnvWorkerID) + " (" + EnvWorkerID + ")"
	case getenv(env, EnvOwned) == "1":
		return "it is owned by an orchestrator (" + EnvOwned + "=1)"
	}
	if _, set := env.LookupEnv(EnvManifest); set {
		return "it belongs to a TmuxDeck team (" + EnvManifest + ")"
	}
	if b != nil && b.Present {
		return "it is a Boss team participant"
	}
	return ""
}

// Join implements Teams: create (Create) or look up the team, move the
// session into its scope in place, and set AGENT_INTERCOM_SCOPE_ID and
// AGENT_INTERCOM_MANAGER_TARGET in Env. The creator is the manager.
// Errors: ErrManagedSession, ErrInvalidTeamName, ErrTeamNotFound,
// ErrTeamExists, ErrNoSwitch, ErrStore, ErrLocked, and the switch's own.
func (s *Service) Join(ctx context.Context, req JoinRequest) (*JoinResult, error) {
	if why := ManagedReason(s.cfg.Env, s.cfg.Boss); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrManagedSession, why)
	}
	if err := ValidateTeamName(req.Name); err != nil {
		return nil, err
	}
	if s.cfg.Switch == nil {
		return nil, ErrNoSwitch
	}
	self, err := s.self(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var team NamedTeam
	var scope Scope
	if req.Create {
		team, scope, err = s.store.Create(ctx, req.Name, self)
	} else {
		team, scope, err = s.store.Lookup(req.Name)
	}
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Switch(ctx, scope.Value()); err != nil {
		if req.Create {
			return nil, fmt.Errorf("created team %s but could not move this session into it: %w", team.Name, err)
		}
		return nil, fmt.Errorf("join team %s: %w", team.Name, err)
	}
	if err := s.cfg.Env.Setenv(EnvScope, scope.Value()); err != nil {
		return nil, err
	}
	if err := s.cfg.Env.Setenv(EnvManagerTarget, team.ManagerSessionID); err != nil {
		return nil, err
	}
	if !req.Create {
		_ = s.store.AddMember(ctx, team.Name, self) // only the OpenCode variant keeps a roster
	}
	role := "teammate"
	if team.ManagerSessionID == self {
		role = "manager"
	}
	return &JoinResult{OK: true, Team: team.Name, Role: role, Manager: team.ManagerSessionID, Created: req.Create}, nil
}

// NamedTeams implements Teams, marking the team the session is in.
func (s *Service) NamedTeams(context.Context) ([]NamedTeam, error) {
	return s.store.List(getenv(s.cfg.Env, EnvScope))
}

// InspectInbox implements Teams (spec §7.4).
func (s *Service) InspectInbox(ctx context.Context, req InspectRequest) (*Inspection, error) {
	t, sessions, err := s.team(ctx)
	if err != nil {
		return nil, err
	}
	if err := AuthorizeInspection(ctx, t, sessions, req.Session, s.cfg.Connected); err != nil {
		return nil, err
	}
	return ReadInbox(s.cfg.Paths, req.Session, req.AskID, s.cfg.AskTTL, s.cfg.Now())
}

// ErrUnsupported is returned by HolderTeams when the holder serves no team
// operations (a worker shim's holder): resolve in this process instead.
var ErrUnsupported = errors.New("the session holder does not serve team operations")
