package fleet

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// ActivityConfig configures an ActivityRecorder.
type ActivityConfig struct {
	Paths intercom.Paths
	// Manager is the session id of the holder whose inbound messages are
	// judged: only its own workers' leases are renewed.
	Manager string
	// Peers is the broker's local API; nil falls back to sender ids.
	Peers PeerChecker
	// Cgroups reads /proc/<pid>/cgroup; nil opens the host's.
	Cgroups *units.Cgroups
	Now     func() time.Time
	Logger  *slog.Logger
	// Recorded, when set, is told the outcome of every check: how is
	// ActivityVerified or ActivitySenderID when a lease was renewed, "" when
	// the sender is not a live worker of Manager.
	Recorded func(from, how string, err error)
}

// ActivityRecorder renews worker leases from the messages a manager's
// session holder receives (docs/architecture.md "Leases"). Seen is cheap and never
// blocks the session's reader; the checks (registry, broker local API,
// cgroup) run on the recorder's own goroutine, coalesced per sender. The
// registry is opened only once it exists, and reopened when the file was
// replaced or deleted underneath.
type ActivityRecorder struct {
	cfg     ActivityConfig
	mu      sync.Mutex
	pending map[string]struct{}
	kick    chan struct{}
	done    chan struct{}
	cancel  context.CancelFunc
	reg     *RegistryHandle
}

// StartActivityRecorder starts a recorder; Close stops it.
func StartActivityRecorder(cfg ActivityConfig) *ActivityRecorder {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Cgroups == nil {
		cfg.Cgroups, _ = units.OpenCgroups("/")
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &ActivityRecorder{cfg: cfg, pending: map[string]struct{}{}, kick: make(chan struct{}, 1),
		done: make(chan struct{}), cancel: cancel, reg: NewRegistryHandle(RegistryPath(cfg.Paths), false)}
	go a.run(ctx)
	return a
}

// Seen notes that a message from sender id `from` reached the manager.
func (a *ActivityRecorder) Seen(from string) {
	a.mu.Lock()
	a.pending[from] = struct{}{}
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// OnMessage adapts Seen to intercom.SessionConfig.OnMessage. A
// worker-ended notice is no activity: its worker is gone, and it comes
// from a short registration of the worker's id, not the worker.
func (a *ActivityRecorder) OnMessage(m *intercom.InboundMessage) {
	if IsEndedNotice(m.Message) {
		return
	}
	a.Seen(m.From.ID)
}

// Close stops the recorder after the checks in flight.
func (a *ActivityRecorder) Close() {
	a.cancel()
	<-a.done
	a.reg.Close()
}

func (a *ActivityRecorder) run(ctx context.Context) {
	defer close(a.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		a.mu.Lock()
		batch := a.pending
		a.pending = map[string]struct{}{}
		a.mu.Unlock()
		for from := range batch {
			how, err := a.check(ctx, from)
			if err != nil {
				a.cfg.Logger.Warn("worker activity not recorded", "from", from, "err", err)
			}
			if a.cfg.Recorded != nil {
				a.cfg.Recorded(from, how, err)
			}
		}
	}
}

func (a *ActivityRecorder) check(ctx context.Context, from string) (string, error) {
	reg, err := a.reg.Get(ctx)
	if reg == nil || err != nil {
		return "", err
	}
	how, err := recordActivity(ctx, reg, a.cfg.Peers, a.cfg.Cgroups, a.cfg.Manager, a.cfg.Now, from)
	if errors.Is(err, ErrNotFound) {
		return "", nil // forgotten meanwhile
	}
	return how, err
}
