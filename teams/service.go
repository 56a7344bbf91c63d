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
	// Join creates or joins a named team: a membership, and (unless the
	// request is a task team's or stays) a move into its scope.
	Join(ctx context.Context, req JoinRequest) (*JoinResult, error)
	// Leave gives up one membership ("" = the team whose scope the
	// session is in, back to its home scope).
	Leave(ctx context.Context, req LeaveRequest) (*LeaveResult, error)
	// Delete removes a team this session manages.
	Delete(ctx context.Context, req LeaveRequest) (*LeaveResult, error)
	// NamedTeams lists the named teams (never their scopes), marking the
	// session's memberships, with live member counts.
	NamedTeams(ctx context.Context) ([]NamedTeam, error)
	// Rosters is the rosters of the session's teams (name: that one only).
	Rosters(ctx context.Context, name string) ([]Roster, error)
	// InspectInbox reads an owned coworker's pending asks (managers only).
	InspectInbox(ctx context.Context, req InspectRequest) (*Inspection, error)
}

// JoinRequest names a team to join, or with Create to create and join as
// its manager. Members (session ids, names or id prefixes of connected
// sessions; the manager's to give) and Work make it a task team's join,
// as the Codex adapter's intercom_join: the roster grows and nobody moves.
// Stay also records the membership without moving.
type JoinRequest struct {
	Name    string   `json:"name"`
	Create  bool     `json:"create,omitempty"`
	Members []string `json:"members,omitempty"`
	Work    string   `json:"work,omitempty"`
	Stay    bool     `json:"stay,omitempty"`
}

// task reports whether the join records memberships only.
func (r JoinRequest) task() bool { return r.Stay || len(r.Members) > 0 || r.Work != "" }

// JoinResult is the outcome of a join: the Codex adapter's {ok, team,
// role} plus the manager, whether the session moved into the team's
// scope, and the team's roster.
type JoinResult struct {
	OK      bool    `json:"ok"`
	Team    string  `json:"team"`
	Role    string  `json:"role"` // "manager" or "member"
	Manager string  `json:"manager"`
	Created bool    `json:"created,omitempty"`
	Moved   bool    `json:"moved,omitempty"`
	Roster  *Roster `json:"roster,omitempty"`
}

// LeaveRequest names a team to leave or delete ("" for a leave: the team
// whose scope the session is in).
type LeaveRequest struct {
	Name string `json:"name,omitempty"`
}

