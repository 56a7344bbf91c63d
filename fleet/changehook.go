package fleet

import (
	"context"
	"sync"
)

// A Registry's change hook keeps the views other tools read of it up to
// date: today the workers.json view of an agent directory's registry
// (view.go), so it runs after the writes that change a live worker's
// Summary (Update skips the others). It runs on a goroutine of its own,
// off the writer's path (a spawn does not wait for a view to be
// rewritten), one run at a time per Registry; writes made while it runs
// are coalesced into one more run, so the last run always follows the
// last such write. Registry.Close and
// Registry.AwaitChangeHook wait for it. The hook reads the registry; it
// must not write to it nor close it.

// hookRunner coalesces a Registry's change-hook runs.
type hookRunner struct {
	// fn is the hook; nil (a registry without a view) starts no runs. Set
	// before the Registry is shared.
	fn      func(ctx context.Context)
	mu      sync.Mutex
	dirty   bool
	running bool
	closed  bool // Registry.Close: a write still finishing starts no run
	runs    runCount
}

// changed schedules a run of the hook after a committed write.
func (h *hookRunner) changed(ctx context.Context) {
	if h.fn == nil {
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
	go h.run(ctx)
}

func (h *hookRunner) run(ctx context.Context) {
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
		h.fn(ctx)
	}
}

// close stops new runs; the one in flight goes on (Close waits for it).
func (h *hookRunner) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
}

// AwaitChangeHook waits until the change hook has run for every write this
// handle committed so far: the workers.json view then shows them. Writes
// may go on meanwhile.
func (r *Registry) AwaitChangeHook() { <-r.hooks.runs.idleCh() }

// runCount counts runs in flight; unlike a sync.WaitGroup it may be waited
// on while runs still start (a process closing a registry that other
// goroutines still write to).
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
