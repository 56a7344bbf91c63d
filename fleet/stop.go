package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Control is systemd's control process (the exit record's ExecStopPost)
	// that was the only process left in the cgroup when it was proven
	// empty of the worker's own; 0 when the cgroup was empty. It may still
	// run when the stop returns, and is systemd's to end.
	Control int
	// Took is where the stop's time went.
	Took StopTimings
}

// StopTimings is where a stop's time went, step by step.
type StopTimings struct {
	// Fence is reading the record and writing the registry's stop fence
	// (and the unit's stop timeout, where its spawn did not record it).
	Fence time.Duration
	// End is from the first signal until the shim's exit (when it recorded
	// its workload's end), else until the unit was inactive: the worker's
	// own exit, systemd's stop and the exit record's ExecStopPost.
	End time.Duration
	// Proof is reading the cgroup (and, when a process is left, the unit's
	// control process), and killing what outlived the unit.
	Proof time.Duration
	// Record is writing the outcome to the registry (the unit is reset
	// meanwhile).
	Record time.Duration
	// Notice is delivering the ended notice to the worker's manager, when
	// the fleet has a sender (at most endedDeliveryBudget; what is not
	// delivered is owed, and sent later).
	Notice time.Duration
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
// with opts.Kill), sends SIGKILL once the grace has passed, and stops the
// unit. Once the shim has exited having recorded its workload's end in the
// registry, a cgroup that holds no process, or none but the unit's control
// process (systemd's ExecStopPost, which writes the exit record), is proven
// empty of the worker's processes, and the stop ends there: the stop job
// runs on in systemd, the ExecStopPost still writes the exit record, and
// the unit is collected once inactive. Otherwise (a process of the worker
// is left, or the shim recorded nothing: it was killed) it waits for the
// unit to be inactive, reads the cgroup, SIGKILLs whatever is still there,
// reads it again, and resets the unit; the exit record then says how the
// shim ended. Stopping an ended worker leaves its record as it is and ends
// what it left in its unit (endLeftovers).
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
		return f.endLeftovers(ctx, w, opts)
	}
	// The unit's own stop timeout decides who sends the SIGTERM (endUnit):
	// where it is not recorded, read it while the fence is written.
	timeout := f.stopTimeout(ctx, w)
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
		res.Took.Fence = time.Since(began) - res.Took.End - res.Took.Proof - res.Took.Record - res.Took.Notice
	}
	return res, err
}

// stopTimeout is the stop timeout of w's unit: as its spawn recorded it,
// or else read from the user manager on a goroutine of its own, to overlap
// what the stop does first; the channel gets it, or 0 when it could not be
// read.
func (f *Fleet) stopTimeout(ctx context.Context, w *Worker) <-chan time.Duration {
	ch := make(chan time.Duration, 1)
	if w.StopTimeout > 0 {
		ch <- w.StopTimeout
		return ch
	}
	go func() {
		d, err := f.cfg.Units.StopTimeout(ctx, w.Unit)
		if err != nil {
			d = 0
		}
		ch <- d
	}()
	return ch
}

// stopUnit stops the unit of w (already marked stopping) and proves the
// cleanup. timeout gets the unit's own stop timeout (stopTimeout).
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
	end, stopErr := f.endUnit(sctx, w, cgroup, opts, grace, unitTimeout)
	res.Took.End, lap = time.Since(lap)-end.proof, time.Now()
	// Proof: read the cgroup the unit had; kill what is left.
	var survivors []units.Process
	if end.proven {
		res.Control = end.control
	} else if cgroup != "" {
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
	res.Took.Proof, lap = time.Since(lap)+end.proof, time.Now()
	if !end.proven {
		// The shim did not see its end through (killed, most often):
		// what its session left in journals goes into the files.
		f.foldSessionFiles(w)
	}
	// Resetting the unit and recording the outcome are independent: the
	// reset's round trip to the manager overlaps the registry write. A
	// unit proven early is still ending (its ExecStopPost runs with the
	// unit's result, which a reset would clear): CollectMode=
	// inactive-or-failed unloads it once it is inactive or failed.
	reset := make(chan struct{})
	go func() {
		defer close(reset)
		if !end.proven {
			_ = f.cfg.Units.ResetFailed(sctx, w.Unit)
		}
	}()
	rec, recErr := units.ExitRecord{}, errNoRecordNeeded // the shim recorded the end
	if !end.proven {
		rec, recErr = units.ReadExitRecord(f.exitRecordPath(w))
	}
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
	lap = time.Now()
	f.deliverEnded(sctx, updated)
	res.Took.Notice = time.Since(lap)
	switch {
	case len(survivors) > 0:
		return res, fmt.Errorf("stop %s: %w: %s survived SIGKILL: %v", w.ID, ErrCleanupIncomplete, Plural(len(survivors), "process"), survivors)
	case stopErr != nil:
		return res, fmt.Errorf("stop %s: %w: %v", w.ID, ErrCleanupIncomplete, stopErr)
	}
	f.log.Info("worker stopped", "id", w.ID, "run", w.RunID)
	return res, nil
}

