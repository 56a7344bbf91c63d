package teams

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/manifest"
)

// switcher records the scopes a session was moved to.
type switcher struct {
	mu     sync.Mutex
	scopes []string
	err    error
}

func (s *switcher) Switch(_ context.Context, scope string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.scopes = append(s.scopes, scope)
	return nil
}

func service(t *testing.T, p intercom.Paths, self string, env MapEnv, sw *switcher) *Service {
	t.Helper()
	cfg := ServiceConfig{Paths: p, Ops: &fakeOps{self: self, sessions: sessionViews(self)}, Env: env}
	if sw != nil {
		cfg.Switch = sw.Switch
	}
	return NewService(cfg)
}

func TestServiceJoin(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	aliceEnv, bobEnv := MapEnv{}, MapEnv{EnvManagerTarget: "someone-else"}
	aliceSw, bobSw := &switcher{}, &switcher{}
	alice := service(t, p, "alice", aliceEnv, aliceSw)
	bob := service(t, p, "bob", bobEnv, bobSw)

	res, err := alice.Join(ctx, JoinRequest{Name: "billing", Create: true})
	require.NoError(t, err)
	require.Equal(t, JoinResult{OK: true, Team: "billing", Role: "manager", Manager: "alice", Created: true, Moved: true}, *stripRoster(res))
	require.Len(t, aliceSw.scopes, 1)
	require.Regexp(t, hex48, aliceSw.scopes[0])
	require.Equal(t, aliceSw.scopes[0], aliceEnv[EnvScope], "children inherit the team")
	require.Equal(t, "alice", aliceEnv[EnvManagerTarget])

	res, err = bob.Join(ctx, JoinRequest{Name: "billing"})
	require.NoError(t, err)
	require.Equal(t, JoinResult{OK: true, Team: "billing", Role: "member", Manager: "alice", Moved: true}, *stripRoster(res))
	require.Equal(t, []RosterMember{{ID: "alice", Target: "alice", Role: "manager"}, {ID: "bob", Target: "bob", Name: "bob", Role: "member", Connected: true}},
		res.Roster.Members, "bob sees himself; alice is in no scope bob's fake broker lists")
	require.Equal(t, aliceSw.scopes, bobSw.scopes, "the same private scope")
	require.Equal(t, "alice", bobEnv[EnvManagerTarget])

	// Both now resolve the live roster of the team, alice as its manager.
	team, err := bob.Team(ctx)
	require.NoError(t, err)
	require.Equal(t, SourceLiveRoster, team.Source)
	require.Equal(t, "alice", team.Manager.Target)
	team, err = alice.Team(ctx)
	require.NoError(t, err)
	require.True(t, team.Self.IsManager)

	list, err := bob.NamedTeams(ctx)
	require.NoError(t, err)
	require.Equal(t, []NamedTeam{{Name: "billing", ManagerSessionID: "alice", CreatedAt: list[0].CreatedAt, Members: []string{"alice", "bob"},
		MemberCount: 2, Joined: true, Current: true, Role: "member"}}, list, "no broker to ask who of alice is live")
	// A session that is not a member learns the team's size, not who is
	// on it (as intercom_team({team}) refuses it).
	list, err = service(t, p, "carol", MapEnv{}, nil).NamedTeams(ctx)
	require.NoError(t, err)
	require.Equal(t, []NamedTeam{{Name: "billing", ManagerSessionID: "alice", CreatedAt: list[0].CreatedAt, MemberCount: 2}}, list)
	out, err := json.Marshal(list)
	require.NoError(t, err)
	require.NotContains(t, string(out), "bob")
	require.NotContains(t, string(out), "live", "omitted when nobody can tell, never -1")

	_, err = bob.Join(ctx, JoinRequest{Name: "billing", Create: true})
	require.ErrorIs(t, err, ErrTeamExists)
	_, err = bob.Join(ctx, JoinRequest{Name: "nope"})
	require.ErrorIs(t, err, ErrTeamNotFound)
	_, err = bob.Join(ctx, JoinRequest{Name: "bad name"})
	require.ErrorIs(t, err, ErrInvalidTeamName)

	// A failed switch changes nothing in the environment or the roster.
	failing := &switcher{err: errors.New("broker gone")}
	carolEnv := MapEnv{}
	_, err = service(t, p, "carol", carolEnv, failing).Join(ctx, JoinRequest{Name: "billing"})
	require.ErrorContains(t, err, "broker gone")
	require.NotContains(t, carolEnv, EnvScope)
	team2, _, err := NewStore(p).Lookup("billing")
	require.NoError(t, err)
	require.False(t, team2.IsMember("carol"))

	// Where nothing can move, a join records the membership only.
	res, err = service(t, p, "carol", MapEnv{}, nil).Join(ctx, JoinRequest{Name: "billing"})
	require.NoError(t, err)
	require.False(t, res.Moved)
	team2, _, _ = NewStore(p).Lookup("billing")
	require.Equal(t, []string{"alice", "bob", "carol"}, team2.Members)
}

