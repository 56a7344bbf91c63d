package fleet

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/units"
)

// StopResult is what a stop did and proved.
type StopResult struct {
	Worker *Worker
	// AlreadyEnded: the worker had ended before the stop.
	AlreadyEnded bool
	// Killed are processes that outlived the unit's stop and were killed
	// with SIGKILL through the cgroup.
	Killed []int
	// Survivors are processes still in the worker's cgroup after SIGKILL;
	// non-empty means ErrCleanupIncomplete.
	Survivors []units.Process
}

// StopOptions tune how a stop ends a worker.
type StopOptions struct {
	// Grace is how long the worker has between SIGTERM and SIGKILL; 0 is
	// the fleet's StopTimeout.
	Grace time.Duration
	// Kill sends SIGKILL at once, without SIGTERM first.
	Kill bool
	// Progress, when set, hears of each signal the stop sends, as it is
	// sent (from the stopping goroutine).
	Progress func(StopStep)
}

// StopStep is a signal a stop sent to every process of a worker's unit.
type StopStep struct {
	ID     string
	Signal string // "SIGTERM" or "SIGKILL"
	// Grace, for SIGTERM, is how long until SIGKILL; for a SIGKILL after
	// SIGTERM, the grace that ran out (0: SIGKILL at once).
	Grace time.Duration
}

// Stop stops a worker of the caller with the default options (StopWith).
func (f *Fleet) Stop(ctx context.Context, id string) (*StopResult, error) {
	return f.StopWith(ctx, id, StopOptions{})
}

// StopWith stops a worker of the caller and proves that nothing it started
// survives: it sends SIGTERM to every process of the unit (SIGKILL at once
// with opts.Kill), sends SIGKILL once the grace has passed, stops the unit
// and waits for it to be inactive, reads the worker's cgroup, SIGKILLs
// whatever is still there, reads it again, and resets the unit. Stopping
// an ended worker only settles its record.
func (f *Fleet) StopWith(ctx context.Context, id string, opts StopOptions) (*StopResult, error) {
	if err := f.writable(); err != nil {
		return nil, err
	}
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", id, err)
	}
	if err := f.own(w, "stop"); err != nil {
		return nil, err
	}
	if w.State.Terminal() {
		return &StopResult{Worker: w, AlreadyEnded: true}, nil
	}
	// The durable stop fence: from here on, a unit of this incarnation that
	// is found running is stopped, never revived (reconcile).
	w, err = f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		r.State, r.StopRequestedAt = StateStopping, f.cfg.Now()
		if r.StopReason == "" {
			r.StopReason = "manager-requested"
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", id, err)
	}
	return f.stopUnit(ctx, w, opts)
}

// stopUnit stops the unit of w (already marked stopping) and proves the
// cleanup.
func (f *Fleet) stopUnit(ctx context.Context, w *Worker, opts StopOptions) (*StopResult, error) {
	res := &StopResult{}
	grace := opts.Grace
	if grace <= 0 {
		grace = f.cfg.StopTimeout
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+15*time.Second)
	defer cancel()
	// A unit's cgroup is fixed for its life: the one recorded at READY
	// (or by recovery) is systemd's; ask only when none was recorded.
	cgroup := w.ControlGroup
	if cgroup == "" {
		if st, err := f.cfg.Units.Unit(sctx, w.Unit); err == nil {
			cgroup = st.ControlGroup
		}
	}
	// The escalation is the fleet's own, so that its grace is the caller's
	// and every signal can be reported: the unit's TimeoutStopSec, fixed
	// when it started, only applies once its own command has ended.
	f.signalUnit(sctx, w, opts, grace)
	stopErr := f.cfg.Units.StopUnit(sctx, w.Unit)
	if errors.Is(stopErr, units.ErrUnitNotFound) {
		stopErr = nil
	}
	if stopErr == nil {
		stopErr = f.waitInactive(sctx, w.Unit)
	}
	// Proof: read the cgroup the unit had; kill what is left.
	var survivors []units.Process
	if cgroup != "" {
		pids, err := f.cfg.Cgroups.Procs(cgroup)
		if err == nil && len(pids) > 0 {
			rep, kerr := f.cfg.Cgroups.Kill(sctx, cgroup)
			res.Killed = append(rep.Signalled, pids...)
			survivors = rep.Survivors
			if kerr != nil && len(survivors) == 0 {
				survivors = f.cfg.Cgroups.Processes(pids)
			}
			f.log.Warn("processes outlived the worker's stop; killed through its cgroup", "id", w.ID, "pids", pids)
		}
	}
	_ = f.cfg.Units.ResetFailed(sctx, w.Unit)
	rec, recErr := units.ReadExitRecord(f.exitRecordPath(w))
	updated, err := f.cfg.Registry.Update(sctx, w.ID, w.RunID, func(r *Worker) error {
		if recErr == nil && !r.HasExit {
			applyExitRecord(r, rec)
		}
		r.EndedAt = f.cfg.Now()
		switch {
		case len(survivors) > 0:
			r.State, r.LastError = StateFailed, fmt.Sprintf("cleanup incomplete: %s survived SIGKILL", Plural(len(survivors), "process"))
		case stopErr != nil:
			r.State, r.LastError = StateFailed, "stop could not be verified: "+stopErr.Error()
		default:
			r.State = StateStopped
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", w.ID, err)
	}
	res.Worker, res.Survivors = updated, survivors
	switch {
	case len(survivors) > 0:
		return res, fmt.Errorf("stop %s: %w: %s survived SIGKILL: %v", w.ID, ErrCleanupIncomplete, Plural(len(survivors), "process"), survivors)
	case stopErr != nil:
		return res, fmt.Errorf("stop %s: %w: %v", w.ID, ErrCleanupIncomplete, stopErr)
	}
	f.log.Info("worker stopped", "id", w.ID, "run", w.RunID)
	return res, nil
}

// signalUnit sends SIGTERM to every process of w's unit and, when the unit
// is still active after grace, SIGKILL (at once with opts.Kill). A unit
// that is already gone needs neither; errors are left to the stop that
// follows.
func (f *Fleet) signalUnit(ctx context.Context, w *Worker, opts StopOptions, grace time.Duration) {
	step := func(sig string, d time.Duration) {
		if opts.Progress != nil {
			opts.Progress(StopStep{ID: w.ID, Signal: sig, Grace: d})
		}
	}
	if !opts.Kill {
		if err := f.cfg.Units.KillUnit(ctx, w.Unit, syscall.SIGTERM); err != nil {
			return
		}
		step("SIGTERM", grace)
		gctx, cancel := context.WithTimeout(ctx, grace)
		err := f.waitInactive(gctx, w.Unit)
		graceOver := gctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || !graceOver {
			return // ended, or the manager did not answer: the stop decides
		}
	}
	if err := f.cfg.Units.KillUnit(ctx, w.Unit, syscall.SIGKILL); err != nil {
		return
	}
	if opts.Kill {
		grace = 0
	}
	step("SIGKILL", grace)
}

// waitInactive waits until the unit is no longer active or activating.
func (f *Fleet) waitInactive(ctx context.Context, unit string) error {
	for {
		st, err := f.cfg.Units.Unit(ctx, unit)
		if err != nil {
			return err
		}
		if st.Gone() || st.ActiveState == "inactive" || st.ActiveState == "failed" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unit %s still %s: %w", unit, st.ActiveState, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
