package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CleanupOptions configure one janitor run.
type CleanupOptions struct {
	// Execute acts; without it the run only reports what it would do.
	Execute bool
	// Budget bounds the run's time (default 2 min); MaxActions its
	// checkpoints and stops (default 128). What is left waits for the next
	// run.
	Budget     time.Duration
	MaxActions int
}

// CleanupAction is one thing the janitor did or would do.
type CleanupAction struct {
	Kind   string `json:"kind"` // checkpoint, stop, prune, notify, recover, fence, untracked, cap-log, remove-file, worktree, keep-worktree
	ID     string `json:"id,omitempty"`
	RunID  string `json:"runId,omitempty"`
	Reason string `json:"reason"`
	Done   bool   `json:"done"`
	Error  string `json:"error,omitempty"`
	// Format and Times, when Format is set, are Reason's parts: a %s per
	// time, so that text for people can show them in local time (Reason
	// has them in UTC, RFC 3339; a zero time is "spawn").
	Format string      `json:"-"`
	Times  []time.Time `json:"-"`
}

// TimedCleanupAction is a CleanupAction of w whose reason is format with
// times (Format, Times).
func TimedCleanupAction(kind string, w *Worker, format string, times ...time.Time) CleanupAction {
	stamps := make([]any, len(times))
	for i, t := range times {
		stamps[i] = stampOr(t)
	}
	return CleanupAction{Kind: kind, ID: w.ID, RunID: w.RunID, Reason: fmt.Sprintf(format, stamps...), Format: format, Times: times}
}

// CleanupReport is a janitor run's outcome.
type CleanupReport struct {
	Executed        bool            `json:"executed"`
	Actions         []CleanupAction `json:"actions"`
	BudgetExhausted bool            `json:"budgetExhausted,omitempty"`
}

func cleanupLockPath(f *Fleet) string {
	return filepath.Join(f.cfg.Paths.OrchestratorDir(), "cleanup.lock")
}