func stripRoster(r *JoinResult) *JoinResult {
	c := *r
	c.Roster = nil
	return &c
}

// Managed sessions cannot join or create (spec §7.2).
func TestServiceJoinRefusesManagedSessions(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	cases := map[string]MapEnv{
		"fleet worker":      {EnvWorkerID: "w1"},
		"owned":             {EnvOwned: "1"},
		"tmuxdeck member":   {EnvManifest: "/x/team.json"},
		"tmuxdeck, empty":   {EnvManifest: ""},
		"boss participant":  bossEnv("worker"),
		"boss, invalid one": {EnvBossRole: "worker"},
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			sw := &switcher{}
			s := service(t, p, "me", env, sw)
			// Neither a move nor a join that stays where it is (--stay, a
			// task team's members or work).
			for _, req := range []JoinRequest{{Create: true}, {}, {Stay: true}, {Create: true, Work: "w"},
				{Create: true, Members: []string{"me"}}, {Work: "w"}} {
				req.Name = "billing"
				_, err := s.Join(ctx, req)
				require.ErrorIs(t, err, ErrManagedSession, "%+v", req)
			}
			require.Empty(t, sw.scopes)
			_, err := os.Stat(NewStore(p).Path())
			require.True(t, os.IsNotExist(err), "nothing created")
		})
	}
	require.Empty(t, ManagedReason(MapEnv{EnvOwned: "0", EnvWorkerID: "  "}, nil))
}

func TestServiceInspect(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	now := time.Now()
	stageInto(t, p, "w1", msg{"someone", "q1", true, now})
	reg := &fakeRegistry{workers: []WorkerRecord{live("w1", "aaaaaaaaaaaa", "boss", "exec", ""), live("w2", "bbbbbbbbbbbb", "boss", "exec", "")}}
	ops := &fakeOps{self: "boss", sessions: sessionViews("boss", "w1")}
	s := NewService(ServiceConfig{Paths: p, Ops: ops, Env: MapEnv{}, Registry: reg})
	got, err := s.InspectInbox(ctx, InspectRequest{Session: "w1"})
	require.NoError(t, err)
	require.Len(t, got.Asks, 1)
	_, err = s.InspectInbox(ctx, InspectRequest{Session: "w2"})
	require.ErrorIs(t, err, ErrInspectionDenied, "not connected")

	w := NewService(ServiceConfig{Paths: p, Ops: &fakeOps{self: "w2", sessions: sessionViews("boss", "w1", "w2")},
		Env: MapEnv{EnvWorkerID: "w2"}, Registry: reg})
	_, err = w.InspectInbox(ctx, InspectRequest{Session: "w1"})
	require.ErrorIs(t, err, ErrInspectionDenied, "a coworker is no manager")
}

// A Boss team-only service resolves the Boss team; an unusable contract
// fails closed.
func TestServiceBossTeam(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	ops := &fakeOps{self: bWorker, sessions: sessionViews(bManager, bWorker, "outsider")}
	s := NewService(ServiceConfig{Paths: p, Ops: ops, Env: bossEnv("worker")})
	team, err := s.Team(ctx)
	require.NoError(t, err)
	require.Equal(t, bManager, team.Manager.Target)
	require.Empty(t, team.Coworkers)

	local := NewService(ServiceConfig{Paths: p, Ops: ops, Env: bossEnv("worker").with(EnvBossVisibility, "local").with(EnvScope, "Scope_AAAAAAAAAAAA")})
	team, err = local.Team(ctx)
	require.NoError(t, err)
	require.Equal(t, SourceLiveRoster, team.Source, "local visibility resolves as usual")

	// Named teams' rosters are other sessions' ids: discovery, refused.
	_, err = s.NamedTeams(ctx)
	var be *BossError
	require.True(t, errors.As(err, &be), "%v", err)
	require.Equal(t, BossScopeDenied, be.Code)
	_, err = local.NamedTeams(ctx)
	require.NoError(t, err, "local visibility may list them")

	bad := NewService(ServiceConfig{Paths: p, Ops: ops, Env: bossEnv("scout")})
	_, err = bad.Team(ctx)
	require.ErrorIs(t, err, ErrBossDenied)
}

