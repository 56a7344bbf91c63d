package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/units"
)

// Status is a worker with what systemd says of it now.
type Status struct {
	Worker *Worker
	Unit   units.UnitState
	// Processes are the worker's processes (pid and executable name, never
	// argv), at most 64; ProcessCount is the full count.
	Processes    []units.Process
	ProcessCount int
	// LeaseActivity says how the worker's activity is judged while it has
	// an idle lease: ActivityVerified (the broker's local API confirms the
	// sending pid's cgroup) or ActivitySenderID (no local API answers, e.g.
	// a foreign broker); "" without a lease.
	LeaseActivity string
	// Turns is a coding-agent worker's record of its turns (nil for exec
	// workers, or before its shim began).
	Turns *harness.TurnState
	// Usage is what a live worker's cgroup uses now (memory, CPU time,
	// tasks, OOM kills, whether it is frozen); nil once it ended or when
	// its cgroup cannot be read.
	Usage *units.Usage
	// Worktree is what the worker's worktree holds now (nil without one).
	Worktree *WorktreeState
}

// unitEnded: the unit runs nothing any more (collected, inactive or failed).
func unitEnded(st units.UnitState) bool {
	return st.Gone() || st.ActiveState == "inactive" || st.ActiveState == "failed"
}

// stoppedAtMaxRuntime: systemd ended r, a worker that got ready, because
// its maximum runtime ran out (the unit's result "timeout"), and nothing
// else said why it stopped.
func stoppedAtMaxRuntime(r *Worker, result string) bool {
	return result == "timeout" && r.StopReason == "" && !r.ReadyAt.IsZero()
}

// endResult is the unit's result once it is ending or ended: the exit
// record's, else the unit's own — systemd sets it when the runtime runs
// out, before the stop (and the exit record written at its end) is over,
// while the shim may have recorded the exit already.
func endResult(st units.UnitState, rec units.ExitRecord, recErr error) string {
	switch {
	case recErr == nil:
		return rec.Result
	case st.ActiveState == "deactivating" || unitEnded(st):
		return st.Result
	}
	return ""
}

// spawnInFlight: w is a reservation its spawn may still be working on
// (the unit not yet asked for, starting, or READY but not yet recorded):
// younger than the longest a spawn waits. Another process's settle must not
// call it lost or running meanwhile.
func (f *Fleet) spawnInFlight(w *Worker) bool {
	return w.State == StateProvisioning && w.ReadyAt.IsZero() && f.cfg.Now().Sub(w.CreatedAt) < f.cfg.StartTimeout+10*time.Second
}