// endLeftovers is the stop of a worker that had ended: processes it
// started that outlive it in its unit's cgroup (systemd's own stop of the
// unit, at the unit's stop timeout, may be under way) get SIGTERM and,
// once the grace has passed since the worker ended (at once with
// opts.Kill), SIGKILL through the cgroup. The stop succeeds only once the
// cgroup holds none but systemd's control process; the record is left as
// it is: the worker ended before the stop.
func (f *Fleet) endLeftovers(ctx context.Context, w *Worker, opts StopOptions) (*StopResult, error) {
	res := &StopResult{Worker: w, AlreadyEnded: true}
	if len(f.leftoverPIDs(ctx, w)) == 0 {
		return res, nil // the common case: its cgroup is empty, or gone
	}
	grace := opts.Grace
	if grace <= 0 {
		grace = f.cfg.StopTimeout
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+15*time.Second)
	defer cancel()
	step := func(sig string, d time.Duration) {
		if opts.Progress != nil {
			opts.Progress(StopStep{ID: w.ID, Signal: sig, Grace: d})
		}
	}
	if !opts.Kill {
		if err := f.cfg.Units.KillUnit(sctx, w.Unit, syscall.SIGTERM); err == nil {
			left := time.Until(w.EndedAt.Add(grace))
			step("SIGTERM", max(left, 0))
			gctx, stop := context.WithTimeout(sctx, left)
			for _, pid := range f.leftoverPIDs(sctx, w) {
				if gctx.Err() != nil || f.cfg.Cgroups.WaitExit(gctx, pid, w.ControlGroup) != nil {
					break
				}
			}
			stop()
		}
	}
	if pids := f.leftoverPIDs(sctx, w); len(pids) > 0 {
		rep, kerr := f.cfg.Cgroups.Kill(sctx, w.ControlGroup)
		step("SIGKILL", grace)
		res.Killed, res.Survivors = pids, rep.Survivors
		for _, pid := range rep.Signalled {
			if !slices.Contains(res.Killed, pid) {
				res.Killed = append(res.Killed, pid)
			}
		}
		if kerr != nil && len(res.Survivors) == 0 {
			res.Survivors = f.cfg.Cgroups.Processes(f.leftoverPIDs(sctx, w))
		}
		f.log.Warn("processes outlived the worker; killed through its cgroup", "id", w.ID, "pids", pids)
	}
	if len(res.Survivors) > 0 {
		return res, fmt.Errorf("stop %s: %w: %s survived SIGKILL: %v", w.ID, ErrCleanupIncomplete, Plural(len(res.Survivors), "process"), res.Survivors)
	}
	return res, nil
}

// leftoverPIDs are the processes in the cgroup of w, an ended worker,
// other than its unit's control process (onlyControl); none where the
// cgroup is gone or cannot be read.
func (f *Fleet) leftoverPIDs(ctx context.Context, w *Worker) []int {
	if w.ControlGroup == "" {
		return nil
	}
	if _, ok := f.onlyControl(ctx, w.Unit, w.ControlGroup); ok {
		return nil
	}
	pids, _ := f.cfg.Cgroups.Procs(w.ControlGroup)
	return pids
}

// errNoRecordNeeded: the exit record file is not read, the shim having
// recorded its workload's end.
var errNoRecordNeeded = errors.New("the shim recorded the end")

// unitEnd is how endUnit saw the unit end.
type unitEnd struct {
	// proven: once the shim had exited, having recorded its workload's
	// end, the cgroup held no process but control (provenEmpty); the stop
	// job may still run.
	proven  bool
	control int
	// proof is how long that proof took (part of endUnit's time).
	proof time.Duration
}

