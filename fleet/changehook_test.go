package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countRuns counts r's change-hook runs (call it before r's first write).
func countRuns(r *Registry) *atomic.Int32 {
	var n atomic.Int32
	fn := r.hooks.fn
	r.hooks.fn = func(ctx context.Context) {
		n.Add(1)
		fn(ctx)
	}
	return &n
}

// viewIDs are the worker ids of the workers.json at path.
func viewIDs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var v viewFile
	require.NoError(t, json.Unmarshal(data, &v))
	ids := []string{}
	for _, w := range v.Workers {
		ids = append(ids, w.ID)
	}
	return ids
}

// Every handle on an agent directory's registry refreshes the view beside
// it after its own writes, never after a failed one; a registry elsewhere
// keeps no view.
func TestChangeHook(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	view := filepath.Join(filepath.Dir(path), "workers.json")
	one := openTestRegistry(t, path, nil)
	two := openTestRegistry(t, path, nil)
	ones, twos := countRuns(one), countRuns(two)

	require.NoError(t, one.Reserve(ctx, &Worker{ID: "a", Kind: "exec", Manager: "m"}))
	one.AwaitChangeHook()
	require.Equal(t, []string{"a"}, viewIDs(t, view))
	require.NoError(t, two.Reserve(ctx, &Worker{ID: "b", Kind: "exec", Manager: "m"}))
	require.Error(t, two.Reserve(ctx, &Worker{ID: "b", Kind: "exec", Manager: "m"}), "a conflict writes nothing")
	two.AwaitChangeHook()
	require.Equal(t, []string{"a", "b"}, viewIDs(t, view))
	require.Equal(t, int32(1), ones.Load())
	require.Equal(t, int32(1), twos.Load(), "the failed write ran no refresh")

	elsewhere := openTestRegistry(t, filepath.Join(t.TempDir(), "fleet.db"), nil)
	require.Nil(t, elsewhere.hooks.fn)
	require.NoError(t, elsewhere.Reserve(ctx, &Worker{ID: "c", Kind: "exec", Manager: "m"}))
	elsewhere.AwaitChangeHook()
	require.NoFileExists(t, filepath.Join(filepath.Dir(elsewhere.Path()), "workers.json"))
}

// Only an update that changes what the view shows — a live worker's
// summary — refreshes it: an exit status recorded on a stopping worker, or
// a change to an ended one, does not.
func TestChangeHookSkipsUpdatesTheViewDoesNotShow(t *testing.T) {
	ctx := context.Background()
	reg := openTestRegistry(t, registryPath(t), nil)
	runs := countRuns(reg)
	w := &Worker{ID: "a", Kind: "exec", Manager: "m"}
	require.NoError(t, reg.Reserve(ctx, w))
	update := func(fn func(*Worker)) int32 {
		t.Helper()
		reg.AwaitChangeHook()
		before := runs.Load()
		_, err := reg.Update(ctx, w.ID, w.RunID, func(r *Worker) error { fn(r); return nil })
		require.NoError(t, err)
		reg.AwaitChangeHook()
		return runs.Load() - before
	}
	require.Equal(t, int32(1), update(func(r *Worker) { r.State = StateStopping }), "a live state change shows")
	require.Zero(t, update(func(r *Worker) { r.HasExit, r.ExitCode, r.ExitStatus = true, "killed", 15 }), "an exit status does not")
	require.Equal(t, int32(1), update(func(r *Worker) { r.State = StateStopped }), "ending shows: the worker leaves the view")
	require.Zero(t, update(func(r *Worker) { r.State, r.LastError = StateFailed, "x" }), "an ended worker is not shown")
}

// The hook runs off the writer's path: a write does not wait for it, the
// writes made while it runs are coalesced into one more run that sees the
// last of them, and Close waits for that run.
func TestChangeHookCoalesces(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	entered := make(chan struct{}, 16)
	var mu sync.Mutex
	var counts []int
	reg, err := OpenRegistry(ctx, registryPath(t))
	require.NoError(t, err)
	reg.hooks.fn = func(ctx context.Context) {
		entered <- struct{}{}
		<-release
		list, err := reg.List(ctx, Filter{})
		require.NoError(t, err)
		mu.Lock()
		counts = append(counts, len(list))
		mu.Unlock()
	}

	require.NoError(t, reg.Reserve(ctx, &Worker{ID: "a", Kind: "exec", Manager: "m"}))
	<-entered // the first run is blocked in the hook; writes go on
	for _, id := range []string{"b", "c", "d"} {
		require.NoError(t, reg.Reserve(ctx, &Worker{ID: id, Kind: "exec", Manager: "m"}))
	}
	close(release)
	require.NoError(t, reg.Close())
	require.Len(t, entered, 1, "three writes during a run make one more run")
	require.Equal(t, []int{4, 4}, counts, "the runs read the registry after the writes (the second after the last)")
}

// A process may wait for the hook while writes still go on (it is
// closing): waiting never races with runs starting, and Close leaves no
// run behind.
func TestAwaitChangeHookWhileWriting(t *testing.T) {
	ctx := context.Background()
	reg, err := OpenRegistry(ctx, registryPath(t))
	require.NoError(t, err)
	reg.hooks.fn = func(context.Context) { time.Sleep(time.Millisecond) }
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			if err := reg.Reserve(ctx, &Worker{ID: fmt.Sprintf("w%d", i), Kind: "exec", Manager: "m"}); err != nil {
				wrote <- err
				return
			}
		}
	}()
	for range 50 {
		reg.AwaitChangeHook()
	}
	close(stop)
	require.NoError(t, <-wrote)
	require.NoError(t, reg.Close())
	select {
	case <-reg.hooks.runs.idleCh():
	default:
		t.Fatal("a change-hook run outlived Close")
	}
}
