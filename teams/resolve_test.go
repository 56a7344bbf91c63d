package teams

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/manifest"
)

var ctx = context.Background()

const (
	mRun    = "team_1a2b3c4d-5e6f-47a8-b9c0-d1e2f3a4b5c6"
	mLead   = "tmuxdeck-c8f1e03a-9b4d-4c7e-81f6-a8b0c3d5e7f9"
	mWorker = "tmuxdeck-9a1b3c5d-7e9f-4a2b-84cc-8f1e03a9b4d2"
	mOther  = "tmuxdeck-3e5f7a9b-1c2d-4e6f-8a0b-2c4d6e8f0a1b"
)

// manifestFile writes a valid manifest (0600 in a 0700 directory).
func manifestFile(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "team")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, 0o700))
	data, _ := json.Marshal(map[string]any{
		"version": manifest.Version, "backend": manifest.Backend, "runId": mRun, "leadId": mLead,
		"members": []any{
			map[string]any{"sessionId": mLead, "role": "lead"},
			map[string]any{"sessionId": mWorker, "role": "worker"},
			map[string]any{"sessionId": mOther, "role": "worker"},
		},
		"createdAt": 1723680000000, "capabilities": []any{},
	})
	path := filepath.Join(dir, "team.json")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	require.NoError(t, os.Chmod(path, 0o600))
	return path
}

func badManifestFile(t *testing.T) string {
	t.Helper()
	path := manifestFile(t)
	require.NoError(t, os.WriteFile(path, []byte(`{"version":"tmuxdeck.team.v1"}`), 0o600))
	return path
}