// Cleanup is the janitor (docs/architecture.md "Leases"): it sends checkpoint messages
// to leased workers nearing their idle deadline, stops those past the grace
// deadline with verified cleanup (recording why), prunes ended records past
// retention, and reconciles worker units with the registry. One run at a
// time: a concurrent run gets ErrCleanupInProgress. A worker whose lease was
// renewed after it was selected is never stopped.
func (f *Fleet) Cleanup(ctx context.Context, opts CleanupOptions) (*CleanupReport, error) {
	if opts.Budget <= 0 {
		opts.Budget = 2 * time.Minute
	}
	if opts.MaxActions <= 0 {
		opts.MaxActions = 128
	}
	unlock, err := tryLock(cleanupLockPath(f))
	if err != nil {
		return nil, err
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(ctx, opts.Budget)
	defer cancel()
	rep := &CleanupReport{Executed: opts.Execute, Actions: []CleanupAction{}}
	add := func(a CleanupAction) { rep.Actions = append(rep.Actions, a) }

	if opts.Execute {
		if rr, err := f.Reconcile(ctx); err == nil {
			for _, w := range rr.Recovered {
				add(CleanupAction{Kind: "recover", ID: w.ID, RunID: w.RunID, Reason: "live unit without a record; rebuilt (manager " + w.Manager + ")", Done: true})
			}
			for _, u := range rr.Fenced {
				add(CleanupAction{Kind: "fence", Reason: u + " ran after its stop; stopped again", Done: true})
			}
			for _, u := range rr.Ambiguous {
				add(CleanupAction{Kind: "untracked", Reason: u})
			}
		}
	}

	ws, err := f.cfg.Registry.List(ctx, Filter{LiveOnly: true})
	if err != nil {
		return rep, err
	}
	// One listing settles them all; a worker about to be acted on is read
	// again, on its own, right before (due).
	f.settleLive(ctx, ws)
	actions := 0
	for _, w := range ws {
		if ctx.Err() != nil || actions >= opts.MaxActions {
			rep.BudgetExhausted = true
			break
		}
		if !f.due(w) {
			continue
		}
		if w, _ = f.settle(ctx, w); !f.due(w) {
			continue
		}
		now := f.cfg.Now()
		grace := w.LeaseDeadline.Add(f.cfg.Leases.Grace)
		switch {
		case !now.Before(grace):
			actions++
			a := TimedCleanupAction("stop", w, "idle since %s; lease ended %s, grace ended %s", w.LastActivity, w.LeaseDeadline, grace)
			if opts.Execute {
				a.Done, a.Error = f.expire(ctx, w)
			}
			add(a)
		case !now.Before(w.LeaseDeadline.Add(-f.cfg.Leases.Warning)):
			if !w.CheckpointSentAt.IsZero() && now.Sub(w.CheckpointSentAt) < f.cfg.Leases.Retry {
				continue
			}
			actions++
			a := TimedCleanupAction("checkpoint", w, "lease ends %s; stop at %s unless renewed", w.LeaseDeadline, grace)
			if opts.Execute {
				a.Done, a.Error = f.checkpoint(ctx, w, grace)
			}
			add(a)
		}
	}
	cutoff := f.cfg.Now().Add(-f.cfg.Leases.Retention)
	wts, _ := f.cfg.Registry.PrunableWorktrees(ctx, cutoff, "")
	// The preview counts what the run would prune, so that it lists the
	// same actions.
	prune, pruneNotices := f.cfg.Registry.CountPrunable, f.cfg.Registry.CountPrunableNotices
	if opts.Execute {
		prune, pruneNotices = f.cfg.Registry.Prune, f.cfg.Registry.PruneNotices
	}
	if n, err := prune(ctx, cutoff); err == nil && n > 0 {
		add(CleanupAction{Kind: "prune", Reason: fmt.Sprintf("%s older than %s", Plural(n, "ended record"), f.cfg.Leases.Retention), Done: opts.Execute})
	}
	if n, err := pruneNotices(ctx, cutoff); err == nil && n > 0 {
		add(CleanupAction{Kind: "prune", Reason: fmt.Sprintf("%s older than %s", Plural(n, "ended notice"), f.cfg.Leases.Retention), Done: opts.Execute})
	}
	if opts.Execute {
		// Notices owed to managers that were away when their workers
		// ended, and are connected now.
		if n, err := f.DeliverOwed(ctx, NoticeFilter{}); n > 0 || err != nil {
			a := CleanupAction{Kind: "notify", Reason: fmt.Sprintf("delivered %s to managers that were away", Plural(n, "ended notice")), Done: err == nil}
			if err != nil {
				a.Error = err.Error()
			}
			add(a)
		}
	}
	for _, o := range f.releaseWorktrees(ctx, wts, opts.Execute) {
		add(worktreeAction(o, opts.Execute))
	}
	for _, a := range f.tidyFiles(ctx, opts.Execute) {
		add(a)
	}
	for _, a := range f.tidyWorkerDirs(ctx, opts.Execute) {
		add(a)
	}
	return rep, nil
}

// worktreeAction is the janitor's report of a worktree it removed, or
// kept (and why), or would remove.
func worktreeAction(o WorktreeOutcome, execute bool) CleanupAction {
	a := CleanupAction{Kind: "worktree", ID: o.ID, RunID: o.RunID, Done: o.Removed, Error: o.Error}
	switch {
	case o.Kept != "":
		a.Kind, a.Reason, a.Done = "keep-worktree", "keep "+o.Path+" (branch "+o.Branch+"): "+o.Kept, execute
	case o.Removed && o.BranchDeleted:
		a.Reason = "removed " + o.Path + " and its merged branch " + o.Branch
	case o.Removed:
		a.Reason = "removed " + o.Path + " (branch " + o.Branch + " kept)"
	case !execute && o.Error == "":
		a.Reason = "remove " + o.Path + ": clean, and its commits are merged or pushed"
	default:
		a.Reason = "could not remove " + o.Path
	}
	return a
}

// due reports whether the janitor has something to do for w now: a live
// worker with an idle lease, not being stopped and not paused (its lease
// does not run down while it is: resume moves the deadline on), whose
// checkpoints have begun (Cleanup says which action).
func (f *Fleet) due(w *Worker) bool {
	if !w.State.Live() || w.LeaseDeadline.IsZero() || w.State == StateStopping || w.Paused() {
		return false
	}
	return !f.cfg.Now().Before(w.LeaseDeadline.Add(-f.cfg.Leases.Warning))
}

// Worker log files are capped: past LogCap bytes, all but the last
// LogKeep bytes are dropped.
const (
	LogCap  = 16 << 20
	LogKeep = 1 << 20
)

// tidyFiles caps worker log files and removes the log files, their time
// indexes and the exit records, untouched for the retention period, of incarnations the registry
// no longer has (pruned, forgotten).
func (f *Fleet) tidyFiles(ctx context.Context, execute bool) []CleanupAction {
	var out []CleanupAction
	for _, dir := range []struct{ path, ext string }{{LogDir(f.cfg.Paths), ".log"}, {LogDir(f.cfg.Paths), ".times"}, {exitDir(f.cfg.Paths), ".exit"}} {
		entries, err := os.ReadDir(dir.path)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), dir.ext)
			i := strings.LastIndexByte(name, '-')
			if !ok || i <= 0 || !e.Type().IsRegular() {
				continue
			}
			path := filepath.Join(dir.path, e.Name())
			fi, err := e.Info()
			if err != nil {
				continue
			}
			old := fi.ModTime().Before(f.cfg.Now().Add(-f.cfg.Leases.Retention))
			if old && f.recordGone(ctx, name[:i], name[i+1:]) {
				a := CleanupAction{Kind: "remove-file", ID: name[:i], RunID: name[i+1:], Reason: path + " belongs to a record that is gone"}
				if execute {
					a.Done = os.Remove(path) == nil
				}
				out = append(out, a)
				continue
			}
			if dir.ext == ".log" && fi.Size() > LogCap {
				a := CleanupAction{Kind: "cap-log", ID: name[:i], RunID: name[i+1:], Reason: fmt.Sprintf("%s is %d MiB; keep its last %d MiB", path, fi.Size()>>20, LogKeep>>20)}
				if execute {
					if err := capLog(path); err != nil {
						a.Error = err.Error()
					} else {
						a.Done = true
					}
				}
				out = append(out, a)
			}
		}
	}
	return out
}

