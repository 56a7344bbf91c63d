package factory

import (
	"context"
	"sync"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/history"
	"github.com/agent-fleet/agent-fleet/teams"
)

// HistoryOptions are the history's options from the environment
// (history.DaysEnv) with the named teams of p for team names.
func (f *Factory) HistoryOptions(p intercom.Paths) (history.Options, error) {
	days, err := history.DaysFromEnv(f.Env(history.DaysEnv))
	if err != nil {
		return history.Options{}, err
	}
	store := teams.NewStore(p)
	return history.Options{Days: days, Logger: f.Logger("warn"), TeamName: func(scope string) string {
		list, err := store.List("", scope)
		if err != nil {
			return ""
		}
		for _, t := range list {
			if t.Current {
				return t.Name
			}
		}
		return ""
	}}, nil
}

// OpenHistory opens the history of p for reading (and writing).
func (f *Factory) OpenHistory(ctx context.Context, p intercom.Paths) (*history.Store, error) {
	opts, err := f.HistoryOptions(p)
	if err != nil {
		return nil, err
	}
	return history.Open(ctx, p, opts)
}

// Recorder is the history a session of p records into: opened with the
// first event (a command that acts through a holder records nothing of
// its own and never opens it). A history that cannot be opened is logged
// once and records nothing: messaging does not depend on it. Close it
// when the session is closed.
func (f *Factory) Recorder(p intercom.Paths) *LazyRecorder {
	return &LazyRecorder{open: func() (*history.Store, error) { return f.OpenHistory(context.Background(), p) }, log: f.Logger("warn")}
}

// LazyRecorder is an intercom.Recorder that opens its store on first use.
// Safe for concurrent use.
type LazyRecorder struct {
	open  func() (*history.Store, error)
	log   interface{ Warn(string, ...any) }
	mu    sync.Mutex
	tried bool
	store *history.Store
}

var _ intercom.Recorder = (*LazyRecorder)(nil)

// opened returns the store, opening it first when open is set.
func (r *LazyRecorder) opened(open bool) *history.Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.tried && open {
		r.tried = true
		s, err := r.open()
		if err != nil {
			r.log.Warn("message history unavailable", "err", err)
		}
		r.store = s
	}
	return r.store
}

// Record implements intercom.Recorder.
func (r *LazyRecorder) Record(session string, e intercom.HistoryEvent) {
	if s := r.opened(true); s != nil {
		s.Record(session, e)
	}
}

// Flush implements intercom.Recorder.
func (r *LazyRecorder) Flush() error {
	if s := r.opened(false); s != nil {
		return s.Flush()
	}
	return nil
}

// Close closes the store, if it was opened; nothing is recorded after.
func (r *LazyRecorder) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tried = true
	if r.store != nil {
		_ = r.store.Close()
		r.store = nil
	}
}