// TestResolve covers every branch of spec §7 resolution, first match wins.
func TestResolve(t *testing.T) {
	fleet := func() *fakeRegistry {
		return &fakeRegistry{workers: []WorkerRecord{
			live("w1", "aaaaaaaaaaaa", "boss-1", "exec", "builder"),
			live("w2", "bbbbbbbbbbbb", "boss-1", "claude", ""),
			{ID: "w3", RunID: "cccccccccccc", Manager: "boss-1", Harness: "exec", State: "stopping", Live: true},
			ended("w4", "dddddddddddd", "boss-1"),
			live("x1", "eeeeeeeeeeee", "boss-2", "exec", ""),
			ended("w1", "ffffffffffff", "boss-old"),
			live("nomgr", "121212121212", "", "exec", ""),
		}}
	}
	mpath := manifestFile(t)
	cases := []struct {
		name     string
		self     string
		env      MapEnv
		reg      Registry
		sessions []Session
		want     *Team
		wantErr  error
	}{
		{
			name: "registry: worker with manager and coworkers", self: "w1",
			env: MapEnv{EnvWorkerID: "w1", EnvManagerTarget: "stale-manager"}, reg: fleet(),
			sessions: sessionsOf("w1", "boss-1", "w2"),
			want: &Team{Source: SourceOrchestrator, TeamID: "boss-1", Self: Self{ID: "w1", WorkerID: "w1"},
				Manager: &Endpoint{Target: "boss-1", Connected: true},
				Coworkers: []Member{
					{ID: "w2", Target: "w2", Harness: "claude", State: "running", Connected: true},
					{ID: "w3", Target: "w3", Harness: "exec", State: "stopping"},
				}},
		},
		{
			name: "registry: the run id picks the incarnation", self: "w1",
			env: MapEnv{EnvWorkerID: "w1", EnvRunID: "ffffffffffff"}, reg: fleet(), sessions: sessionsOf("w1"),
			want: &Team{Source: SourceOrchestrator, TeamID: "boss-old", Self: Self{ID: "w1", WorkerID: "w1"},
				Manager: &Endpoint{Target: "boss-old"}, Coworkers: []Member{}},
		},
		{
			name: "registry: manager matched by case-insensitive name", self: "w2",
			env: MapEnv{EnvWorkerID: "w2"}, reg: fleet(),
			sessions: []Session{{ID: "w2"}, {ID: "9f8e", Name: "BOSS-1"}},
			want: &Team{Source: SourceOrchestrator, TeamID: "boss-1", Self: Self{ID: "w2", WorkerID: "w2"},
				Manager: &Endpoint{Target: "boss-1", Connected: true},
				Coworkers: []Member{
					{ID: "w1", Target: "w1", Harness: "exec", Role: "builder", State: "running"},
					{ID: "w3", Target: "w3", Harness: "exec", State: "stopping"},
				}},
		},
		{
			name: "registry: no manager recorded, the environment's is used", self: "nomgr",
			env: MapEnv{EnvWorkerID: "nomgr", EnvManagerID: "env-boss"}, reg: fleet(), sessions: sessionsOf("nomgr"),
			want: &Team{Source: SourceOrchestrator, TeamID: "env-boss", Self: Self{ID: "nomgr", WorkerID: "nomgr"},
				Manager: &Endpoint{Target: "env-boss"}, Coworkers: []Member{}},
		},
		{
			name: "registry: no manager anywhere", self: "nomgr",
			env: MapEnv{EnvWorkerID: "nomgr"}, reg: fleet(), sessions: sessionsOf("nomgr"),
			want: &Team{Source: SourceOrchestrator, Self: Self{ID: "nomgr", WorkerID: "nomgr"}, Coworkers: []Member{}},
		},
		{
			name: "registry: the caller manages live workers", self: "boss-1",
			env: MapEnv{EnvScope: "Scope_AAAAAAAAAAAA"}, reg: fleet(), sessions: sessionsOf("boss-1", "w1"),
			want: &Team{Source: SourceOrchestrator, TeamID: "boss-1", Self: Self{ID: "boss-1", IsManager: true},
				Manager: &Endpoint{Target: "boss-1", Connected: true},
				Coworkers: []Member{
					{ID: "w1", Target: "w1", Harness: "exec", Role: "builder", State: "running", Connected: true},
					{ID: "w2", Target: "w2", Harness: "claude", State: "running"},
					{ID: "w3", Target: "w3", Harness: "exec", State: "stopping"},
				}},
		},
		{
			name: "registry beats the manifest", self: "w1",
			env: MapEnv{EnvWorkerID: "w1", EnvManifest: mpath}, reg: fleet(), sessions: sessionsOf("w1"),
			want: &Team{Source: SourceOrchestrator, TeamID: "boss-1", Self: Self{ID: "w1", WorkerID: "w1"},
				Manager: &Endpoint{Target: "boss-1"},
				Coworkers: []Member{
					{ID: "w2", Target: "w2", Harness: "claude", State: "running"},
					{ID: "w3", Target: "w3", Harness: "exec", State: "stopping"},
				}},
		},
		{
			name: "registry: a worker unknown to the registry falls through", self: "ghost",
			env: MapEnv{EnvWorkerID: "ghost", EnvScope: "Scope_AAAAAAAAAAAA"}, reg: fleet(), sessions: sessionsOf("ghost", "peer"),
			want: &Team{Source: SourceLiveRoster, TeamID: "ghost", Self: Self{ID: "ghost", IsManager: true},
				Manager: &Endpoint{Target: "ghost", Connected: true}, Coworkers: []Member{{ID: "peer", Target: "peer", Connected: true}}},
		},
		{
			name: "registry: a named worker never becomes a manager", self: "boss-1",
			env: MapEnv{EnvWorkerID: "boss-1"}, reg: fleet(), sessions: sessionsOf("boss-1"),
			want: &Team{Source: SourceStandalone, Self: Self{ID: "boss-1"}, Coworkers: []Member{}},
		},
		{
			name: "registry: a manager of ended workers only is no manager", self: "boss-old",
			reg: fleet(), env: MapEnv{}, sessions: sessionsOf("boss-old"),
			want: &Team{Source: SourceStandalone, Self: Self{ID: "boss-old"}, Coworkers: []Member{}},
		},
		{
			name: "registry: failing for a worker is an error", self: "w1",
			env: MapEnv{EnvWorkerID: "w1", EnvScope: "Scope_AAAAAAAAAAAA"}, reg: &fakeRegistry{err: errors.New("disk on fire")},
			wantErr: ErrRegistry,
		},
		{
			name: "registry: failing for a non-worker falls through", self: "someone",
			env: MapEnv{EnvScope: "Scope_AAAAAAAAAAAA"}, reg: &fakeRegistry{err: errors.New("disk on fire")}, sessions: sessionsOf("someone"),
			want: &Team{Source: SourceLiveRoster, TeamID: "someone", Self: Self{ID: "someone", IsManager: true},
				Manager: &Endpoint{Target: "someone", Connected: true}, Coworkers: []Member{}},
		},
		{
			name: "manifest: the lead", self: mLead, env: MapEnv{EnvManifest: mpath, EnvScope: "Scope_AAAAAAAAAAAA"},
			sessions: sessionsOf(mLead, mWorker),
			want: &Team{Source: SourceManifest, TeamID: mRun, Self: Self{ID: mLead, IsManager: true, Role: "lead"},
				Manager:   &Endpoint{Target: mLead, Connected: true},
				Coworkers: []Member{{ID: mWorker, Target: mWorker, Role: "worker", Connected: true}, {ID: mOther, Target: mOther, Role: "worker"}}},
		},
		{
			name: "manifest: a worker, path padded", self: mWorker, env: MapEnv{EnvManifest: " " + mpath + " "},
			sessions: sessionsOf(mWorker, mOther),
			want: &Team{Source: SourceManifest, TeamID: mRun, Self: Self{ID: mWorker, Role: "worker"},
				Manager:   &Endpoint{Target: mLead},
				Coworkers: []Member{{ID: mOther, Target: mOther, Role: "worker", Connected: true}}},
		},
		{name: "manifest: not a member", self: "someone", env: MapEnv{EnvManifest: mpath}, wantErr: manifest.ErrInvalid},
		{name: "manifest: set but empty", self: mLead, env: MapEnv{EnvManifest: "", EnvScope: "Scope_AAAAAAAAAAAA"}, wantErr: manifest.ErrInvalid},
		{name: "manifest: blank", self: mLead, env: MapEnv{EnvManifest: "  \t"}, wantErr: manifest.ErrInvalid},
		{name: "manifest: relative", self: mLead, env: MapEnv{EnvManifest: "team.json"}, wantErr: manifest.ErrInvalid},
		{name: "manifest: missing never falls back to the roster", self: mLead,
			env: MapEnv{EnvManifest: filepath.Join(filepath.Dir(mpath), "nope.json"), EnvScope: "Scope_AAAAAAAAAAAA"}, wantErr: manifest.ErrUnavailable},
		{name: "manifest: invalid never falls back to the roster", self: mLead,
			env: MapEnv{EnvManifest: badManifestFile(t), EnvScope: "Scope_AAAAAAAAAAAA"}, wantErr: manifest.ErrInvalid},
		{
			name: "live roster: manager from the environment", self: "me",
			env:      MapEnv{EnvScope: "Scope_AAAAAAAAAAAA", EnvManagerTarget: "lead"},
			sessions: []Session{{ID: "me"}, {ID: "lead", Name: "lead"}, {ID: "peer"}, {ID: "person", Model: "human"}},
			want: &Team{Source: SourceLiveRoster, TeamID: "lead", Self: Self{ID: "me"},
				Manager: &Endpoint{Target: "lead", Connected: true}, Coworkers: []Member{{ID: "peer", Target: "peer", Connected: true}}},
		},
		{
			name: "live roster: manager session id as the fallback, not connected", self: "me",
			env:      MapEnv{EnvScope: "Scope_AAAAAAAAAAAA", EnvManagerID: " lead "},
			sessions: []Session{{ID: "me"}, {ID: "peer"}},
			want: &Team{Source: SourceLiveRoster, TeamID: "lead", Self: Self{ID: "me"},
				Manager: &Endpoint{Target: "lead"}, Coworkers: []Member{{ID: "peer", Target: "peer", Connected: true}}},
		},
		{
			name: "live roster: no manager makes self the manager", self: "me",
			env:      MapEnv{EnvScope: "Scope_AAAAAAAAAAAA"},
			sessions: []Session{{ID: "me"}, {ID: "peer"}, {ID: "other"}},
			want: &Team{Source: SourceLiveRoster, TeamID: "me", Self: Self{ID: "me", IsManager: true},
				Manager:   &Endpoint{Target: "me", Connected: true},
				Coworkers: []Member{{ID: "peer", Target: "peer", Connected: true}, {ID: "other", Target: "other", Connected: true}}},
		},
		{
			name: "live roster: the manager target is self", self: "me",
			env:      MapEnv{EnvScope: "Scope_AAAAAAAAAAAA", EnvManagerTarget: "me"},
			sessions: []Session{{ID: "me"}, {ID: "peer"}},
			want: &Team{Source: SourceLiveRoster, TeamID: "me", Self: Self{ID: "me", IsManager: true},
				Manager: &Endpoint{Target: "me", Connected: true}, Coworkers: []Member{{ID: "peer", Target: "peer", Connected: true}}},
		},
		{
			name: "standalone: blank scope", self: "me", env: MapEnv{EnvScope: "  ", EnvManagerTarget: "lead"},
			sessions: sessionsOf("me", "peer"),
			want:     &Team{Source: SourceStandalone, Self: Self{ID: "me"}, Coworkers: []Member{}},
		},
		{
			name: "standalone: nothing set, no registry", self: "me", env: MapEnv{}, sessions: sessionsOf("me"),
			want: &Team{Source: SourceStandalone, Self: Self{ID: "me"}, Coworkers: []Member{}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if strings.HasPrefix(c.name, "manifest") && runtime.GOOS == "windows" {
				t.Skip("POSIX file checks")
			}
			r := &Resolver{Env: c.env, Registry: c.reg}
			got, err := r.Resolve(ctx, c.self, c.sessions)
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			got.fromRegistry = false
			require.Equal(t, c.want, got)
		})
	}
}

