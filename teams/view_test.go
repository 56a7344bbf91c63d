package teams

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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

func viewPaths(t *testing.T) intercom.Paths {
	t.Helper()
	return intercom.NewPaths(t.TempDir())
}

// The view passes the reader rules: for every worker and every manager the
// TypeScript reader resolves the same team from it as agent-fleet does from
// the registry.
func TestWorkersViewMatchesTheReader(t *testing.T) {
	p := viewPaths(t)
	reg := &fakeRegistry{workers: []WorkerRecord{
		live("w1", "aaaaaaaaaaaa", "boss", "exec", "builder"),
		live("w2", "bbbbbbbbbbbb", "boss", "claude", ""),
		{ID: "w3", RunID: "cccccccccccc", Manager: "boss", Harness: "pi", State: "provisioning", Live: true},
		{ID: "w4", RunID: "dddddddddddd", Manager: "boss", Harness: "exec", State: "stopping", Live: true},
		ended("w5", "eeeeeeeeeeee", "boss"),
		live("z1", "ffffffffffff", "operator-me", "codex", "reviewer"),
	}}
	state, err := RefreshWorkersView(ctx, p, reg.LiveWorkers)
	require.NoError(t, err)
	require.Equal(t, ViewOurs, state)
	fi, err := os.Stat(WorkersViewPath(p))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	workers := legacyRead(t, WorkersViewPath(p))
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
	_, err = RefreshWorkersView(ctx, p, reg.LiveWorkers)
	require.NoError(t, err)
	got := legacyTeam(legacyRead(t, WorkersViewPath(p)), MapEnv{EnvWorkerID: "w1"}, "w1", sessions)
	require.Equal(t, "new-boss", got.Manager.Target)
	require.Empty(t, got.Coworkers)
}

func TestWorkersViewOwnership(t *testing.T) {
	reg := &fakeRegistry{workers: []WorkerRecord{live("w1", "aaaaaaaaaaaa", "boss", "exec", "")}}
	cases := map[string]struct {
		existing *string
		want     ViewState
		written  bool
	}{
		"absent":                 {nil, ViewOurs, true},
		"ours":                   {ptr(`{"version":1,"writer":"agent-fleet","workers":[]}`), ViewOurs, true},
		"typescript v4 registry": {ptr(`{"version":4,"generation":7,"workers":[],"workerGenerations":[]}`), ViewForeign, false},
		"legacy v1 by hand":      {ptr(`{"version":1,"workers":[{"id":"x","owned":true}]}`), ViewForeign, false},
		"another writer":         {ptr(`{"version":1,"writer":"someone-else","workers":[]}`), ViewForeign, false},
		"writer not a string":    {ptr(`{"version":1,"writer":["agent-fleet"],"workers":[]}`), ViewForeign, false},
		"torn file":              {ptr(`{"version":4,"workers":[`), ViewUnreadable, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := viewPaths(t)
			path := WorkersViewPath(p)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
			if c.existing != nil {
				require.NoError(t, os.WriteFile(path, []byte(*c.existing), 0o600))
			}
			before := InspectWorkersView(p)
			state, err := RefreshWorkersView(ctx, p, reg.LiveWorkers)
			require.NoError(t, err)
			require.Equal(t, c.want, state)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			if c.written {
				var v viewFile
				require.NoError(t, json.Unmarshal(data, &v))
				require.Equal(t, "boss", v.Workers[0].ManagerSessionID)
				require.Equal(t, ViewStatus{State: ViewOurs, Path: path, Workers: 1}, InspectWorkersView(p))
			} else {
				require.Equal(t, *c.existing, string(data), "never touched")
				require.Equal(t, before.State, InspectWorkersView(p).State)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// viewFile is the whole workers.json view, as its readers parse it.
type viewFile struct {
	Version int          `json:"version"`
	Writer  string       `json:"writer"`
	Workers []viewWorker `json:"workers"`
}

// The view is JSON whatever the strings hold, and a view of ours is known
// and counted without a parse — also one written indented by an earlier
// agent-fleet.
func TestWorkersViewEncoding(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		var ws []WorkerRecord
		for i := range n {
			ws = append(ws, live(fmt.Sprintf("w%d", i), "aaaaaaaaaaaa", "boss", "exec", "role\n    {\"x\": \"y\"}"))
		}
		ws = append(ws, WorkerRecord{ID: "gone", RunID: "bbbbbbbbbbbb", State: "exited"})
		data := encodeView(ws)
		var v viewFile
		require.NoError(t, json.Unmarshal(data, &v), "%s", data)
		require.Equal(t, 1, v.Version)
		require.Equal(t, WorkersViewWriter, v.Writer)
		require.Len(t, v.Workers, n)
		require.NotNil(t, v.Workers)
		if n > 0 {
			require.Equal(t, "role\n    {\"x\": \"y\"}", v.Workers[0].Role)
		}
		indented, err := json.MarshalIndent(v, "", "  ")
		require.NoError(t, err)
		for _, form := range [][]byte{data, indented} {
			path := filepath.Join(t.TempDir(), "workers.json")
			require.NoError(t, os.WriteFile(path, form, 0o600))
			st, _ := inspectView(path)
			require.Equal(t, ViewStatus{State: ViewOurs, Path: path, Workers: n}, st, "%s", form)
		}
	}
}

// Refreshes of many writers never interleave, and the last one wins.
func TestWorkersViewConcurrentRefresh(t *testing.T) {
	p := viewPaths(t)
	reg := &fakeRegistry{}
	done := make(chan error, 16)
	for i := 0; i < 16; i++ {
		go func() {
			_, err := RefreshWorkersView(ctx, p, reg.LiveWorkers)
			done <- err
		}()
	}
	for i := 0; i < 16; i++ {
		require.NoError(t, <-done)
	}
	data, err := os.ReadFile(WorkersViewPath(p))
	require.NoError(t, err)
	require.JSONEq(t, `{"version":1,"writer":"agent-fleet","workers":[]}`, string(data))
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(WorkersViewPath(p)), "*.tmp"))
	require.Empty(t, matches)
}
