package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/agent-fleet/agent-fleet/units"
)

// ErrWaitTimeout: the workers a wait waited for had not ended when its
// timeout passed (exit 9). The error is a *WaitError.
var ErrWaitTimeout = errors.New("timed out waiting for workers to end")

// WaitError is a wait that ended without every awaited worker ending well:
// the timeout passed (TimedOut; errors.Is ErrWaitTimeout), or a worker
// ended otherwise than exiting with status 0 (Ends says how each did; the
// CLI's exit status follows them).
type WaitError struct {
	TimedOut bool
	// Waiting are the workers still live when the timeout passed.
	Waiting []string
	// Ends are how the ended workers ended that did not exit 0 (EndOf),
	// by id.
	Ends map[string]string
}

func (e *WaitError) Error() string {
	if e.TimedOut {
		return fmt.Sprintf("%s: %s still running", ErrWaitTimeout, joinIDs(e.Waiting))
	}
	ids := make([]string, 0, len(e.Ends))
	for id := range e.Ends {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return fmt.Sprintf("%s did not end with exit status 0", joinIDs(ids))
}

// Is makes errors.Is(err, ErrWaitTimeout) hold for a timeout.
func (e *WaitError) Is(target error) bool { return e.TimedOut && target == ErrWaitTimeout }

func joinIDs(ids []string) string {
	if len(ids) == 1 {
		return "worker " + ids[0]
	}
	out := "workers "
	for i, id := range ids {
		if i > 0 {
			out += ", "
		}
		out += id
	}
	return out
}

// waitBackstop is how often a wait settles its workers with systemd even
// without a file event: only ends that write nothing (a user manager that
// died with its units) need it.
const waitBackstop = time.Minute

// Wait blocks until the workers ids have ended — with anyOne, until one of
// them has — and returns their records (each id's live incarnation when
// the wait began, else its latest), in the order given. It is driven by
// changes of the files that record an end: the registry (every write to
// its write-ahead log), and the exit records units write when they stop
// (watched with inotify on Linux); each change re-reads the records and
// settles those whose unit has written its exit record.
//
// When ctx ends first, the records as they stand come with a *WaitError
// that is ErrWaitTimeout when ctx's deadline passed (a cancelled ctx is
// ctx.Err()). When every awaited worker ended (anyOne: one), a worker that
// did not exit 0 makes a *WaitError saying how each ended (EndOf). Unknown
// ids: ErrNotFound; invalid ones ErrInvalidID; no id ErrInvalidRequest.
func (f *Fleet) Wait(ctx context.Context, ids []string, anyOne bool) ([]*Worker, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("wait: %w: name at least one worker", ErrInvalidRequest)
	}
	var uniq []string
	for _, id := range ids {
		if !slices.Contains(uniq, id) {
			uniq = append(uniq, id)
		}
	}
	// Watch before the first read, so that no end falls between them.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watch, err := WatchFleet(wctx, f.cfg.Paths)
	if err != nil {
		return nil, fmt.Errorf("wait: %w", err)
	}
	changed := watch.C
	ws := make([]*Worker, len(uniq))
	for i, id := range uniq {
		if ws[i], err = f.cfg.Registry.Get(ctx, id); err != nil {
			return nil, fmt.Errorf("wait: %w", err)
		}
	}
	backstop := time.NewTicker(waitBackstop)
	defer backstop.Stop()
	settleAll := true // the first look asks systemd of every live one
	for {
		ended := 0
		for i, w := range ws {
			if w.State.Live() {
				if cur, err := f.cfg.Registry.GetRun(ctx, w.ID, w.RunID); err == nil {
					w = cur
				}
				if w.State.Live() && (settleAll || f.unitEnded(w)) {
					w, _ = f.settle(ctx, w)
				}
				ws[i] = w
			}
			if w.State.Terminal() {
				ended++
			}
		}
		settleAll = false
		if ended == len(ws) || (anyOne && ended > 0) {
			return ws, endsError(ws)
		}
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ws, ctx.Err()
			}
			we := &WaitError{TimedOut: true}
			for _, w := range ws {
				if w.State.Live() {
					we.Waiting = append(we.Waiting, w.ID)
				}
			}
			return ws, we
		case _, ok := <-changed:
			if !ok {
				changed = nil // the kernel's watch failed: the backstop goes on
			}
		case <-backstop.C:
			settleAll = true
		}
	}
}

// unitEnded: w's unit has written its exit record (it ended; the record
// may not say so yet).
func (f *Fleet) unitEnded(w *Worker) bool {
	_, err := os.Stat(f.exitRecordPath(w))
	if err != nil {
		return false
	}
	_, err = units.ReadExitRecord(f.exitRecordPath(w))
	return err == nil
}

// endsError is the *WaitError of ended workers that did not exit 0 (nil
// when every ended one did).
func endsError(ws []*Worker) error {
	var we *WaitError
	for _, w := range ws {
		how := EndOf(w)
		if how == "" || (how == EndExited && w.ExitStatus == 0) {
			continue
		}
		if we == nil {
			we = &WaitError{Ends: map[string]string{}}
		}
		we.Ends[w.ID] = how
	}
	if we == nil {
		return nil
	}
	return we
}
