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
	// Took is where the stop's time went.
	Took StopTimings
}

// StopTimings is where a stop's time went, step by step.
type StopTimings struct {
	// Fence is reading the record and writing the registry's stop fence
	// (the unit's stop timeout is read meanwhile).
	Fence time.Duration
	// End is from the first signal until the unit was inactive: the
	// worker's own exit, systemd's stop and the exit record's ExecStopPost.
	End time.Duration
	// Proof is reading the cgroup, and killing what outlived the unit.
	Proof time.Duration
	// Record is writing the outcome to the registry (the unit is reset
	// meanwhile).
	Record time.Duration
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
	began := time.Now()
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
		f.withWorktrees(ctx, w)
		return &StopResult{Worker: w, AlreadyEnded: true}, nil
	}
	// The unit's own stop timeout decides who sends the SIGTERM (endUnit):
	// read it while the fence is written.
	timeout := f.readStopTimeout(ctx, w.Unit)
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
	res, err := f.stopUnit(ctx, w, opts, timeout)
	if res != nil {
		res.Took.Fence = time.Since(began) - res.Took.End - res.Took.Proof - res.Took.Record
	}
	return res, err
}

// readStopTimeout reads the stop timeout of unit on a goroutine of its
// own, to overlap what the stop does first; the channel gets it, or 0 when
// it could not be read.
func (f *Fleet) readStopTimeout(ctx context.Context, unit string) <-chan time.Duration {
	ch := make(chan time.Duration, 1)
	go func() {
		d, err := f.cfg.Units.StopTimeout(ctx, unit)
		if err != nil {
			d = 0
		}
		ch <- d
	}()
	return ch
}

// stopUnit stops the unit of w (already marked stopping) and proves the
// cleanup. timeout gets the unit's own stop timeout (readStopTimeout).
func (f *Fleet) stopUnit(ctx context.Context, w *Worker, opts StopOptions, timeout <-chan time.Duration) (*StopResult, error) {
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
	unitTimeout := <-timeout
	lap := time.Now()
	if w.Paused() {
		// A frozen worker would take SIGTERM only once thawed, after its
		// grace: thaw it first (SIGKILL kills a frozen cgroup regardless).
		if err := f.freeze(sctx, w, false); err != nil {
			f.log.Warn("could not thaw the paused worker before stopping it", "id", w.ID, "err", err)
		}
	}
	stopErr := f.endUnit(sctx, w, cgroup, opts, grace, unitTimeout)
	res.Took.End, lap = time.Since(lap), time.Now()
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
	res.Took.Proof, lap = time.Since(lap), time.Now()
	// Resetting the unit and recording the outcome are independent: the
	// reset's round trip to the manager overlaps the registry write.
	reset := make(chan struct{})
	go func() {
		defer close(reset)
		_ = f.cfg.Units.ResetFailed(sctx, w.Unit)
	}()
	rec, recErr := units.ReadExitRecord(f.exitRecordPath(w))
	updated, err := f.cfg.Registry.Update(sctx, w.ID, w.RunID, func(r *Worker) error {
		if recErr == nil && !r.HasExit {
			applyExitRecord(r, rec)
		}
		r.EndedAt, r.FrozenAt = f.cfg.Now(), time.Time{}
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
	<-reset
	res.Took.Record = time.Since(lap)
	if err != nil {
		return nil, fmt.Errorf("stop %s: %w", w.ID, err)
	}
	f.noteWorktreeEnd(ctx, updated)
	f.withWorktrees(ctx, updated)
	res.Worker, res.Survivors = updated, survivors
	f.deliverEnded(sctx, updated)
	switch {
	case len(survivors) > 0:
		return res, fmt.Errorf("stop %s: %w: %s survived SIGKILL: %v", w.ID, ErrCleanupIncomplete, Plural(len(survivors), "process"), survivors)
	case stopErr != nil:
		return res, fmt.Errorf("stop %s: %w: %v", w.ID, ErrCleanupIncomplete, stopErr)
	}
	f.log.Info("worker stopped", "id", w.ID, "run", w.RunID)
	return res, nil
}

// endUnit ends w's unit and waits until it is inactive: SIGTERM to every
// process of the unit (SIGKILL at once with opts.Kill), SIGKILL if the
// unit still runs once grace has passed, and the unit's stop job, which
// is done once the unit is inactive (its exit record written). Every wait
// is an event, not a poll.
//
// The grace is the caller's, and every signal is reported. Where the
// unit's own stop timeout (unitTimeout, fixed when it started) is no
// shorter than the grace, the stop job sends the SIGTERM and the fleet the
// SIGKILL at the grace: one call, and the job's completion arrives as the
// unit goes inactive, before systemd collects it. Otherwise the job would
// SIGKILL too early: the fleet sends SIGTERM itself (KillUnit), waits for
// the main process on a pidfd, SIGKILLs at the grace, and only then starts
// the job, whose timeout applies once the main process has ended.
func (f *Fleet) endUnit(ctx context.Context, w *Worker, cgroup string, opts StopOptions, grace, unitTimeout time.Duration) error {
	step := func(sig string, d time.Duration) {
		if opts.Progress != nil {
			opts.Progress(StopStep{ID: w.ID, Signal: sig, Grace: d})
		}
	}
	killAt := time.Now().Add(grace)
	killed := false
	kill := func(d time.Duration) {
		if !killed && f.cfg.Units.KillUnit(ctx, w.Unit, syscall.SIGKILL) == nil {
			killed = true
			step("SIGKILL", d)
		}
	}
	jobTerm := false
	switch {
	case opts.Kill:
		kill(0)
	case unitTimeout >= grace:
		jobTerm = true
	default:
		if err := f.cfg.Units.KillUnit(ctx, w.Unit, syscall.SIGTERM); err != nil {
			break // gone already, or the manager did not answer: the job decides
		}
		step("SIGTERM", grace)
		killAt = time.Now().Add(grace)
		gctx, cancel := context.WithDeadline(ctx, killAt)
		err := f.waitMainExit(gctx, w, cgroup)
		graceOver := gctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil && graceOver {
			kill(grace)
		}
	}
	// The job's queueing is reported from this goroutine, as every step is.
	queued := make(chan struct{}, 1)
	jctx := ctx
	if jobTerm {
		jctx = units.WithJobQueued(ctx, func() { queued <- struct{}{} })
	}
	done := make(chan error, 1)
	go func() { done <- f.cfg.Units.StopUnit(jctx, w.Unit) }()
	escalate := time.NewTimer(time.Until(killAt))
	defer escalate.Stop()
	for {
		select {
		case <-queued:
			step("SIGTERM", grace)
			escalate.Reset(grace) // the grace runs from the job's SIGTERM
		case err := <-done:
			select {
			case <-queued:
				step("SIGTERM", grace)
			default:
			}
			if errors.Is(err, units.ErrUnitNotFound) {
				return nil // ended and collected already
			}
			return err
		case <-escalate.C:
			kill(grace) // still running at the grace: the main process, or what outlived it
		}
	}
}

// waitMainExit waits until the main process of w's unit has ended: on a
// pidfd where the recorded pid can be watched, else by polling the unit
// until it is inactive.
func (f *Fleet) waitMainExit(ctx context.Context, w *Worker, cgroup string) error {
	if w.MainPID > 0 && cgroup != "" {
		err := f.cfg.Cgroups.WaitExit(ctx, w.MainPID, cgroup)
		if !errors.Is(err, units.ErrUnsupported) {
			return err
		}
	}
	return f.waitInactive(ctx, w.Unit)
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
