package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// changeHook runs after committed writes of every Registry in the process,
// whoever opened it (CLI verbs, MCP holders' activity recorders, the worker
// shim), after the handle's own RegistryOptions.OnChange.
var changeHook atomic.Pointer[func(context.Context, *Registry)]

// hookRuns counts the change-hook runs in flight in the process.
var hookRuns sync.WaitGroup

// SetChangeHook installs the process-wide registry change hook (nil
// removes it). cmd sets it once, at start, to keep views of the registry
// other tools read (the orchestrator/workers.json of the TypeScript
// adapters) up to date.
//
// The hook runs on a goroutine of its own, off the writer's path (a spawn
// does not wait for a view to be rewritten), one run at a time per
// Registry; writes made while it runs are coalesced into one more run, so
// the last run always follows the last write. Registry.Close and
// Registry.AwaitChangeHook wait for it, AwaitChangeHooks for all of the
// process's. The hook must not write to the
// registry nor close it.
func SetChangeHook(fn func(ctx context.Context, r *Registry)) {
	if fn == nil {
		changeHook.Store(nil)
		return
	}
	changeHook.Store(&fn)
}

// hookRunner coalesces a Registry's change-hook runs.
type hookRunner struct {
	mu      sync.Mutex
	dirty   bool
	running bool
	done    sync.WaitGroup
}

// changed schedules a run of the process-wide hook for r.
func (h *hookRunner) changed(ctx context.Context, r *Registry) {
	if changeHook.Load() == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dirty = true
	if h.running {
		return
	}
	h.running = true
	h.done.Add(1)
	hookRuns.Add(1)
	go h.run(ctx, r)
}

func (h *hookRunner) run(ctx context.Context, r *Registry) {
	defer hookRuns.Done()
	defer h.done.Done()
	for {
		h.mu.Lock()
		if !h.dirty {
			h.running = false
			h.mu.Unlock()
			return
		}
		h.dirty = false
		h.mu.Unlock()
		if fn := changeHook.Load(); fn != nil {
			(*fn)(ctx, r)
		}
	}
}

// AwaitChangeHooks waits up to timeout for the change-hook runs of every
// Registry of the process, for a process about to exit; it reports whether
// they all ended.
func AwaitChangeHooks(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		hookRuns.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// AwaitChangeHook waits until the process-wide change hook has run for
// every write this handle committed so far.
func (r *Registry) AwaitChangeHook() { r.hooks.done.Wait() }