// recordGone reports whether the registry has no record of incarnation
// id+run (only asked of files past retention: a file of every worker is
// read each run).
func (f *Fleet) recordGone(ctx context.Context, id, run string) bool {
	_, err := f.cfg.Registry.GetRun(ctx, id, run)
	return errors.Is(err, ErrNotFound)
}

// capLog keeps the last LogKeep bytes of a log file in place (the worker's
// unit appends to the same inode, so it cannot be replaced by a rename).
func capLog(path string) error {
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	tail := make([]byte, LogKeep)
	n, err := fh.ReadAt(tail, fi.Size()-LogKeep)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	tail = tail[:n]
	if i := bytes.IndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:] // start at a line
	}
	now := time.Now()
	dropped := fi.Size() - int64(len(tail))
	head := []byte(fmt.Sprintf("[agent-fleet: log capped at %s; %d earlier bytes dropped]\n", now.UTC().Format(time.RFC3339), dropped))
	if _, err := fh.WriteAt(append(head, tail...), 0); err != nil {
		return err
	}
	if err := fh.Truncate(int64(len(head) + len(tail))); err != nil {
		return err
	}
	return shiftLogTimes(path, dropped, int64(len(head)), now)
}

func stampOr(t time.Time) string {
	if t.IsZero() {
		return "spawn"
	}
	return stamp(t)
}

// stamp is t in RFC 3339, UTC: the janitor's reasons are data (JSON,
// messages to workers), whatever the host's time zone.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// checkpoint tells a worker its lease is running out, as the session
// "agent-fleet", naming its manager.
func (f *Fleet) checkpoint(ctx context.Context, w *Worker, grace time.Time) (bool, string) {
	if f.cfg.Notify == nil {
		return false, "no notifier configured"
	}
	text := fmt.Sprintf("agent-fleet checkpoint for worker %s (manager %s): no message from you has reached your manager since %s. "+
		"Your lease ends at %s and you will be stopped at %s. Commit your work, report to %s with intercom_send, "+
		"or ask %s to renew you (agent-fleet renew %s).",
		w.ID, w.Manager, stampOr(w.LastActivity), stamp(w.LeaseDeadline), stamp(grace), w.Manager, w.Manager, w.ID)
	err := f.cfg.Notify(ctx, w.ID, text)
	now := f.cfg.Now()
	_, uerr := f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		if !r.LeaseDeadline.Equal(w.LeaseDeadline) {
			return nil // renewed meanwhile
		}
		r.CheckpointSentAt, r.GraceDeadline = now, grace
		r.CheckpointAttempts++
		return nil
	})
	switch {
	case err != nil:
		return false, err.Error()
	case uerr != nil:
		return true, uerr.Error()
	}
	return true, ""
}

// expire stops a worker whose lease and grace ran out — fenced: if its
// lease moved since it was selected (activity, renew, adopt), it is left.
func (f *Fleet) expire(ctx context.Context, w *Worker) (bool, string) {
	var skipped bool
	marked, err := f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		if !r.LeaseDeadline.Equal(w.LeaseDeadline) || !r.State.Live() || r.State == StateStopping || r.Paused() {
			skipped = true
			return nil
		}
		r.State, r.StopRequestedAt, r.StopReason = StateStopping, f.cfg.Now(), "lease-expired"
		return nil
	})
	if err != nil {
		return false, err.Error()
	}
	if skipped {
		return false, "renewed or paused before it expired"
	}
	if _, err := f.stopUnit(ctx, marked, StopOptions{}, f.stopTimeout(ctx, marked)); err != nil {
		return false, err.Error()
	}
	f.log.Info("worker stopped: lease expired", "id", w.ID, "manager", w.Manager)
	return true, ""
}