// endUnit ends w's unit and waits until it is inactive, or until the
// cgroup is proven empty of the worker's processes once its shim exited
// (provenEmpty): SIGTERM to every process of the unit (SIGKILL at once
// with opts.Kill), SIGKILL if the unit still runs once grace has passed,
// and the unit's stop job, which is done once the unit is inactive (its
// exit record written). Every wait is an event, not a poll.
//
// The grace is the caller's, and every signal is reported. Where the
// unit's own stop timeout (unitTimeout, fixed when it started) is no
// shorter than the grace, the stop job sends the SIGTERM and the fleet the
// SIGKILL at the grace: one call, and the job's completion arrives as the
// unit goes inactive, before systemd collects it. Otherwise the job would
// SIGKILL too early: the fleet sends SIGTERM itself (KillUnit), waits for
// the main process on a pidfd, SIGKILLs at the grace, and only then starts
// the job, whose timeout applies once the main process has ended.
//
// The early end is taken only once the job was queued: it then runs on in
// systemd, and only the wait for it is given up (go-systemd's job channel
// is buffered, and the waiting StopUnit returns before endUnit does).
func (f *Fleet) endUnit(ctx context.Context, w *Worker, cgroup string, opts StopOptions, grace, unitTimeout time.Duration) (unitEnd, error) {
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
	// The shim's exit, watched on a pidfd while the job runs (at once
	// where it exited already).
	wctx, unwatch := context.WithCancel(ctx)
	defer unwatch()
	exited := make(chan struct{})
	if w.MainPID > 0 && cgroup != "" {
		go func() {
			if f.cfg.Cgroups.WaitExit(wctx, w.MainPID, cgroup) == nil {
				close(exited)
			}
		}()
	}
	// The job's queueing is reported from this goroutine, as every step is.
	queued := make(chan struct{}, 1)
	jctx, giveUp := context.WithCancel(units.WithJobQueued(ctx, func() { queued <- struct{}{} }))
	defer giveUp()
	done := make(chan error, 1)
	go func() { done <- f.cfg.Units.StopUnit(jctx, w.Unit) }()
	escalate := time.NewTimer(time.Until(killAt))
	defer escalate.Stop()
	inSystemd, shimGone := false, false
	for {
		select {
		case <-queued:
			inSystemd = true
			if jobTerm {
				step("SIGTERM", grace)
				escalate.Reset(grace) // the grace runs from the job's SIGTERM
			}
		case <-exited:
			exited, shimGone = nil, true
		case err := <-done:
			select {
			case <-queued:
				if jobTerm {
					step("SIGTERM", grace)
				}
			default:
			}
			if errors.Is(err, units.ErrUnitNotFound) {
				return unitEnd{}, nil // ended and collected already
			}
			return unitEnd{}, err
		case <-escalate.C:
			kill(grace) // still running at the grace: the main process, or what outlived it
		}
		if inSystemd && shimGone {
			shimGone = false // tried once: else the job's end decides
			began := time.Now()
			if control, ok := f.provenEmpty(ctx, w, cgroup); ok {
				giveUp()
				<-done
				return unitEnd{proven: true, control: control, proof: time.Since(began)}, nil
			}
		}
	}
}

// provenEmpty reports, once w's shim has exited, whether the stop may end
// before the unit is inactive: the registry has the workload's end (the
// shim recorded it: the exit record file is not needed) and the cgroup
// holds nothing but systemd's own control process (onlyControl).
func (f *Fleet) provenEmpty(ctx context.Context, w *Worker, cgroup string) (control int, ok bool) {
	if cur, err := f.cfg.Registry.GetRun(ctx, w.ID, w.RunID); err != nil || !cur.HasExit {
		return 0, false
	}
	return f.onlyControl(ctx, w.Unit, cgroup)
}

// onlyControl reports whether cgroup, the cgroup of unit, holds no
// process, or one only, which the manager names as the unit's control
// process (ControlPID): systemd forks it (the exit record's ExecStopPost)
// itself once the main process has ended, and nothing of the worker's can
// join a cgroup once none of its processes is left. control is that pid,
// 0 for an empty cgroup. The cgroup is read before the manager is asked:
// pids are allocated cyclically, so a worker's process that ended
// meanwhile cannot have handed its number on to the control process
// between the two reads.
func (f *Fleet) onlyControl(ctx context.Context, unit, cgroup string) (control int, ok bool) {
	if cgroup == "" {
		return 0, false
	}
	pids, err := f.cfg.Cgroups.Procs(cgroup)
	switch {
	case err != nil || len(pids) > 1:
		return 0, false
	case len(pids) == 0:
		return 0, true
	}
	pid, err := f.cfg.Units.ControlPID(ctx, unit)
	if err != nil || pid != pids[0] {
		return 0, false
	}
	return pid, true
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
