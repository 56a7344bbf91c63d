package factory

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Lease policy variables (docs/architecture.md "Leases"): Go durations
// such as 45m.
const (
	EnvLease          = "AGENT_FLEET_LEASE"            // default idle lease of an agent manager's worker (1h)
	EnvLeaseWarning   = "AGENT_FLEET_LEASE_WARNING"    // checkpoints start this long before the deadline (10m)
	EnvLeaseRetry     = "AGENT_FLEET_LEASE_RETRY"      // checkpoints repeat this often (5m)
	EnvLeaseGrace     = "AGENT_FLEET_LEASE_GRACE"      // stop this long after the deadline (15m)
	EnvRetention      = "AGENT_FLEET_RETENTION"        // ended records are pruned after this (168h)
	EnvJanitorEvery   = "AGENT_FLEET_JANITOR_INTERVAL" // how often an mcp holder runs the janitor (5m)
	defaultJanitorRun = 5 * time.Minute
)

// LeasePolicy reads the lease policy from f's environment; a malformed
// value is a usage error naming the variable.
func (f *Factory) LeasePolicy() (fleet.LeasePolicy, error) {
	var p fleet.LeasePolicy
	for _, v := range []struct {
		name string
		dst  *time.Duration
	}{{EnvLease, &p.Default}, {EnvLeaseWarning, &p.Warning}, {EnvLeaseRetry, &p.Retry}, {EnvLeaseGrace, &p.Grace}, {EnvRetention, &p.Retention}} {
		d, err := envDuration(f.Env, v.name)
		if err != nil {
			return p, err
		}
		*v.dst = d
	}
	return p, nil
}

func envDuration(getenv func(string) string, name string) (time.Duration, error) {
	s := getenv(name)
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, Usagef("%s=%q: want a positive duration such as 45m", name, s)
	}
	return d, nil
}

// StartActivity records lease activity of the workers of the holder's
// session: give the result's OnMessage to the session.
func StartActivity(p intercom.Paths, sessionID string, log *slog.Logger) *fleet.ActivityRecorder {
	return fleet.StartActivityRecorder(fleet.ActivityConfig{
		Paths: p, Manager: sessionID, Peers: &intercom.LocalAPIClient{Path: p.LocalAPISocket()}, Logger: log,
	})
}

// RunHolderJanitor runs the janitor from a long-lived holder of a manager
// (docs/architecture.md "Processes"): every AGENT_FLEET_JANITOR_INTERVAL
// (default 5 min), while the session manages a live worker. It returns
// when ctx ends.
func (f *Factory) RunHolderJanitor(ctx context.Context, p intercom.Paths, sessionID string, log *slog.Logger) {
	every, err := envDuration(f.Env, EnvJanitorEvery)
	if err != nil {
		log.Warn("janitor", "err", err)
	}
	if every <= 0 {
		every = defaultJanitorRun
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !managesLiveWorkers(ctx, p, sessionID) {
			continue
		}
		env, err := f.FleetAs(ctx, p, sessionID)
		if err != nil {
			log.Debug("janitor: no fleet here", "err", err)
			continue
		}
		rep, err := env.Fleet.Cleanup(ctx, fleet.CleanupOptions{Execute: true, Budget: every})
		env.Close()
		switch {
		case err != nil:
			log.Debug("janitor", "err", err)
		case len(rep.Actions) > 0:
			log.Info("janitor ran", "actions", len(rep.Actions))
		}
	}
}

// DeliverOwedTo delivers the worker-ended notices owed to sessionID, a
// session this process has just registered (docs/architecture.md
// "Worker-ended notices"), without creating a registry where there is
// none.
func DeliverOwedTo(ctx context.Context, p intercom.Paths, sessionID string, log *slog.Logger) {
	reg, err := existingRegistry(ctx, p)
	if err != nil {
		log.Debug("ended notices: no registry", "err", err)
	}
	if reg == nil {
		return
	}
	defer reg.Close()
	n, err := fleet.DeliverEnded(ctx, reg, fleet.NoticeFilter{Manager: sessionID}, fleet.RegisteringSender(p))
	switch {
	case err != nil:
		log.Debug("ended notices", "err", err)
	case n > 0:
		log.Info("delivered the notices of workers that ended while away", "notices", n)
	}
}

// managesLiveWorkers reports whether sessionID manages a live worker,
// without creating a registry where there is none.
func managesLiveWorkers(ctx context.Context, p intercom.Paths, sessionID string) bool {
	reg, err := existingRegistry(ctx, p)
	if err != nil || reg == nil {
		return false
	}
	defer reg.Close()
	ws, err := reg.List(ctx, fleet.Filter{Manager: sessionID, LiveOnly: true})
	return err == nil && len(ws) > 0
}

// LiveExecWorker reports whether id is a live worker that runs a command
// (no coding agent's turns), without creating a registry where there is
// none.
func LiveExecWorker(ctx context.Context, p intercom.Paths, id string) bool {
	w := liveWorker(ctx, p, id)
	return w != nil && !harness.IsKind(w.Kind)
}

// liveWorker is the live worker of id, nil when there is none (or no
// registry: none is created).
func liveWorker(ctx context.Context, p intercom.Paths, id string) *fleet.Worker {
	reg, err := existingRegistry(ctx, p)
	if err != nil || reg == nil {
		return nil
	}
	defer reg.Close()
	w, err := reg.Get(ctx, id)
	if err != nil || !w.State.Live() {
		return nil
	}
	return w
}

// existingRegistry opens the registry of p where there is one: nil, and
// none created, where there is not.
func existingRegistry(ctx context.Context, p intercom.Paths) (*fleet.Registry, error) {
	path := fleet.RegistryPath(p)
	if _, err := os.Stat(path); err != nil {
		return nil, nil
	}
	return fleet.OpenRegistry(ctx, path)
}
