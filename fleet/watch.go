package fleet

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// A Watch tells a process that reads the fleet (the ui, list --watch,
// logs -f) that another process changed what it shows, without polling:
// writes to the registry by spawns, stops and worker shims, exit records,
// coding-agent workers' turn records, a log file growing. It says only
// that something changed; the reader reads the registry again (state is
// level-triggered, the signal a hint).

// Watch is a coalescing change signal: C has room for one signal, so
// changes made while nobody reads collapse into one. C is closed when the
// watch ends (its ctx ended, or the kernel's watch failed).
type Watch struct {
	C <-chan struct{}
}

// WatchFleet watches the agent directory p's fleet: the registry
// (fleet.db and its write-ahead log), workers.json, the exit records and
// each coding-agent incarnation's directory (workers/<id>-<run>, where
// its turn record lives). On Linux it is inotify; elsewhere, where
// workers do not run, a look every second. The watch ends with ctx.
func WatchFleet(ctx context.Context, p intercom.Paths) (*Watch, error) {
	orch := p.OrchestratorDir()
	for _, d := range []string{orch, exitDir(p), filepath.Join(orch, "workers")} {
		if err := intercom.EnsureDir(d); err != nil {
			return nil, err
		}
	}
	return watchPaths(ctx, []string{orch, exitDir(p)}, filepath.Join(orch, "workers"))
}

// WatchFile watches one file (a worker's log): writes, truncation,
// removal. The watch ends with ctx.
func WatchFile(ctx context.Context, path string) (*Watch, error) {
	return watchPaths(ctx, []string{path}, "")
}

// ignoredChange: files whose changes say nothing about the fleet — the
// registry's shared-memory index (touched by readers) and lock files.
func ignoredChange(name string) bool {
	return strings.HasSuffix(name, "-shm") || strings.HasSuffix(name, ".lock")
}

// notifyChange sends on c unless a signal is already waiting.
func notifyChange(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// tickWatch signals once a second: the watch where the kernel's cannot be
// had.
func tickWatch(ctx context.Context) *Watch {
	c := make(chan struct{}, 1)
	go func() {
		defer close(c)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				notifyChange(c)
			}
		}
	}()
	return &Watch{C: c}
}