// The broker's word on exact ids counts for registry teams: a manager in
// another scope is still connected.
func TestResolveConnectedThroughTheBroker(t *testing.T) {
	reg := &fakeRegistry{workers: []WorkerRecord{live("w1", "aaaaaaaaaaaa", "far-boss", "exec", "")}}
	r := &Resolver{Env: MapEnv{EnvWorkerID: "w1"}, Registry: reg,
		Connected: func(_ context.Context, id string) bool { return id == "far-boss" }}
	got, err := r.Resolve(ctx, "w1", sessionsOf("w1"))
	require.NoError(t, err)
	require.True(t, got.Manager.Connected)
	require.True(t, got.FromRegistry())

	// So for a live roster: a named team's manager in another scope.
	r = &Resolver{Env: MapEnv{EnvScope: "Scope_AAAAAAAAAAAA", EnvManagerTarget: "far-boss"},
		Connected: func(_ context.Context, id string) bool { return id == "far-boss" }}
	got, err = r.Resolve(ctx, "me", sessionsOf("me"))
	require.NoError(t, err)
	require.Equal(t, SourceLiveRoster, got.Source)
	require.True(t, got.Manager.Connected)
}

// A worker's team follows adoption: the next resolution names the new
// manager and its workers, without a restart.
func TestResolveFollowsAdoption(t *testing.T) {
	reg := &fakeRegistry{workers: []WorkerRecord{
		live("w1", "aaaaaaaaaaaa", "old-boss", "exec", ""),
		live("w2", "bbbbbbbbbbbb", "old-boss", "exec", ""),
		live("n1", "cccccccccccc", "new-boss", "exec", ""),
	}}
	r := &Resolver{Env: MapEnv{EnvWorkerID: "w1", EnvManagerTarget: "old-boss"}, Registry: reg}
	got, err := r.Resolve(ctx, "w1", sessionsOf("w1", "new-boss"))
	require.NoError(t, err)
	require.Equal(t, "old-boss", got.Manager.Target)
	require.Equal(t, "w2", got.Coworkers[0].ID)

	reg.setManager("w1", "new-boss")
	got, err = r.Resolve(ctx, "w1", sessionsOf("w1", "new-boss"))
	require.NoError(t, err)
	require.Equal(t, &Endpoint{Target: "new-boss", Connected: true}, got.Manager)
	require.Equal(t, "new-boss", got.TeamID)
	require.Equal(t, []Member{{ID: "n1", Target: "n1", Harness: "exec", State: "running"}}, got.Coworkers)
}

