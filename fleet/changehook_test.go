package fleet

import (
	"context"
	"sync"
	"testing"

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
	require.NoError(t, plain.Reserve(ctx, &Worker{ID: "b", Kind: "exec", Manager: "m"}))
	require.Error(t, plain.Reserve(ctx, &Worker{ID: "b", Kind: "exec", Manager: "m"}), "a conflict writes nothing")
	mu.Lock()
	require.Equal(t, []string{"own", "hook:" + own.Path(), "hook:" + plain.Path()}, seen)
	mu.Unlock()

	SetChangeHook(nil)
	require.NoError(t, plain.Reserve(ctx, &Worker{ID: "c", Kind: "exec", Manager: "m"}))
	require.Len(t, seen, 3)
}