// The team operations cross a real holder socket with their errors intact;
// a holder without them answers ErrUnsupported.
func TestHolderTeams(t *testing.T) {
	dir, err := os.MkdirTemp("", "aft")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := intercom.NewPaths(dir)
	now := time.Now()
	stageInto(t, p, "w1", msg{"someone", "q1", true, now})
	reg := &fakeRegistry{workers: []WorkerRecord{live("w1", "aaaaaaaaaaaa", "boss", "exec", "")}}
	ops := &fakeOps{self: "boss", sessions: sessionViews("boss", "w1")}
	sw := &switcher{}
	env := MapEnv{}
	svc := NewService(ServiceConfig{Paths: p, Ops: ops, Env: env, Registry: reg, Switch: sw.Switch})

	serve := func(id string, extra func(context.Context, string, json.RawMessage) (any, bool, error)) *intercom.HolderClient {
		cfg := intercom.HolderConfig{Paths: p, SessionID: id, Ops: &fakeOps{self: id}, Extra: extra}
		h, err := intercom.ListenHolder(cfg)
		require.NoError(t, err)
		hctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = h.Serve(hctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		hc, err := intercom.DialHolder(ctx, p, id)
		require.NoError(t, err)
		return hc
	}
	remote := HolderTeams{Client: serve("boss", HolderExtra(svc))}

	team, err := remote.Team(ctx)
	require.NoError(t, err)
	require.Equal(t, SourceOrchestrator, team.Source)
	require.True(t, team.Self.IsManager)
	require.False(t, team.FromRegistry(), "the right to inspect stays in the holder")

	insp, err := remote.InspectInbox(ctx, InspectRequest{Session: "w1"})
	require.NoError(t, err)
	require.Len(t, insp.Asks, 1)
	_, err = remote.InspectInbox(ctx, InspectRequest{Session: "stranger"})
	require.ErrorIs(t, err, ErrInspectionDenied)

	res, err := remote.Join(ctx, JoinRequest{Name: "ops", Create: true})
	require.NoError(t, err)
	require.Equal(t, "manager", res.Role)
	require.Len(t, sw.scopes, 1, "the holder's session moved")
	require.Equal(t, sw.scopes[0], env[EnvScope])
	list, err := remote.NamedTeams(ctx)
	require.NoError(t, err)
	require.Equal(t, "ops", list[0].Name)
	require.True(t, list[0].Joined)
	_, err = remote.Join(ctx, JoinRequest{Name: "nope"})
	require.ErrorIs(t, err, ErrTeamNotFound)
	_, err = remote.Join(ctx, JoinRequest{Name: "ops", Create: true})
	require.ErrorIs(t, err, ErrTeamExists)
	_, err = remote.Join(ctx, JoinRequest{Name: "not valid"})
	require.ErrorIs(t, err, ErrInvalidTeamName)

	// Errors of the manifest and of Boss keep their identity too.
	env[EnvManifest] = "relative.json"
	reg.workers = nil
	_, err = remote.Team(ctx)
	require.ErrorIs(t, err, manifest.ErrInvalid)
	delete(env, EnvManifest)
	for k, v := range bossEnv("scout") {
		env[k] = v
	}
	svc.cfg.Boss = ReadBoss(env)
	_, err = remote.Team(ctx)
	var be *BossError
	require.True(t, errors.As(err, &be), "%v", err)
	require.Equal(t, BossMetadataInvalid, be.Code)

	// A holder without team operations (a worker shim's).
	plain := HolderTeams{Client: serve("w1", nil)}
	_, err = plain.Team(ctx)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = plain.Join(ctx, JoinRequest{Name: "ops"})
	require.ErrorIs(t, err, ErrUnsupported)
}
