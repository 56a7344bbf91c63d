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
var hookRuns runCount

// runCount counts runs in flight; unlike a sync.WaitGroup it may be waited
// on while runs still start (a process exiting while writes go on).
type runCount struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (c *runCount) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
}

func (c *runCount) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 {
		close(c.idle)
	}
}

// idleCh is closed once no run is in flight.
func (c *runCount) idleCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		return closedCh
	}
	return c.idle
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

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
// process's. The hook must not write to the registry nor close it.
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
	closed  bool // Registry.Close: a write still finishing starts no run
	runs    runCount
}

// changed schedules a run of the process-wide hook for r.
func (h *hookRunner) changed(ctx context.Context, r *Registry) {
	if changeHook.Load() == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.dirty = true
	if h.running {
		return
	}
	h.running = true
	h.runs.add()
	hookRuns.add()
	go h.run(ctx, r)
}

func (h *hookRunner) run(ctx context.Context, r *Registry) {
	defer hookRuns.done()
	defer h.runs.done()
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
	select {
	case <-hookRuns.idleCh():
		return true
	case <-time.After(timeout):
		return false
	}
}

// AwaitChangeHook waits until the process-wide change hook has run for
// every write this handle committed so far.
func (r *Registry) AwaitChangeHook() { <-r.hooks.runs.idleCh() }

// close stops new runs; the one in flight goes on (Close waits for it).
func (h *hookRunner) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
}
