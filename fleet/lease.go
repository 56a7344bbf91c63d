package fleet

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/units"
)

// LeasePolicy sets how long idle workers live (docs/architecture.md "Leases").
type LeasePolicy struct {
	// Default is the idle lease of a worker spawned by an agent manager
	// without --lease. Workers of an operator (a person) have none unless
	// spawned with --lease.
	Default time.Duration
	// Warning is how long before the idle deadline the janitor starts
	// sending checkpoint messages; Retry how often it repeats them.
	Warning, Retry time.Duration
	// Grace is how long after the idle deadline the worker is stopped.
	Grace time.Duration
	// Retention is how long ended records are kept before the janitor
	// prunes them.
	Retention time.Duration
}

// DefaultLeasePolicy is the policy unless configured otherwise.
var DefaultLeasePolicy = LeasePolicy{
	Default: time.Hour, Warning: 10 * time.Minute, Retry: 5 * time.Minute,
	Grace: 15 * time.Minute, Retention: 7 * 24 * time.Hour,
}

func (p LeasePolicy) withDefaults() LeasePolicy {
	d := DefaultLeasePolicy
	if p.Default > 0 {
		d.Default = p.Default
	}
	if p.Warning > 0 {
		d.Warning = p.Warning
	}
	if p.Retry > 0 {
		d.Retry = p.Retry
	}
	if p.Grace > 0 {
		d.Grace = p.Grace
	}
	if p.Retention > 0 {
		d.Retention = p.Retention
	}
	return d
}

// leaseFor is the idle lease a new worker gets.
func (f *Fleet) leaseFor(requested time.Duration) time.Duration {
	switch {
	case requested > 0:
		return requested
	case IsOperator(f.cfg.Caller):
		return 0
	}
	return f.cfg.Leases.Default
}

// Activity verification outcomes.
const (
	ActivityVerified = "verified"  // the sending pid lies in the worker's cgroup
	ActivitySenderID = "sender-id" // no local API (a foreign broker): the sender id alone
)

// RecordActivity renews the lease of the caller's worker `from` after the
// caller (its manager) received a message from it (docs/architecture.md "Leases").
// The broker's local API must confirm that the sending connection's pid lies
// in the worker's cgroup; a message from any other process that merely uses
// the worker's id or name renews nothing (ErrUnverifiedActivity). Without
// the local API (a foreign broker) it falls back to the sender id and says
// so (ActivitySenderID). It returns "" when `from` is not a live worker of
// the caller.
func (f *Fleet) RecordActivity(ctx context.Context, from string) (string, error) {
	return recordActivity(ctx, f.cfg.Registry, f.cfg.Peers, f.cfg.Cgroups, f.cfg.Caller, f.cfg.Now, from)
}

func recordActivity(ctx context.Context, reg *Registry, peers PeerChecker, cg *units.Cgroups, manager string, now func() time.Time, from string) (string, error) {
	w, err := reg.Get(ctx, from)
	if err != nil || !w.State.Live() || w.Manager != manager {
		return "", nil
	}
	how := ActivitySenderID
	if peers != nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		peer, perr := peers.Peer(cctx, from)
		cancel()
		if perr == nil {
			if !peer.Connected || peer.PID <= 0 || !inWorker(cg, w, peer.PID) {
				return "", fmt.Errorf("%w: %s's connection (pid %d) is not the worker's", ErrUnverifiedActivity, from, peer.PID)
			}
			how = ActivityVerified
		}
	}
	_, err = reg.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		if r.Manager != manager {
			return nil // adopted meanwhile: the new manager's business
		}
		renewed(r, now())
		return nil
	})
	return how, err
}

// inWorker reports whether pid lies in the worker's cgroup (or below it).
func inWorker(cg *units.Cgroups, w *Worker, pid int) bool {
	if cg == nil {
		return false
	}
	m, err := cg.Membership(pid)
	if err != nil {
		return false
	}
	if w.ControlGroup != "" {
		return m.Path == w.ControlGroup || strings.HasPrefix(m.Path, w.ControlGroup+"/")
	}
	return m.Unit == w.Unit
}