// LeaveResult is the outcome of a leave or a delete.
type LeaveResult struct {
	OK   bool   `json:"ok"`
	Team string `json:"team"`
	// Home: the session moved back to its home scope (the one it was
	// started in).
	Home bool `json:"home,omitempty"`
	// Deleted: the team itself is gone (with Team "": it was deleted
	// before, and the session left the scope it had).
	Deleted bool `json:"deleted,omitempty"`
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
	// Peer looks an exact session id up in any scope (agent-fleet's
	// local API): named-team rosters count and resolve members by it.
	// nil, or an error: only the session's own scope is seen.
	Peer func(ctx context.Context, id string) (*intercom.PeerInfo, error)
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
	// home is the scope and manager target the session started with: a
	// leave goes back there.
	homeScope, homeManager string
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
	return &Service{cfg: cfg, store: NewStore(cfg.Paths),
		homeScope: getenv(cfg.Env, EnvScope), homeManager: getenv(cfg.Env, EnvManagerTarget)}
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

// Join implements Teams: create (Create) or look up the team, put the
// session on its roster (with Members, for the team's manager), and, for
// a plain join by a session this process can move, move it into the
// team's scope in place and set AGENT_INTERCOM_SCOPE_ID and
// AGENT_INTERCOM_MANAGER_TARGET in Env. Other memberships stay. Errors:
// ErrManagedSession, ErrInvalidTeamName, ErrTeamNotFound,
// ErrTeamExists, ErrNotManager, intercom.ErrTargetNotFound (a member not
// connected), ErrStore, ErrLocked, and the switch's own.
func (s *Service) Join(ctx context.Context, req JoinRequest) (*JoinResult, error) {
	if err := ValidateTeamName(req.Name); err != nil {
		return nil, err
	}
	move := !req.task() && s.cfg.Switch != nil
	// Managed sessions belong to the team that manages them: no named
	// team at all, so --stay and task joins are refused too (spec §7.2).
	if why := ManagedReason(s.cfg.Env, s.cfg.Boss); why != "" {
		return nil, fmt.Errorf("%w: %s", ErrManagedSession, why)
	}
	self, err := s.self(ctx)
	if err != nil {
		return nil, err
	}
	members, err := s.resolveMembers(ctx, self, req.Members)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mr := MembershipRequest{Name: req.Name, Self: self, Members: members, Create: req.Create, Work: req.Work}
	var team NamedTeam
	var scope Scope
	if !req.Create {
		// Move first: a join that could not move records nothing.
		if team, scope, err = s.store.Lookup(req.Name); err != nil {
			return nil, err
		}
		if move && scope.Value() != getenv(s.cfg.Env, EnvScope) {
			if err := s.moveTo(ctx, scope.Value(), team.ManagerSessionID); err != nil {
				return nil, fmt.Errorf("join team %s: %w", team.Name, err)
			}
		}
	}
	if team, scope, err = s.store.Join(ctx, mr); err != nil {
		return nil, err
	}
	if req.Create && move {
		if err := s.moveTo(ctx, scope.Value(), team.ManagerSessionID); err != nil {
			return nil, fmt.Errorf("created team %s but could not move this session into it: %w", team.Name, err)
		}
	}
	roster := s.roster(ctx, self, team)
	return &JoinResult{OK: true, Team: team.Name, Role: team.RoleOf(self), Manager: team.ManagerSessionID,
		Created: req.Create, Moved: move, Roster: &roster}, nil
}

// moveTo switches the session to scope and records it (and the team's
// manager) in Env, so that what this process starts afterwards is there.
func (s *Service) moveTo(ctx context.Context, scope, manager string) error {
	if err := s.cfg.Switch(ctx, scope); err != nil {
		return err
	}
	if err := s.cfg.Env.Setenv(EnvScope, scope); err != nil {
		return err
	}
	return s.cfg.Env.Setenv(EnvManagerTarget, manager)
}

// resolveMembers turns the members of a task-team join into session ids:
// each a connected session of this scope (exact id, unique name, unique id
// prefix of at least 4 characters) or an exact id connected in any scope.
func (s *Service) resolveMembers(ctx context.Context, self string, members []string) ([]string, error) {
	if len(members) == 0 {
		return nil, nil
	}
	list, err := s.cfg.Ops.List(ctx, intercom.ListRequest{IncludeSelf: true})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range members {
		id, err := matchSession(list.Sessions, m)
		if err != nil {
			return nil, err
		}
		if id == "" && s.connected(ctx, m) {
			id = m
		}
		if id == "" {
			return nil, fmt.Errorf("%w: session %q is not connected (give a connected session's id or name)", intercom.ErrTargetNotFound, m)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (s *Service) connected(ctx context.Context, id string) bool {
	if s.cfg.Peer != nil {
		p, err := s.cfg.Peer(ctx, id)
		return err == nil && p != nil && p.Connected
	}
	return s.cfg.Connected != nil && s.cfg.Connected(ctx, id)
}

// Leave implements Teams: off the roster; when the team is the one whose
// scope the session is in, back to the home scope. Errors:
// ErrTeamNotFound, ErrNotMember, ErrManagerLeaves, ErrHomeTeam, ErrStore,
// ErrLocked, and the switch's own.
func (s *Service) Leave(ctx context.Context, req LeaveRequest) (*LeaveResult, error) {
	self, err := s.self(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	current := getenv(s.cfg.Env, EnvScope)
	name := req.Name
	if name == "" {
		// The current team; the one it was started in (teams join NAME --
		// CMD: its scope is home) is refused below, as when named.
		name = s.store.TeamOfScope(current)
		if name == "" && current == s.homeScope {
			return nil, fmt.Errorf("%w: session %s is in its home scope; name the team to leave", ErrNotMember, self)
		}
		if name == "" {
			// Its team was deleted while it was in its scope: nothing is
			// left to leave but the scope.
			if s.cfg.Switch == nil {
				return nil, fmt.Errorf("%w: session %s is in the scope of a deleted team and was started there; end it and start it outside", ErrHomeTeam, self)
			}
			if err := s.goHome(ctx); err != nil {
				return nil, fmt.Errorf("could not move session %s back to its home scope from a deleted team's: %w", self, err)
			}
			return &LeaveResult{OK: true, Home: true, Deleted: true}, nil
		}
	}
	team, scope, err := s.store.Lookup(name)
	if err != nil {
		return nil, err
	}
	inIt := scope.Value() == current
	if inIt && (current == s.homeScope || s.cfg.Switch == nil) {
		return nil, fmt.Errorf("%w: session %s was started in team %s's scope, so it cannot leave it; end it, then leave (agent-fleet teams leave %s)", ErrHomeTeam, self, team.Name, team.Name)
	}
	if err := s.store.Leave(ctx, team.Name, self); err != nil {
		return nil, err
	}
	res := &LeaveResult{OK: true, Team: team.Name}
	if inIt {
		if err := s.goHome(ctx); err != nil {
			return nil, fmt.Errorf("left team %s but could not move this session back to its home scope: %w", team.Name, err)
		}
		res.Home = true
	}
	return res, nil
}

func (s *Service) goHome(ctx context.Context) error {
	if err := s.cfg.Switch(ctx, s.homeScope); err != nil {
		return err
	}
	if err := s.cfg.Env.Setenv(EnvScope, s.homeScope); err != nil {
		return err
	}
	return s.cfg.Env.Setenv(EnvManagerTarget, s.homeManager)
}

// Delete implements Teams: the team's manager removes it; a session of
// this process in its scope goes back to its home scope (others in it
// stay, in a scope with no name, until they leave or end). Errors:
// ErrTeamNotFound, ErrNotManager, ErrStore, ErrLocked.
func (s *Service) Delete(ctx context.Context, req LeaveRequest) (*LeaveResult, error) {
	self, err := s.self(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	team, scope, err := s.store.Delete(ctx, req.Name, self)
	if err != nil {
		return nil, err
	}
	res := &LeaveResult{OK: true, Team: team.Name, Deleted: true}
	if current := getenv(s.cfg.Env, EnvScope); scope.Value() == current && current != s.homeScope && s.cfg.Switch != nil {
		if err := s.goHome(ctx); err != nil {
			return nil, fmt.Errorf("deleted team %s but could not move this session back to its home scope: %w", team.Name, err)
		}
		res.Home = true
	}
	return res, nil
}

// NamedTeams implements Teams: every team, marked for this session, with
// its member and live member counts; the roster and work only of the
// teams the session is in.
func (s *Service) NamedTeams(ctx context.Context) ([]NamedTeam, error) {
	self, err := s.self(ctx)
	if err != nil {
		return nil, err
	}
	if s.cfg.Boss.Present && s.cfg.Boss.Restricted {
		// The named teams' rosters are other sessions' ids: discovery,
		// which team-only visibility refuses (spec §7.3).
		return nil, &BossError{Code: BossScopeDenied, Message: "named teams are unavailable in Boss team-only mode; use intercom_team"}
	}
	list, err := s.store.List(self, getenv(s.cfg.Env, EnvScope))
	if err != nil {
		return nil, err
	}
	look := s.lookup(ctx)
	for i := range list {
		t := &list[i]
		t.MemberCount = len(t.Members)
		live := 0
		for _, id := range t.Members {
			_, on, known := look(id)
			if !known {
				live = -1 // no broker, or a TypeScript one: nobody can tell
				break
			}
			if on {
				live++
			}
		}
		if live >= 0 {
			t.Live = &live
		}
		if !t.Joined {
			t.Members, t.Work = nil, ""
		}
	}
	return list, nil
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
