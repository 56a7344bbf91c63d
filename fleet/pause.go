package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agent-fleet/agent-fleet/units"
)

// Pause freezes a running worker of the caller: every process of its
// unit's cgroup stops where it is (the cgroup2 freezer) and uses no CPU
// until Resume; its memory stays. It is frozen through systemd
// (FreezeUnit), or — where systemd cannot freeze units, on hosts whose
// cgroup hierarchies are not all unified — through the unit's cgroup2
// directory. A paused worker's idle lease does not run down. Its intercom
// session stays registered but cannot answer: its shim is frozen too.
// Pausing a paused worker changes nothing. Errors: ErrNotFound,
// *OwnerError, *EndedError, ErrNotPaused for a worker still starting or
// stopping, units.ErrFreezeUnsupported where neither way works.
func (f *Fleet) Pause(ctx context.Context, id string) (*Worker, error) {
	w, err := f.pausable(ctx, id, "pause")
	if err != nil || w.Paused() {
		return w, err
	}
	if w.State != StateRunning {
		return w, fmt.Errorf("pause %s: %w: it is %s", id, ErrNotPaused, w.State)
	}
	if err := f.freeze(ctx, w, true); err != nil {
		return w, fmt.Errorf("pause %s: %w", id, err)
	}
	updated, err := f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		if r.State != StateRunning {
			return fmt.Errorf("%w: it became %s meanwhile", ErrNotPaused, r.State)
		}
		r.FrozenAt = f.cfg.Now()
		return nil
	})
	if err != nil {
		// Frozen but not recorded: a worker nobody knows is paused must
		// not stay frozen.
		_ = f.freeze(context.WithoutCancel(ctx), w, false)
		return w, fmt.Errorf("pause %s: %w", id, err)
	}
	f.log.Info("worker paused", "id", w.ID, "run", w.RunID)
	return updated, nil
}

// Resume thaws a paused worker of the caller, and moves its idle lease's
// deadlines (and a pending checkpoint's grace) on by the time it was
// paused. Resuming a worker that is not paused changes nothing, as pausing
// a paused one does: a script can make sure a worker runs. Errors:
// ErrNotFound, *OwnerError, *EndedError.
func (f *Fleet) Resume(ctx context.Context, id string) (*Worker, error) {
	w, err := f.pausable(ctx, id, "resume")
	if err != nil || !w.Paused() {
		return w, err
	}
	if err := f.freeze(ctx, w, false); err != nil {
		return w, fmt.Errorf("resume %s: %w", id, err)
	}
	updated, err := f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		resumed(r, f.cfg.Now())
		return nil
	})
	if err != nil {
		return w, fmt.Errorf("resume %s: %w", id, err)
	}
	f.log.Info("worker resumed", "id", w.ID, "run", w.RunID)
	return updated, nil
}

// resumed clears r's pause at now and moves the lease's deadlines on by
// the time it lasted.
func resumed(r *Worker, now time.Time) {
	if r.FrozenAt.IsZero() {
		return
	}
	paused := max(0, now.Sub(r.FrozenAt))
	if !r.LeaseDeadline.IsZero() {
		r.LeaseDeadline = r.LeaseDeadline.Add(paused)
	}
	if !r.GraceDeadline.IsZero() {
		r.GraceDeadline = r.GraceDeadline.Add(paused)
	}
	r.FrozenAt = time.Time{}
}

// pausable reads a live worker of the caller for op, settled.
func (f *Fleet) pausable(ctx context.Context, id, op string) (*Worker, error) {
	if err := f.writable(); err != nil {
		return nil, err
	}
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, id, err)
	}
	if err := f.own(w, op); err != nil {
		return nil, err
	}
	w, _ = f.settle(ctx, w)
	if !w.State.Live() {
		return w, &EndedError{ID: id, State: w.State, Op: op}
	}
	return w, nil
}

// freeze freezes or thaws w's unit: through systemd, else (it cannot
// freeze units on this host) through the unit's cgroup.
func (f *Fleet) freeze(ctx context.Context, w *Worker, frozen bool) error {
	op := f.cfg.Units.ThawUnit
	if frozen {
		op = f.cfg.Units.FreezeUnit
	}
	err := op(ctx, w.Unit)
	if !errors.Is(err, units.ErrFreezeUnsupported) {
		return err
	}
	if f.cfg.Cgroups == nil || w.ControlGroup == "" {
		return err
	}
	if cerr := f.cfg.Cgroups.SetFrozen(ctx, w.ControlGroup, frozen); cerr != nil {
		return fmt.Errorf("%w; through its cgroup: %w", err, cerr)
	}
	return nil
}