func TestFormat(t *testing.T) {
	cases := map[string]struct {
		team *Team
		want string
	}{
		"worker": {&Team{Self: Self{ID: "worker"}, Manager: &Endpoint{Target: "planner", Connected: true},
			Coworkers: []Member{{ID: "reviewer", Target: "reviewer", Harness: "pi", Role: "worker", State: "running", Connected: true},
				{ID: "w9", Target: "w9"}}},
			"Manager: planner [connected]\nYou: worker\nCoworkers:\n- reviewer target=reviewer (pi, worker, running) [connected]\n- w9 target=w9 [not connected]"},
		"manager with controller": {&Team{Self: Self{ID: "m", IsManager: true}, Manager: &Endpoint{Target: "m", Connected: true},
			Controller: &Endpoint{Target: "ctl", Connected: true}, Coworkers: []Member{}},
			"Manager: m [connected]\nYou: m [manager]\nController: ctl [connected]\nCoworkers: none"},
		"standalone": {&Team{Source: SourceStandalone, Self: Self{ID: "me"}, Coworkers: []Member{}},
			"Manager: unknown\nYou: me\nCoworkers: none"},
		"manager not connected, partial metadata": {&Team{Self: Self{ID: "me"}, Manager: &Endpoint{Target: "lead"},
			Coworkers: []Member{{ID: "a", Target: "a", Role: "worker"}}},
			"Manager: lead [not connected]\nYou: me\nCoworkers:\n- a target=a (worker) [not connected]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) { require.Equal(t, c.want, Format(c.team)) })
	}
}

// The structured form has exactly the spec's keys, optional ones omitted.
func TestTeamJSON(t *testing.T) {
	data, err := json.Marshal(&Team{Source: SourceStandalone, Self: Self{ID: "me"}, Coworkers: []Member{}, fromRegistry: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"source":"standalone","self":{"id":"me","isManager":false},"coworkers":[]}`, string(data))
	data, _ = json.Marshal(&Team{Source: SourceOrchestrator, TeamID: "b", Self: Self{ID: "w", WorkerID: "w", Role: "r"},
		Manager: &Endpoint{Target: "b"}, Coworkers: []Member{{ID: "x", Target: "x", Harness: "exec"}}})
	require.JSONEq(t, `{"source":"orchestrator","teamId":"b","self":{"id":"w","workerId":"w","isManager":false,"role":"r"},
		"manager":{"target":"b","connected":false},"coworkers":[{"id":"x","target":"x","harness":"exec","connected":false}]}`, string(data))
}