// settle reconciles one record with systemd (level-triggered): a live
// record whose unit is gone ended — how, the exit record says — or was
// lost; a unit running for a stopped record is stopped (the stop fence).
func (f *Fleet) settle(ctx context.Context, w *Worker) (*Worker, units.UnitState) {
	st, err := f.cfg.Units.Unit(ctx, w.Unit)
	if err != nil {
		return w, st
	}
	if w.State.Terminal() {
		if !st.Gone() && (st.Running() || st.ActiveState == "activating") && !w.StopRequestedAt.IsZero() {
			// The stop fence: a start that materialised after the stop (or a
			// spawn given up on) is stopped, never revived.
			_ = f.cfg.Units.StopUnit(ctx, w.Unit)
			_ = f.cfg.Units.ResetFailed(ctx, w.Unit)
		}
		if w.StopReason == "" && !w.ReadyAt.IsZero() && w.StateReason != ReasonOOMKilled && (st.ActiveState == "deactivating" || unitEnded(st)) {
			// Its shim recorded the exit; the unit's result says why.
			rec, recErr := units.ReadExitRecord(f.exitRecordPath(w))
			if result := endResult(st, rec, recErr); stoppedAtMaxRuntime(w, result) || result == "oom-kill" {
				if updated, err := f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
					if stoppedAtMaxRuntime(r, result) {
						r.StopReason = StopMaxRuntime
					}
					if result == "oom-kill" {
						r.StateReason = ReasonOOMKilled
					}
					return nil
				}); err == nil {
					w = updated
				}
			}
		}
		return w, st
	}
	if f.spawnInFlight(w) {
		return w, st // its spawn settles it: READY, or a failed spawn
	}
	switch {
	case unitEnded(st) && st.Gone() && f.runsElsewhere(w):
		// Another user manager of this user runs it (a second private
		// manager booted beside the first): not an end, whatever this
		// manager knows.
	case unitEnded(st):
		rec, recErr := units.ReadExitRecord(f.exitRecordPath(w))
		f.foldSessionFiles(w)
		updated, uerr := f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
			if !r.State.Live() {
				return nil
			}
			if recErr == nil && !r.HasExit {
				applyExitRecord(r, rec)
			}
			if stoppedAtMaxRuntime(r, endResult(st, rec, recErr)) {
				r.StopReason = StopMaxRuntime
			}
			if r.EndedAt.IsZero() {
				r.EndedAt = f.cfg.Now()
			}
			switch {
			case r.State == StateStopping:
				r.State = StateStopped
			case recErr != nil && !r.HasExit:
				r.State, r.StateReason = StateLost, "unit-gone"
			case r.ExitCode == "exited":
				r.State = StateExited
			case r.StopReason == StopMaxRuntime:
				// systemd's stop at the limit, SIGKILL for a command that
				// outlived its SIGTERM: an end, as the shim records one
				// that obeyed, not a failure.
				r.State = StateExited
			default:
				r.State = StateFailed
			}
			if endResult(st, rec, recErr) == "oom-kill" {
				r.StateReason = ReasonOOMKilled
			}
			r.FrozenAt = time.Time{}
			return nil
		})
		if uerr == nil {
			ended := w.State.Live() && updated.State.Terminal()
			if ended {
				f.noteWorktreeEnd(ctx, updated)
			}
			w = updated
			if ended {
				f.deliverEnded(ctx, w)
			}
		}
		if st.ActiveState == "failed" {
			_ = f.cfg.Units.ResetFailed(ctx, w.Unit)
		}
	case st.Running() && w.State == StateProvisioning:
		// A spawn that crashed between READY and its record update.
		if updated, uerr := f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
			if r.State == StateProvisioning {
				r.State, r.MainPID, r.ControlGroup, r.InvocationID = StateRunning, int(st.MainPID), st.ControlGroup, st.InvocationID
			}
			return nil
		}); uerr == nil {
			w = updated
		}
	}
	return w, st
}

// runsElsewhere reports whether processes still run in the cgroup of w,
// whose unit this user manager does not know: systemd removes a unit's
// cgroup once the unit is gone, so its manager is another.
func (f *Fleet) runsElsewhere(w *Worker) bool {
	if w.ControlGroup == "" || f.cfg.Cgroups == nil {
		return false
	}
	pids, err := f.cfg.Cgroups.Procs(w.ControlGroup)
	return err == nil && len(pids) > 0
}

// List returns the caller's workers (every manager's with all), settled
// against systemd: one ListUnits call for all of them (settleLive).
func (f *Fleet) List(ctx context.Context, all bool) ([]*Worker, error) {
	filter := Filter{}
	if !all {
		filter.Manager = f.cfg.Caller
	}
	ws, err := f.cfg.Registry.List(ctx, filter)
	if err != nil {
		return nil, err
	}
	f.settleLive(ctx, ws)
	f.withWorktrees(ctx, ws...)
	return ws, nil
}

// settleLive settles the live records of ws in place with one ListUnits
// call of the worker units however many there are (workerUnits; a
// property read per unit took a D-Bus round trip each): a record whose
// unit's summary agrees with it is as settle would leave it, and only the
// others are settled one by one, with a full read of their unit. A unit
// missing from the listing is read too, so a listing older than the
// records (Reconcile's) can only show a just-ended unit as running, never
// a just-started one as gone. When the listing fails (no manager answers)
// the records stay as read.
func (f *Fleet) settleLive(ctx context.Context, ws []*Worker) {
	var live []int
	for i, w := range ws {
		if w.State.Live() && !f.spawnInFlight(w) {
			live = append(live, i)
		}
	}
	if len(live) == 0 {
		return
	}
	loaded, err := f.workerUnits(ctx)
	if err != nil {
		return
	}
	for _, i := range live {
		if u, ok := loaded[ws[i].Unit]; !ok || !agrees(ws[i], u) {
			ws[i], _ = f.settle(ctx, ws[i])
		}
	}
}

// listingReuse is how old Reconcile's listing of the worker units may be
// for the settleLive after it to use it instead of asking again: a verb
// reconciles when it opens the fleet and lists right after, and at 500
// units a listing costs ~5 ms.
const listingReuse = 500 * time.Millisecond

// unitListing is a ListUnits of the worker units, by name, and when it was
// taken.
type unitListing struct {
	at     time.Time
	byName map[string]units.UnitSummary
}

