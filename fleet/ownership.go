package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// PeerChecker answers whether a session is connected to the broker and from
// which pid (the broker's local API; intercom.LocalAPIClient implements it).
type PeerChecker interface {
	Peer(ctx context.Context, sessionID string) (*intercom.PeerInfo, error)
}

// ownershipEntry is one line of the ownership journal: who manages an
// incarnation from a given time. It lives beside the database so that a
// lost registry can be rebuilt with the current managers, not only the
// first ones the unit environment names.
type ownershipEntry struct {
	ID      string `json:"id"`
	RunID   string `json:"run"`
	Manager string `json:"manager"`
	At      int64  `json:"at"` // epoch ms
	Why     string `json:"why"`
}

func ownershipJournal(p intercom.Paths) string {
	return filepath.Join(p.OrchestratorDir(), "ownership.jsonl")
}

// journalOwnership appends an ownership change durably (fsync).
func (f *Fleet) journalOwnership(w *Worker, why string) error {
	path := ownershipJournal(f.cfg.Paths)
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, intercom.FileMode)
	if err != nil {
		return fmt.Errorf("ownership journal: %w", err)
	}
	defer fh.Close()
	line, _ := json.Marshal(ownershipEntry{ID: w.ID, RunID: w.RunID, Manager: w.Manager, At: f.cfg.Now().UnixMilli(), Why: why})
	if _, err := fh.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("ownership journal: %w", err)
	}
	return fh.Sync()
}

// readOwnership returns the managers each id+run was adopted by, oldest
// first.
func readOwnership(p intercom.Paths) map[string][]string {
	out := map[string][]string{}
	fh, err := os.Open(ownershipJournal(p))
	if err != nil {
		return out
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var e ownershipEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.ID != "" && e.Manager != "" {
			out[e.ID+"/"+e.RunID] = append(out[e.ID+"/"+e.RunID], e.Manager)
		}
	}
	return out
}

// own checks that the caller manages w.
func (f *Fleet) own(w *Worker, op string) error {
	if w.Manager != f.cfg.Caller {
		return &OwnerError{ID: w.ID, Owner: w.Manager, Caller: f.cfg.Caller, Op: op, Ended: w.State.Terminal()}
	}
	return nil
}

// renewed applies activity at now to a record: a fresh idle window, and no
// checkpoint pending.
func renewed(r *Worker, now time.Time) {
	r.LastActivity = now
	if r.LeaseDuration > 0 {
		r.LeaseDeadline = now.Add(r.LeaseDuration)
	}
	r.CheckpointSentAt, r.CheckpointAttempts, r.GraceDeadline = time.Time{}, 0, time.Time{}
}

// Renew gives a live worker of the caller a fresh idle window.
func (f *Fleet) Renew(ctx context.Context, id string) (*Worker, error) {
	return f.RenewWith(ctx, id, BudgetChange{})
}

// RenewWith is Renew that also sets the bounds budget gives on the
// worker's budget. A coding-agent worker whose budget was spent and that
// keeps a batch of messages runs it once the new budget allows: its shim
// reads the budget from the registry. A budget the worker cannot keep
// (Budget; an exec worker) wraps ErrInvalidRequest.
func (f *Fleet) RenewWith(ctx context.Context, id string, budget BudgetChange) (*Worker, error) {
	if err := f.writable(); err != nil {
		return nil, err
	}
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("renew %s: %w", id, err)
	}
	if err := f.own(w, "renew"); err != nil {
		return nil, err
	}
	if err := budget.check(w.Kind); err != nil {
		return nil, fmt.Errorf("renew %s: %w", id, err)
	}
	w, _ = f.settle(ctx, w)
	if !w.State.Live() {
		return w, &EndedError{ID: id, State: w.State, Op: "renew"}
	}
	return f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		renewed(r, f.cfg.Now())
		r.Budget = budget.apply(r.Budget)
		return nil
	})
}

