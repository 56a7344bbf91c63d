package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The process-wide hook sees the writes of every handle, after the
// handle's own OnChange, and never the failed ones.
func TestChangeHook(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var seen []string
	SetChangeHook(func(_ context.Context, r *Registry) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, "hook:"+r.Path())
	})
	t.Cleanup(func() { SetChangeHook(nil) })
	path := registryPath(t)
	own, err := OpenRegistryWithOptions(ctx, path, RegistryOptions{OnChange: func(context.Context, *Registry) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, "own")
	}})
	require.NoError(t, err)
	t.Cleanup(func() { own.Close() })
	plain := openTestRegistry(t, path, nil)

	require.NoError(t, own.Reserve(ctx, &Worker{ID: "a", Kind: "exec", Manager: "m"}))
	own.AwaitChangeHook()
	require.NoError(t, plain.Reserve(ctx, &Worker{ID: "b", Kind: "exec", Manager: "m"}))
	require.Error(t, plain.Reserve(ctx, &Worker{ID: "b", Kind: "exec", Manager: "m"}), "a conflict writes nothing")
	plain.AwaitChangeHook()
	mu.Lock()
	require.Equal(t, []string{"own", "hook:" + own.Path(), "hook:" + plain.Path()}, seen)
	mu.Unlock()

	SetChangeHook(nil)
	require.NoError(t, plain.Reserve(ctx, &Worker{ID: "c", Kind: "exec", Manager: "m"}))
	plain.AwaitChangeHook()
	require.Len(t, seen, 3)
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
	SetChangeHook(func(ctx context.Context, r *Registry) {
		entered <- struct{}{}
		<-release
		list, err := r.List(ctx, Filter{})
		require.NoError(t, err)
		mu.Lock()
		counts = append(counts, len(list))
		mu.Unlock()
	})
	t.Cleanup(func() { SetChangeHook(nil) })
	reg, err := OpenRegistry(ctx, registryPath(t))
	require.NoError(t, err)

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

// A process may wait for the hooks while writes still go on (it is
// exiting): waiting never races with runs starting.
func TestAwaitChangeHooksWhileWriting(t *testing.T) {
	ctx := context.Background()
	SetChangeHook(func(context.Context, *Registry) { time.Sleep(time.Millisecond) })
	t.Cleanup(func() { SetChangeHook(nil) })
	reg, err := OpenRegistry(ctx, registryPath(t))
	require.NoError(t, err)
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
		AwaitChangeHooks(10 * time.Millisecond)
		reg.AwaitChangeHook()
	}
	close(stop)
	require.NoError(t, <-wrote)
	require.NoError(t, reg.Close())
	require.True(t, AwaitChangeHooks(time.Second))
}
