package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// (teams' TestWorkersViewMatchesTheReader checks the view against the
// TypeScript adapters' reader and agent-fleet's own team resolution.)

func viewPaths(t *testing.T) intercom.Paths {
	t.Helper()
	return intercom.NewPaths(t.TempDir())
}

// summaries is a list function over fixed workers.
func summaries(ws ...Summary) func(context.Context) ([]Summary, error) {
	return func(context.Context) ([]Summary, error) { return ws, nil }
}

func TestWorkersViewOwnership(t *testing.T) {
	ctx := context.Background()
	list := summaries(Summary{ID: "w1", RunID: "aaaaaaaaaaaa", Manager: "boss", Kind: "exec", State: StateRunning})
	cases := map[string]struct {
		existing *string
		want     viewState
		written  bool
	}{
		"absent":                 {nil, viewOurs, true},
		"ours":                   {ptr(`{"version":1,"writer":"agent-fleet","workers":[]}`), viewOurs, true},
		"typescript v4 registry": {ptr(`{"version":4,"generation":7,"workers":[],"workerGenerations":[]}`), viewForeign, false},
		"legacy v1 by hand":      {ptr(`{"version":1,"workers":[{"id":"x","owned":true}]}`), viewForeign, false},
		"another writer":         {ptr(`{"version":1,"writer":"someone-else","workers":[]}`), viewForeign, false},
		"writer not a string":    {ptr(`{"version":1,"writer":["agent-fleet"],"workers":[]}`), viewForeign, false},
		"torn file":              {ptr(`{"version":4,"workers":[`), viewUnreadable, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := viewPaths(t)
			path := WorkersViewPath(p)
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
			if c.existing != nil {
				require.NoError(t, os.WriteFile(path, []byte(*c.existing), 0o600))
			}
			before, _ := inspectView(path)
			state, err := refreshView(ctx, path, list)
			require.NoError(t, err)
			require.Equal(t, c.want, state)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			after, _ := inspectView(path)
			if c.written {
				var v viewFile
				require.NoError(t, json.Unmarshal(data, &v))
				require.Equal(t, "boss", v.Workers[0].ManagerSessionID)
				require.Equal(t, viewStatus{State: viewOurs, Path: path, Workers: 1}, after)
			} else {
				require.Equal(t, *c.existing, string(data), "never touched")
				require.Equal(t, before.State, after.State)
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
		var ws []Summary
		for i := range n {
			ws = append(ws, Summary{ID: fmt.Sprintf("w%d", i), RunID: "aaaaaaaaaaaa", Manager: "boss", Kind: "exec",
				Role: "role\n    {\"x\": \"y\"}", State: StateRunning})
		}
		ws = append(ws, Summary{ID: "gone", RunID: "bbbbbbbbbbbb", State: StateExited})
		data := encodeView(ws)
		var v viewFile
		require.NoError(t, json.Unmarshal(data, &v), "%s", data)
		require.Equal(t, 1, v.Version)
		require.Equal(t, workersViewWriter, v.Writer)
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
			require.Equal(t, viewStatus{State: viewOurs, Path: path, Workers: n}, st, "%s", form)
		}
	}
}

// Refreshes of many writers never interleave, and the last one wins.
func TestWorkersViewConcurrentRefresh(t *testing.T) {
	ctx := context.Background()
	path := WorkersViewPath(viewPaths(t))
	done := make(chan error, 16)
	for i := 0; i < 16; i++ {
		go func() {
			_, err := refreshView(ctx, path, summaries())
			done <- err
		}()
	}
	for i := 0; i < 16; i++ {
		require.NoError(t, <-done)
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.JSONEq(t, `{"version":1,"writer":"agent-fleet","workers":[]}`, string(data))
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp"))
	require.Empty(t, matches)
}

// Only an agent directory's registry keeps a view, beside it.
func TestViewPathOf(t *testing.T) {
	p := intercom.NewPaths("/home/u/.pi/agent")
	require.Equal(t, WorkersViewPath(p), viewPathOf(RegistryPath(p)))
	for _, path := range []string{"/tmp/fleet.db", "/a/orchestrator/fleet.db", "/a/intercom/orchestrator/other.db", "/a/intercom/fleet.db"} {
		require.Empty(t, viewPathOf(path), path)
	}
}

// BenchmarkWorkersViewRefresh is the work each registry write of a process
// leaves to the change hook: workers.json rewritten from the live workers.
func BenchmarkWorkersViewRefresh(b *testing.B) {
	for _, live := range []int{1, 50, 200} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			ctx := context.Background()
			p := intercom.NewPaths(b.TempDir())
			reg, err := OpenRegistry(ctx, RegistryPath(p))
			require.NoError(b, err)
			defer reg.Close()
			for i := range live {
				require.NoError(b, reg.Reserve(ctx, &Worker{ID: fmt.Sprintf("w%d", i), Kind: "exec", Manager: "boss", Role: "bench"}))
			}
			reg.AwaitChangeHook()
			b.ReportAllocs()
			for b.Loop() {
				reg.refreshOwnView(ctx)
			}
		})
	}
}
