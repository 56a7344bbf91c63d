package fleet

import (
	"context"
	"sync/atomic"
)

// changeHook runs after every committed write of every Registry in the
// process, whoever opened it (CLI verbs, MCP holders' activity recorders,
// the worker shim), after the handle's own RegistryOptions.OnChange.
var changeHook atomic.Pointer[func(context.Context, *Registry)]

// SetChangeHook installs the process-wide registry change hook (nil
// removes it). cmd sets it once, at start, to keep views of the registry
// other tools read (the orchestrator/workers.json of the TypeScript
// adapters) up to date. The hook must not write to the registry; it runs
// on the writer's goroutine, outside the write lock.
func SetChangeHook(fn func(ctx context.Context, r *Registry)) {
	if fn == nil {
		changeHook.Store(nil)
		return
	}
	changeHook.Store(&fn)
}

func runChangeHook(ctx context.Context, r *Registry) {
	if fn := changeHook.Load(); fn != nil {
		(*fn)(ctx, r)
	}
}