// renewRecord gives w's record a fresh idle lease.
func (f *Fleet) renewRecord(ctx context.Context, w *Worker) (*Worker, error) {
	return f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		renewed(r, f.cfg.Now())
		return nil
	})
}

// RenewAll renews every live worker of the caller.
func (f *Fleet) RenewAll(ctx context.Context) ([]*Worker, error) {
	ws, err := f.cfg.Registry.List(ctx, Filter{Manager: f.cfg.Caller, LiveOnly: true})
	if err != nil {
		return nil, err
	}
	var out []*Worker
	for _, w := range ws {
		r, err := f.Renew(ctx, w.ID)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrEnded) {
			continue // it ended meanwhile (its record was not settled yet)
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// adoptedLease makes r's idle lease the one its new manager's own workers
// get (docs/architecture.md "Leases"): a person's have none, so adopting
// as a person drops the lease; an agent adopting a worker without one gives
// it the default; an agent adopting an agent's worker keeps its length.
func adoptedLease(r *Worker, manager string, def time.Duration) {
	switch {
	case IsOperator(manager):
		r.LeaseDuration, r.LeaseDeadline = 0, time.Time{}
	case r.LeaseDuration == 0:
		r.LeaseDuration = def
	}
}

// Adopt makes the caller the manager of a live worker. Adopting from a
// manager whose session is connected is refused unless force. The worker
// learns its new manager without restarting: its shim and intercom_team
// read the registry. Its lease becomes what the caller's own workers get
// (adoptedLease), renewed from now. A worker that has ended is an
// *EndedError (ErrEnded); an unknown id ErrNotFound.
func (f *Fleet) Adopt(ctx context.Context, id string, force bool) (*Worker, error) {
	if err := f.writable(); err != nil {
		return nil, err
	}
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("adopt %s: %w", id, err)
	}
	w, _ = f.settle(ctx, w)
	if !w.State.Live() {
		return w, &EndedError{ID: id, State: w.State, Op: "adopt", Owner: w.Manager, Caller: f.cfg.Caller}
	}
	if w.Manager == f.cfg.Caller {
		return f.renewRecord(ctx, w) // already the caller's: adopting still renews it
	}
	if !force && f.connected(ctx, w.Manager) {
		return w, fmt.Errorf("adopt %s: %w: %q is connected and still owns it; ask it, or adopt with --force", id, ErrManagerConnected, w.Manager)
	}
	prev := w.Manager
	w, err = f.cfg.Registry.Update(ctx, w.ID, w.RunID, func(r *Worker) error {
		if r.Manager != prev {
			return fmt.Errorf("adopt %s: %w: its manager changed meanwhile", id, ErrConflict)
		}
		r.Manager = f.cfg.Caller
		adoptedLease(r, f.cfg.Caller, f.cfg.Leases.Default)
		renewed(r, f.cfg.Now())
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := f.journalOwnership(w, "adopted from "+prev); err != nil {
		f.log.Warn("ownership journal", "err", err)
	}
	f.log.Info("worker adopted", "id", id, "from", prev, "to", f.cfg.Caller)
	return w, nil
}

// AdoptOrphans adopts every live worker of an agent manager (not a person)
// whose session is not connected and whose lease has expired.
func (f *Fleet) AdoptOrphans(ctx context.Context) ([]*Worker, error) {
	ws, err := f.cfg.Registry.List(ctx, Filter{LiveOnly: true})
	if err != nil {
		return nil, err
	}
	now := f.cfg.Now()
	var out []*Worker
	for _, w := range ws {
		if w.Manager == f.cfg.Caller || IsOperator(w.Manager) || w.LeaseDeadline.IsZero() || now.Before(w.LeaseDeadline) {
			continue
		}
		if f.connected(ctx, w.Manager) {
			continue
		}
		a, err := f.Adopt(ctx, w.ID, false)
		if errors.Is(err, ErrEnded) {
			continue // it ended meanwhile
		}
		if err != nil {
			return out, err
		}
		out = append(out, a)
	}
	return out, nil
}

// connected asks the broker whether a session is connected, here or as
// a live session of another host (a manager that spawned here from
// there still owns its workers); without an answer (no broker, or a
// foreign one) it is treated as not connected.
func (f *Fleet) connected(ctx context.Context, sessionID string) bool {
	p := f.peer(ctx, sessionID)
	return p != nil && (p.Connected || p.RemoteHost != "")
}

// peer is the broker's answer about sessionID (within 2 s); nil without
// one (no broker, a foreign one, or no Peers configured).
func (f *Fleet) peer(ctx context.Context, sessionID string) *intercom.PeerInfo {
	if f.cfg.Peers == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	p, err := f.cfg.Peers.Peer(cctx, sessionID)
	if err != nil {
		return nil
	}
	return p
}

// Forget deletes the caller's ended records of id — another manager's
// runs of the same id, ended or live, are that manager's — and removes
// their worktrees where nothing would be lost (releaseWorktree); a
// worktree with uncommitted or unmerged work is kept, and the outcomes say
// which and why. Errors: ErrNotTerminal (the caller's run of id is live),
// an OwnerError (only other managers' runs), ErrNotFound.
func (f *Fleet) Forget(ctx context.Context, id string, acknowledge bool) (int, []WorktreeOutcome, error) {
	if !acknowledge {
		return 0, nil, fmt.Errorf("forget %s: %w", id, ErrNeedsAcknowledge)
	}
	if err := f.writable(); err != nil {
		return 0, nil, err
	}
	w, err := f.cfg.Registry.Get(ctx, id)
	if err != nil {
		return 0, nil, fmt.Errorf("forget %s: %w", id, err)
	}
	if w.Manager == f.cfg.Caller {
		if w, _ = f.settle(ctx, w); w.State.Live() {
			return 0, nil, fmt.Errorf("forget %s: %w: stop it first", id, ErrNotTerminal)
		}
	}
	wts, err := f.cfg.Registry.Worktrees(ctx, id)
	if err != nil {
		return 0, nil, fmt.Errorf("forget %s: %w", id, err)
	}
	n, err := f.cfg.Registry.Forget(ctx, id, f.cfg.Caller)
	if errors.Is(err, ErrNotFound) {
		if oerr := f.own(w, "forget"); oerr != nil {
			return 0, nil, oerr // none of the caller's: the latest says whose
		}
	}
	if err != nil {
		return 0, nil, err
	}
	var gone []*Worktree // of the runs deleted: other runs keep theirs
	for _, wt := range wts {
		if _, err := f.cfg.Registry.GetRun(ctx, wt.ID, wt.RunID); errors.Is(err, ErrNotFound) {
			gone = append(gone, wt)
		}
	}
	return n, f.releaseWorktrees(ctx, gone, true), nil
}

// Prune deletes ended records of the caller's workers (every manager's with
// all) that ended before olderThan, and removes their worktrees, and
// those of records deleted before, where nothing would be lost
// (releaseWorktree); the outcomes say which were kept and why.
func (f *Fleet) Prune(ctx context.Context, olderThan time.Time, all, acknowledge bool) (int, []WorktreeOutcome, error) {
	if !acknowledge {
		return 0, nil, fmt.Errorf("prune: %w", ErrNeedsAcknowledge)
	}
	if err := f.writable(); err != nil {
		return 0, nil, err
	}
	manager := f.cfg.Caller
	if all {
		manager = ""
	}
	wts, err := f.cfg.Registry.PrunableWorktrees(ctx, olderThan, manager)
	if err != nil {
		return 0, nil, fmt.Errorf("prune: %w", err)
	}
	n, err := f.cfg.Registry.PruneManager(ctx, olderThan, manager)
	if err != nil {
		return 0, nil, err
	}
	return n, f.releaseWorktrees(ctx, wts, true), nil
}
