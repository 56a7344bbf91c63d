package teams

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// legacyRead is the TypeScript adapters' workers.json reader (spec §7 item
// 1), as a test oracle: an unparseable file or one without a workers array
// reads as no workers; records are loose JSON.
func legacyRead(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var top struct {
		Workers any `json:"workers"`
	}
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	list, _ := top.Workers.([]any)
	var out []map[string]any
	for _, w := range list {
		m, _ := w.(map[string]any)
		out = append(out, m)
	}
	return out
}

func strValue(v any) string {
	s, _ := v.(string)
	return strings.TrimSpace(s)
}

var legacyLive = map[string]bool{"provisioning": true, "running": true, "idle": true, "needs_attention": true, "stopping": true}

// legacyTeam is the reader's orchestrator branch: nil when it does not
// apply.
func legacyTeam(workers []map[string]any, env MapEnv, self string, sessions []Session) *Team {
	workerID := trimmed(env, EnvWorkerID)
	runID := trimmed(env, EnvRunID)
	member := func(w map[string]any) *Member {
		id := strValue(w["id"])
		if id == "" {
			return nil
		}
		target := firstNonEmpty(strValue(w["intercomTarget"]), id)
		return &Member{ID: id, Target: target, Harness: strValue(w["harness"]), Role: strValue(w["role"]),
			State: strValue(w["state"]), Connected: connectedTo(sessions, target)}
	}
	if workerID != "" {
		for _, cur := range workers {
			if strValue(cur["id"]) != workerID || (runID != "" && strValue(cur["runId"]) != runID) {
				continue
			}
			manager := firstNonEmpty(strValue(cur["managerSessionId"]), trimmed(env, EnvManagerTarget), trimmed(env, EnvManagerID))
			t := &Team{Source: SourceOrchestrator, TeamID: manager, Self: Self{ID: self, WorkerID: workerID}, Coworkers: []Member{}}
			if manager == "" {
				return t
			}
			t.Manager = &Endpoint{Target: manager, Connected: connectedTo(sessions, manager)}
			for _, w := range workers {
				if w["owned"] == true && strValue(w["managerSessionId"]) == manager && legacyLive[strValue(w["state"])] && strValue(w["id"]) != workerID {
					if m := member(w); m != nil {
						t.Coworkers = append(t.Coworkers, *m)
					}
				}
			}
			return t
		}
		return nil
	}
	t := &Team{Source: SourceOrchestrator, TeamID: self, Self: Self{ID: self, IsManager: true},
		Manager: &Endpoint{Target: self, Connected: true}, Coworkers: []Member{}}
	for _, w := range workers {
		if w["owned"] == true && strValue(w["managerSessionId"]) == self && legacyLive[strValue(w["state"])] {
			if m := member(w); m != nil {
				t.Coworkers = append(t.Coworkers, *m)
			}
		}
	}
	if len(t.Coworkers) == 0 {
		return nil
	}
	return t
}

// fleetRegistry is a fleet registry in a temp agent directory holding
// records, whose workers.json view is the one under test.
func fleetRegistry(t *testing.T, p intercom.Paths, records []WorkerRecord) *fleet.Registry {
	t.Helper()
	reg, err := fleet.OpenRegistry(ctx, fleet.RegistryPath(p))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	for _, r := range records {
		require.NoError(t, reg.Insert(ctx, &fleet.Worker{ID: r.ID, RunID: r.RunID, Kind: r.Harness, Role: r.Role,
			Manager: r.Manager, FirstManager: r.Manager, State: fleet.State(r.State)}))
	}
	reg.AwaitChangeHook()
	return reg
}

// The view fleet keeps beside the registry passes the reader rules: for
// every worker and every manager the TypeScript reader resolves the same
// team from it as agent-fleet does from the registry. (fleet's own tests
// cover the view's ownership and encoding.)
func TestWorkersViewMatchesTheReader(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	reg := &fakeRegistry{workers: []WorkerRecord{
		live("w1", "aaaaaaaaaaaa", "boss", "exec", "builder"),
		live("w2", "bbbbbbbbbbbb", "boss", "claude", ""),
		{ID: "w3", RunID: "cccccccccccc", Manager: "boss", Harness: "pi", State: "provisioning", Live: true},
		{ID: "w4", RunID: "dddddddddddd", Manager: "boss", Harness: "exec", State: "stopping", Live: true},
		ended("w5", "eeeeeeeeeeee", "boss"),
		live("z1", "ffffffffffff", "operator-me", "codex", "reviewer"),
	}}
	freg := fleetRegistry(t, p, reg.workers)
	fi, err := os.Stat(fleet.WorkersViewPath(p))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	var mark struct{ Writer string }
	data, err := os.ReadFile(fleet.WorkersViewPath(p))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &mark))
	require.Equal(t, "agent-fleet", mark.Writer, "the view is agent-fleet's")

	workers := legacyRead(t, fleet.WorkersViewPath(p))
	require.Len(t, workers, 5, "live workers only")
	for _, w := range workers {
		require.Contains(t, legacyLive, w["state"])
		require.Equal(t, true, w["owned"])
		require.Equal(t, w["id"], w["intercomTarget"])
	}
	sessions := sessionsOf("w1", "boss", "w3", "operator-me")
	type caller struct {
		self string
		env  MapEnv
	}
	callers := []caller{
		{"w1", MapEnv{EnvWorkerID: "w1"}}, {"w2", MapEnv{EnvWorkerID: "w2", EnvRunID: "bbbbbbbbbbbb"}},
		{"w3", MapEnv{EnvWorkerID: "w3"}}, {"w4", MapEnv{EnvWorkerID: "w4"}}, {"z1", MapEnv{EnvWorkerID: "z1"}},
		{"boss", MapEnv{}}, {"operator-me", MapEnv{}},
	}
	for _, c := range callers {
		want := legacyTeam(workers, c.env, c.self, sessions)
		require.NotNil(t, want, c.self)
		got, err := (&Resolver{Env: c.env, Registry: reg}).Resolve(ctx, c.self, sessions)
		require.NoError(t, err)
		got.fromRegistry = false
		require.Equal(t, want, got, c.self)
	}
	// A worker that ended is not in the view: the reader does not resolve it.
	require.Nil(t, legacyTeam(workers, MapEnv{EnvWorkerID: "w5"}, "w5", sessions))

	// After an adoption the rewritten view names the new manager.
	reg.setManager("w1", "new-boss")
	_, err = freg.Update(ctx, "w1", "aaaaaaaaaaaa", func(w *fleet.Worker) error { w.Manager = "new-boss"; return nil })
	require.NoError(t, err)
	freg.AwaitChangeHook()
	got := legacyTeam(legacyRead(t, fleet.WorkersViewPath(p)), MapEnv{EnvWorkerID: "w1"}, "w1", sessions)
	require.Equal(t, "new-boss", got.Manager.Target)
	require.Empty(t, got.Coworkers)
}