// keepListing keeps Reconcile's listing, asked for at at, for one
// settleLive.
func (f *Fleet) keepListing(list []units.UnitSummary, at time.Time) {
	l := &unitListing{at: at, byName: make(map[string]units.UnitSummary, len(list))}
	for _, u := range list {
		l.byName[u.Name] = u
	}
	f.mu.Lock()
	f.listing = l
	f.mu.Unlock()
}

// workerUnits is every loaded worker unit's summary by name: Reconcile's
// listing when it is fresh (listingReuse; used once), else a new one.
func (f *Fleet) workerUnits(ctx context.Context) (map[string]units.UnitSummary, error) {
	f.mu.Lock()
	l := f.listing
	f.listing = nil
	f.mu.Unlock()
	if l != nil && time.Since(l.at) < listingReuse {
		return l.byName, nil
	}
	list, err := f.cfg.Units.ListUnits(ctx, UnitPrefix+"*")
	if err != nil {
		return nil, err
	}
	byName := make(map[string]units.UnitSummary, len(list))
	for _, u := range list {
		byName[u.Name] = u
	}
	return byName, nil
}

// agrees reports whether a live record needs nothing from settle given
// its unit's summary: the unit is loaded and has not ended, and the record
// is past provisioning (a provisioning record of a running unit takes the
// unit's pid and cgroup, which only a full read gives).
func agrees(w *Worker, u units.UnitSummary) bool {
	st := units.UnitState{LoadState: u.LoadState, ActiveState: u.ActiveState}
	if unitEnded(st) {
		return false
	}
	return w.State != StateProvisioning || !st.Running()
}

// Status returns one worker's record, unit state and processes.
func (f *Fleet) Status(ctx context.Context, id string) (*Status, error) {
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("status %s: %w", id, err)
	}
	w, st := f.settle(ctx, w)
	f.withWorktrees(ctx, w)
	s := &Status{Worker: w, Unit: st}
	if w.Worktree != nil {
		s.Worktree = InspectWorktree(ctx, w.Worktree)
	}
	if harness.IsKind(w.Kind) {
		s.Turns, _ = harness.ReadTurnState(WorkerDir(f.cfg.Paths, w.ID, w.RunID))
	}
	if w.State.Live() && !w.LeaseDeadline.IsZero() {
		s.LeaseActivity = f.activityMode(ctx, w.ID)
	}
	cgroup := st.ControlGroup
	if cgroup == "" && w.State.Live() {
		cgroup = w.ControlGroup
	}
	if cgroup != "" && w.State.Live() {
		if u, err := f.cfg.Cgroups.Usage(cgroup); err == nil {
			s.Usage = &u
		}
	}
	if cgroup != "" {
		if pids, err := f.cfg.Cgroups.Procs(cgroup); err == nil {
			s.ProcessCount = len(pids)
			if len(pids) > maxStatusProcesses {
				pids = pids[:maxStatusProcesses]
			}
			s.Processes = f.cfg.Cgroups.Processes(pids)
		}
	}
	return s, nil
}

// activityMode is how lease activity of worker id is judged now.
func (f *Fleet) activityMode(ctx context.Context, id string) string {
	if f.peer(ctx, id) == nil {
		return ActivitySenderID
	}
	return ActivityVerified
}

// Logs returns the last n lines a worker wrote: from its log file, or from
// the journal where workers log there.
func (f *Fleet) Logs(ctx context.Context, id string, n int) ([]string, error) {
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("logs %s: %w", id, err)
	}
	if n <= 0 {
		n = 50
	}
	if w.LogPath != "" {
		if _, err := os.Stat(w.LogPath); err != nil {
			return nil, fmt.Errorf("logs %s: %w", id, err)
		}
		return tailLines(w.LogPath, n), nil
	}
	lines, err := journalTail(ctx, w.Unit, n)
	if err != nil {
		return nil, fmt.Errorf("logs %s: %w", id, err)
	}
	return lines, nil
}

// journalTail is the last n lines unit wrote to the journal.
func journalTail(ctx context.Context, unit string, n int) ([]string, error) {
	out, err := exec.CommandContext(ctx, "journalctl", "--user", "--unit", unit, "--no-pager", "--output", "cat", "-n", strconv.Itoa(n)).Output()
	if err != nil {
		return nil, fmt.Errorf("journalctl: %w", err)
	}
	return splitLines(string(out)), nil
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
