package fleet

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// DefaultBusyTimeout is how long a registry operation waits for another
// process's write transaction before failing with ErrBusy.
const DefaultBusyTimeout = 5 * time.Second

// RegistryOptions tune OpenRegistryWithOptions. The zero value is the
// production setting.
type RegistryOptions struct {
	// Now is the clock for CreatedAt/UpdatedAt/EndedAt stamps (nil =
	// time.Now). Tests inject one to move time.
	Now func() time.Time
	// BusyTimeout is SQLite's busy_timeout, in whole milliseconds (0 =
	// DefaultBusyTimeout).
	BusyTimeout time.Duration
}

// Registry is the fleet's worker registry: one SQLite file shared by every
// agent-fleet process of a user (CLI verbs, MCP servers, worker shims).
//
// Concurrency: a *Registry is safe for concurrent use by many goroutines, and
// any number of processes may open the same file. Every mutation is one short
// BEGIN IMMEDIATE transaction (read-modify-write under SQLite's write lock, so
// concurrent writers never clobber each other); within a process writers also
// queue on a semaphore so they do not spin in SQLite's busy handler. Reads are
// single statements and see either all or none of a mutation (WAL snapshot).
// A writer that cannot get the lock within the busy timeout fails with ErrBusy
// having written nothing.
//
// The registry of an agent directory (RegistryPath) keeps the workers.json
// view beside it (view.go) up to date after every committed write that
// changes what it shows (the live workers' summaries), off the writer's
// path; Close waits for the last refresh, so a process that closes its
// registries before it exits leaves the view current.
type Registry struct {
	path      string
	db        *sql.DB
	now       func() time.Time
	writeSem  chan struct{}
	stmts     *statements
	hooks     hookRunner
	view      string // the workers.json kept up to date; "" for none
	id        string
	createdAt time.Time
	file      os.FileInfo // the file as opened, to notice a replacement
}

// OpenRegistry opens (creating if missing) the registry file at path,
// normally <agentDir>/intercom/orchestrator/fleet.db. See
// OpenRegistryWithOptions.
func OpenRegistry(ctx context.Context, path string) (*Registry, error) {
	return OpenRegistryWithOptions(ctx, path, RegistryOptions{})
}

// OpenRegistryWithOptions opens the registry at path. A missing file is
// created 0600 (its directory 0700, parents included); an existing file's
// permissions are left as they are. The connection runs in WAL mode with
// busy_timeout, foreign_keys on and synchronous=NORMAL (see dsn), and the schema is
// migrated to RegistrySchemaVersion.
//
// An existing non-empty file is checked before anything can write to it (by
// its header bytes, then over a read-only connection), so a refused file keeps
// its bytes and mtime:
//   - not a regular file, not a SQLite database, or PRAGMA quick_check /
//     foreign_key_check fails: ErrCorrupt (the file is left where and as it
//     is: keeping it aside is the caller's call);
//   - user_version above RegistrySchemaVersion: ErrSchemaNewer.
//
// The read-only check may leave the empty -wal and -shm companions SQLite
// needs to read a WAL database beside other processes; it never writes the
// database file. quick_check reads the whole file: about 1 ms per thousand
// records. Other errors: ErrBusy (another process held the lock past the busy
// timeout), and the file system's own.
func OpenRegistryWithOptions(ctx context.Context, path string, opts RegistryOptions) (*Registry, error) {
	if path == "" {
		return nil, errors.New("open registry: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	path = abs
	r := &Registry{path: path, now: opts.Now, writeSem: make(chan struct{}, 1)}
	if r.now == nil {
		r.now = time.Now
	}
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := createRegistryFile(ctx, path, busy); err != nil {
			return nil, fmt.Errorf("open registry %s: %w", path, err)
		}
	case err != nil:
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("open registry %s: %w: not a regular file (%s)", path, ErrCorrupt, st.Mode().Type())
	case st.Size() > 0:
		if err := preflight(ctx, path, busy); err != nil {
			return nil, fmt.Errorf("open registry %s: %w", path, err)
		}
	}

	db, err := sql.Open("sqlite", dsn(path, busy, false))
	if err != nil {
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	r.db = db
	r.stmts = newStatements(db)
	if err := enableWAL(ctx, db, busy); err != nil {
		db.Close()
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	if err := migrate(ctx, db, r.now().UnixMilli()); err != nil {
		db.Close()
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	if err := r.loadMeta(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	r.file, _ = os.Stat(path)
	// The view follows from the path, not an option: every opener of an
	// agent directory's registry (CLI verbs, MCP holders, worker shims,
	// recovery) keeps it without being told, and no other registry has one.
	if r.view = viewPathOf(path); r.view != "" {
		r.hooks.fn = r.refreshOwnView
	}
	return r, nil
}

// createRegistryFile creates an empty registry file, 0600 (SQLite would
// make it 0644; it gives the -wal and -shm files the database file's
// mode). Companions of a deleted database would be replayed into the new
// one, so they are removed first — under a lock, and only while no
// database file exists: a concurrent opener that found the new file may
// already use its own companions.
func createRegistryFile(ctx context.Context, path string, wait time.Duration) error {
	unlock, err := intercom.LockFile(ctx, path+".create-lock", wait)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return nil // another opener created it
	}
	_ = os.Remove(path + "-wal")
	_ = os.Remove(path + "-shm")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// Stale reports whether the file at Path is no longer the one this handle
// opened: deleted, or replaced by another file. A long-running process must
// then reopen instead of writing to an unlinked file.
func (r *Registry) Stale() bool {
	now, err := os.Stat(r.path)
	return err != nil || r.file == nil || !os.SameFile(now, r.file)
}

func (r *Registry) loadMeta(ctx context.Context) error {
	rows, err := r.db.QueryContext(ctx, `SELECT key, value FROM meta`)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return classify(err)
		}
		switch k {
		case "registry_id":
			r.id = v
		case "created_at_ms":
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.createdAt = fromMS(ms)
		}
	}
	return classify(rows.Err())
}

// Close waits for the change hook's run in flight (the workers.json view of
// the last write) and closes the registry's connections. The last
// connection of the last process to close checkpoints the WAL into the
// file.
func (r *Registry) Close() error {
	r.hooks.close()
	r.AwaitChangeHook()
	return errors.Join(r.stmts.close(), r.db.Close())
}

// cached reads outside a transaction with prepared statements.
func (r *Registry) cached() querier { return cachedQuerier{s: r.stmts} }

// Path is the absolute path of the registry file.
func (r *Registry) Path() string { return r.path }

// ID is the registry's random UUID, made when the file was created. Another
// value at the same path later means the file was replaced.
func (r *Registry) ID() string { return r.id }

// CreatedAt is when the registry file was created (millisecond precision).
func (r *Registry) CreatedAt() time.Time { return r.createdAt }

// Bytes is the database's size in bytes (page count × page size),
// whether its pages are in the file yet or still in the write-ahead log.
func (r *Registry) Bytes(ctx context.Context) (int64, error) {
	var pages, size int64
	if err := r.db.QueryRowContext(ctx, `SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&pages, &size); err != nil {
		return 0, fmt.Errorf("registry size: %w", classify(err))
	}
	return pages * size, nil
}

// Check runs PRAGMA quick_check and PRAGMA foreign_key_check on the open
// registry (for doctor). Problems are ErrCorrupt, with at most 10 listed.
func (r *Registry) Check(ctx context.Context) error {
	if err := quickCheck(ctx, r.db); err != nil {
		return fmt.Errorf("check registry %s: %w", r.path, err)
	}
	return nil
}

// Reserve records a new incarnation of w.ID before its unit is started. In one
// IMMEDIATE transaction it refuses if a live incarnation of the id exists
// (ErrConflict), assigns w a fresh RunID (random 12 hex, never used for the id
// before) and the id's next Generation, sets Unit to WorkerUnitName, State to
// provisioning, CreatedAt and UpdatedAt to now, and inserts the record with
// the rest of w's fields as given. Of concurrent Reserves of one id, in any
// number of processes, exactly one wins.
//
// On success w holds the record as stored (times truncated to milliseconds,
// in UTC). On error w is unchanged. Errors: ErrInvalidID, ErrInvalidRecord,
// ErrConflict, ErrBusy.
func (r *Registry) Reserve(ctx context.Context, w *Worker) error {
	if w == nil {
		return fmt.Errorf("reserve worker: %w: nil", ErrInvalidRecord)
	}
	op := fmt.Sprintf("reserve worker %q", w.ID)
	if err := ValidID(w.ID); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	rec := w.Clone()
	now := r.now()
	rec.State = StateProvisioning
	rec.CreatedAt, rec.UpdatedAt = now, now
	if err := validateFields(rec); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	err := r.write(ctx, func(tx querier) error {
		if live, err := liveIncarnation(ctx, tx, rec.ID); err != nil {
			return err
		} else if live != nil {
			return conflictLive(live)
		}
		gen, err := ledgerGeneration(ctx, tx, rec.ID)
		if err != nil {
			return err
		}
		runID, err := freshRunID(ctx, tx, rec.ID)
		if err != nil {
			return err
		}
		rec.RunID, rec.Generation = runID, gen+1
		rec.Unit = WorkerUnitName(rec.ID, rec.RunID)
		if err := recordLedger(ctx, tx, rec, toMS(now)); err != nil {
			return err
		}
		return insertWorker(ctx, tx, rec)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	*w = *roundTrip(rec)
	return nil
}

// Insert writes a complete record as given: registry recovery uses it to
// rebuild the records of live units. w.ID and w.RunID must be valid
// (ErrInvalidID) and w.State one of the seven states (ErrInvalidRecord).
// Defaults: Generation 0 = the id's next generation, Unit "" = WorkerUnitName,
// zero CreatedAt/UpdatedAt = now. ErrConflict if that id+run is recorded or w
// is live and a live incarnation of the id exists. The ledgers learn the
// RunID and (if larger) the Generation. On success w holds the record as
// stored.
func (r *Registry) Insert(ctx context.Context, w *Worker) error {
	if w == nil {
		return fmt.Errorf("insert worker: %w: nil", ErrInvalidRecord)
	}
	op := fmt.Sprintf("insert worker %q run %s", w.ID, w.RunID)
	if err := ValidID(w.ID); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := ValidRunID(w.RunID); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if w.Generation < 0 {
		return fmt.Errorf("%s: %w: generation %d", op, ErrInvalidRecord, w.Generation)
	}
	rec := w.Clone()
	now := r.now()
	if rec.Unit == "" {
		rec.Unit = WorkerUnitName(rec.ID, rec.RunID)
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now
	}
	if rec.UpdatedAt.IsZero() {
		rec.UpdatedAt = now
	}
	if err := validateFields(rec); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	err := r.write(ctx, func(tx querier) error {
		if _, err := getRun(ctx, tx, rec.ID, rec.RunID); err == nil {
			return fmt.Errorf("%w: incarnation already recorded", ErrConflict)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		if rec.State.Live() {
			if live, err := liveIncarnation(ctx, tx, rec.ID); err != nil {
				return err
			} else if live != nil {
				return conflictLive(live)
			}
		}
		if rec.Generation == 0 {
			gen, err := ledgerGeneration(ctx, tx, rec.ID)
			if err != nil {
				return err
			}
			rec.Generation = gen + 1
		}
		if err := recordLedger(ctx, tx, rec, toMS(now)); err != nil {
			return err
		}
		return insertWorker(ctx, tx, rec)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	*w = *roundTrip(rec)
	return nil
}

// Get returns the live incarnation of id, else its most recent one (highest
// Generation). Errors: ErrInvalidID, ErrNotFound.
func (r *Registry) Get(ctx context.Context, id string) (*Worker, error) {
	if err := ValidID(id); err != nil {
		return nil, fmt.Errorf("get worker: %w", err)
	}
	// One statement, so one snapshot; each subquery is one index probe (the
	// live index, then id+generation), however long the id's history.
	row := r.cached().QueryRowContext(ctx, `SELECT `+workerColumns+` FROM workers WHERE id = ?1 AND run_id = coalesce(
		(SELECT run_id FROM workers WHERE id = ?1 AND `+liveStatesSQL+`),
		(SELECT run_id FROM workers WHERE id = ?1 ORDER BY generation DESC, created_at_ms DESC, run_id DESC LIMIT 1))`, id)
	w, err := scanWorker(row)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: no worker %q has a record here", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("get worker %q: %w", id, err)
	}
	return w, nil
}

// GetRun returns the incarnation id+runID. Errors: ErrInvalidID, ErrNotFound.
func (r *Registry) GetRun(ctx context.Context, id, runID string) (*Worker, error) {
	if err := ValidID(id); err != nil {
		return nil, fmt.Errorf("get worker: %w", err)
	}
	if err := ValidRunID(runID); err != nil {
		return nil, fmt.Errorf("get worker %q: %w", id, err)
	}
	w, err := getRun(ctx, r.cached(), id, runID)
	if err != nil {
		return nil, fmt.Errorf("get worker %q run %s: %w", id, runID, err)
	}
	return w, nil
}

// Filter selects workers for List. The conditions combine with AND.
type Filter struct {
	Manager  string  // "" = every manager
	LiveOnly bool    // only provisioning, running, stopping
	States   []State // empty = any; an unknown state is ErrInvalidRecord
}

// List returns the matching incarnations: ids in byte order, each id's
// incarnations newest (highest Generation) first. An empty result is a nil
// slice and no error.
func (r *Registry) List(ctx context.Context, f Filter) ([]*Worker, error) {
	var where []string
	var args []any
	if f.Manager != "" {
		where = append(where, `manager = ?`)
		args = append(args, f.Manager)
	}
	if f.LiveOnly {
		where = append(where, liveStatesSQL)
	}
	if len(f.States) > 0 {
		marks := make([]string, len(f.States))
		for i, s := range f.States {
			if !s.Valid() {
				return nil, fmt.Errorf("list workers: %w: unknown state %q", ErrInvalidRecord, s)
			}
			marks[i] = "?"
			args = append(args, string(s))
		}
		where = append(where, `state IN (`+strings.Join(marks, ", ")+`)`)
	}
	q := `SELECT ` + workerColumns + ` FROM workers`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY id, generation DESC, created_at_ms DESC, run_id DESC`
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", classify(err))
	}
	defer rows.Close()
	var out []*Worker
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workers: %w", classify(err))
	}
	return out, nil
}

// Summary is the part of a worker's record that views of the registry show
// (the workers.json view, team rosters).
type Summary struct {
	ID, RunID string
	Kind      string
	Role      string
	Manager   string
	State     State
}

// Summary returns w's summary.
func (w *Worker) Summary() Summary {
	return Summary{ID: w.ID, RunID: w.RunID, Kind: w.Kind, Role: w.Role, Manager: w.Manager, State: w.State}
}

// LiveSummaries returns the summaries of the live incarnations, ids in byte
// order: List(Filter{LiveOnly: true}) reading six columns instead of every
// one, for views rewritten after every change.
func (r *Registry) LiveSummaries(ctx context.Context) ([]Summary, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT id, run_id, kind, role, manager, state FROM workers WHERE `+liveStatesSQL+` ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list live workers: %w", classify(err))
	}
	defer rows.Close()
	var out []Summary
	for rows.Next() {
		var s Summary
		if err := rows.Scan(&s.ID, &s.RunID, &s.Kind, &s.Role, &s.Manager, &s.State); err != nil {
			return nil, fmt.Errorf("list live workers: %w", classify(err))
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list live workers: %w", classify(err))
	}
	return out, nil
}

// Update reads incarnation id+runID, calls fn on a copy of it and writes the
// result back, all in one IMMEDIATE transaction: no concurrent writer's change
// can be lost between the read and the write (docs/architecture.md "Decisions"). fn runs
// under the registry's write lock: keep it short, do no I/O in it, and do not
// call the Registry from it (a write there would wait for itself).
//
// fn returning an error aborts without writing, and Update returns that error
// unwrapped. fn may not change ID, RunID or Generation (ErrInvalidRecord), nor
// set an unknown state (ErrInvalidRecord), nor make the incarnation live while
// another incarnation of the id is (ErrConflict). UpdatedAt is set to now; on
// a change from a live to a terminal state a zero EndedAt is set to now,
// and the ended notice the worker's manager is owed (ended.go) is recorded
// in the same transaction. The change hook runs only if the update changed a live worker's Summary.
// Returns the record as stored. Errors: ErrInvalidID, ErrNotFound, ErrBusy.
func (r *Registry) Update(ctx context.Context, id, runID string, fn func(*Worker) error) (*Worker, error) {
	op := fmt.Sprintf("update worker %q run %s", id, runID)
	if err := ValidID(id); err != nil {
		return nil, fmt.Errorf("update worker: %w", err)
	}
	if err := ValidRunID(runID); err != nil {
		return nil, fmt.Errorf("update worker %q: %w", id, err)
	}
	if fn == nil {
		return nil, fmt.Errorf("%s: %w: nil update function", op, ErrInvalidRecord)
	}
	var out *Worker
	var fnErr error
	shown := false
	err := r.writeLocked(ctx, func(tx querier) error {
		cur, err := getRun(ctx, tx, id, runID)
		if err != nil {
			return err
		}
		w := cur.Clone()
		if err := fn(w); err != nil {
			fnErr = err
			return err
		}
		switch {
		case w.ID != cur.ID:
			return fmt.Errorf("%w: the update changed ID to %q", ErrInvalidRecord, w.ID)
		case w.RunID != cur.RunID:
			return fmt.Errorf("%w: the update changed RunID to %q", ErrInvalidRecord, w.RunID)
		case w.Generation != cur.Generation:
			return fmt.Errorf("%w: the update changed Generation to %d", ErrInvalidRecord, w.Generation)
		}
		now := r.now()
		w.UpdatedAt = now
		if w.State.Terminal() && cur.State.Live() && w.EndedAt.IsZero() {
			w.EndedAt = now
		}
		if err := validateFields(w); err != nil {
			return err
		}
		if w.State.Live() && !cur.State.Live() {
			if live, err := liveIncarnation(ctx, tx, id); err != nil {
				return err
			} else if live != nil {
				return conflictLive(live)
			}
		}
		if err := updateWorker(ctx, tx, w); err != nil {
			return err
		}
		if w.State.Terminal() && cur.State.Live() {
			// The end and the notice its manager is owed commit together.
			if err := owe(ctx, tx, w, now); err != nil {
				return err
			}
		}
		shown = (cur.State.Live() || w.State.Live()) && cur.Summary() != w.Summary()
		out = roundTrip(w)
		return nil
	})
	if fnErr != nil {
		return nil, fnErr // fn's own error, as fn returned it
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if shown {
		// Views show live workers' summaries: a write that changes none
		// (an exit status, a lease) needs no refresh, and a process that
		// made only such writes closes without waiting for one.
		r.hooks.changed(context.WithoutCancel(ctx))
	}
	return out, nil
}

// Unreserve deletes incarnation id+runID while it is still provisioning:
// a reservation whose unit was never asked for (Spawn's own checks refused
// it). The run and generation stay in the ledgers, never to be given again.
// Errors: ErrInvalidID, ErrNotFound (no such incarnation provisioning).
func (r *Registry) Unreserve(ctx context.Context, id, runID string) error {
	if err := ValidID(id); err != nil {
		return fmt.Errorf("unreserve worker: %w", err)
	}
	if err := ValidRunID(runID); err != nil {
		return fmt.Errorf("unreserve worker %q: %w", id, err)
	}
	err := r.write(ctx, func(tx querier) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE id = ? AND run_id = ? AND state = 'provisioning'`, id, runID)
		if err != nil {
			return classify(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return classify(err)
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("unreserve worker %q run %s: %w", id, runID, err)
	}
	return nil
}

// Forget deletes the ended incarnations of id that manager manages (""
// = every manager's, and only once none of id is live), and returns how
// many it deleted. Another manager's incarnations, ended or live, are
// left as they are. The ledgers keep the id's generation and RunIDs, so a
// later spawn of the id gets the next generation and a never-used RunID.
// Errors: ErrInvalidID, ErrConflict (with manager "": a live incarnation
// exists; nothing deleted), ErrNotFound (nothing to delete).
func (r *Registry) Forget(ctx context.Context, id, manager string) (int, error) {
	if err := ValidID(id); err != nil {
		return 0, fmt.Errorf("forget worker: %w", err)
	}
	var n int64
	err := r.write(ctx, func(tx querier) error {
		if manager == "" {
			if live, err := liveIncarnation(ctx, tx, id); err != nil {
				return err
			} else if live != nil {
				return conflictLive(live)
			}
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE id = ? AND `+terminalStatesSQL+` AND (? = '' OR manager = ?)`, id, manager, manager)
		if err != nil {
			return classify(err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return classify(err)
		}
		if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("forget worker %q: %w", id, err)
	}
	return int(n), nil
}

// Prune deletes the terminal incarnations that ended before olderThan (by
// EndedAt, or UpdatedAt where EndedAt is zero) and returns how many. Live
// incarnations are never pruned; the ledgers are kept.
func (r *Registry) Prune(ctx context.Context, olderThan time.Time) (int, error) {
	return r.PruneManager(ctx, olderThan, "")
}

// PruneManager is Prune limited to one manager's records ("" = every
// manager's).
func (r *Registry) PruneManager(ctx context.Context, olderThan time.Time, manager string) (int, error) {
	if olderThan.IsZero() {
		return 0, nil
	}
	cutoff := olderThan.UnixMilli()
	var n int64
	err := r.write(ctx, func(tx querier) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM workers WHERE `+prunableSQL, cutoff, manager, manager)
		if err != nil {
			return classify(err)
		}
		n, err = res.RowsAffected()
		return classify(err)
	})
	if err != nil {
		return 0, fmt.Errorf("prune workers ended before %s: %w", olderThan.UTC().Format(time.RFC3339), err)
	}
	return int(n), nil
}

// prunableSQL selects the records PruneManager deletes; its arguments are
// the cutoff in ms and the manager twice.
const prunableSQL = terminalStatesSQL + `
	AND (CASE WHEN ended_at_ms != 0 THEN ended_at_ms ELSE updated_at_ms END) < ?
	AND (? = '' OR manager = ?)`

// CountPrunable is how many records Prune(olderThan) would delete, for a
// preview that must not delete them.
func (r *Registry) CountPrunable(ctx context.Context, olderThan time.Time) (int, error) {
	if olderThan.IsZero() {
		return 0, nil
	}
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM workers WHERE `+prunableSQL, olderThan.UnixMilli(), "", "").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count workers ended before %s: %w", olderThan.UTC().Format(time.RFC3339), classify(err))
	}
	return n, nil
}

// write runs fn in one BEGIN IMMEDIATE transaction and commits it; fn's error
// rolls back. In-process writers queue on writeSem (honouring ctx) so only
// writers of other processes meet SQLite's busy handler.
func (r *Registry) write(ctx context.Context, fn func(querier) error) error {
	if err := r.writeLocked(ctx, fn); err != nil {
		return err
	}
	r.hooks.changed(context.WithoutCancel(ctx))
	return nil
}

func (r *Registry) writeLocked(ctx context.Context, fn func(querier) error) error {
	select {
	case r.writeSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.writeSem }()
	tx, err := r.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock=immediate)
	if err != nil {
		return classify(err)
	}
	if err := fn(cachedQuerier{r.stmts, tx}); err != nil {
		tx.Rollback() //nolint:errcheck // the first error is the one to report
		return err
	}
	return classify(tx.Commit())
}

// querier is what the row helpers need: *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}

// getRunSQL reads one incarnation (getRun).
const getRunSQL = `SELECT ` + workerColumns + ` FROM workers WHERE id = ? AND run_id = ?`

func getRun(ctx context.Context, q querier, id, runID string) (*Worker, error) {
	return scanWorker(q.QueryRowContext(ctx, getRunSQL, id, runID))
}

// liveIncarnation returns the live incarnation of id, or nil.
func liveIncarnation(ctx context.Context, q querier, id string) (*Worker, error) {
	w, err := scanWorker(q.QueryRowContext(ctx,
		`SELECT `+workerColumns+` FROM workers WHERE id = ? AND `+liveStatesSQL, id))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return w, err
}

func conflictLive(live *Worker) error {
	return fmt.Errorf("%w: incarnation %s (generation %d, unit %s) is %s",
		ErrConflict, live.RunID, live.Generation, live.Unit, live.State)
}

// ledgerGeneration is the highest generation ever given to id (0 = none).
func ledgerGeneration(ctx context.Context, q querier, id string) (int, error) {
	var gen int
	err := q.QueryRowContext(ctx, `SELECT generation FROM generations WHERE id = ?`, id).Scan(&gen)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return gen, classify(err)
}

// freshRunID draws random 12-hex RunIDs until one the run ledger has never
// seen for id (a repeat needs ~2^24 incarnations of one id to be likely).
func freshRunID(ctx context.Context, q querier, id string) (string, error) {
	for range 16 {
		runID, err := newRunID()
		if err != nil {
			return "", err
		}
		var one int
		err = q.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ? AND run_id = ?`, id, runID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return runID, nil
		}
		if err != nil {
			return "", classify(err)
		}
	}
	return "", errors.New("could not draw an unused run id")
}

// newRunID is 6 random bytes in lowercase hex.
func newRunID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("draw run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// recordLedger raises id's ledger generation to w.Generation (never lowers
// it) and records w.RunID in the run ledger.
func recordLedger(ctx context.Context, q querier, w *Worker, nowMS int64) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO generations (id, generation, updated_at_ms) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET generation = max(generation, excluded.generation),
			updated_at_ms = excluded.updated_at_ms`, w.ID, w.Generation, nowMS); err != nil {
		return classify(err)
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO runs (id, run_id, generation, created_at_ms) VALUES (?, ?, ?, ?)
		ON CONFLICT DO NOTHING`, w.ID, w.RunID, w.Generation, toMS(w.CreatedAt)); err != nil {
		return classify(err)
	}
	return nil
}

func insertWorker(ctx context.Context, q querier, w *Worker) error {
	_, err := q.ExecContext(ctx, insertSQL, workerArgs(w)...)
	return classify(err)
}

func updateWorker(ctx context.Context, q querier, w *Worker) error {
	args := workerArgs(w)
	args = append(args[identityColumns:], w.ID, w.RunID)
	res, err := q.ExecContext(ctx, updateSQL, args...)
	if err != nil {
		return classify(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return classify(err)
	} else if n != 1 {
		return ErrNotFound
	}
	return nil
}

// validateFields checks what every stored record must satisfy beyond its
// identity: a known state, and lists that JSON can carry unchanged.
func validateFields(w *Worker) error {
	if !w.State.Valid() {
		return fmt.Errorf("%w: unknown state %q", ErrInvalidRecord, w.State)
	}
	for _, l := range [][]string{w.Command, w.EnvKeys} {
		for _, s := range l {
			if !utf8.ValidString(s) {
				return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidRecord, s)
			}
		}
	}
	return nil
}

// classify wraps SQLite errors that callers act on: busy/locked → ErrBusy,
// corrupt/not-a-database → ErrCorrupt, a uniqueness violation → ErrConflict.
// Other errors (and nil) pass through.
func classify(err error) error {
	var se *sqlite.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	switch code := se.Code(); {
	case code&0xff == sqlite3.SQLITE_BUSY, code&0xff == sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w: %w", ErrBusy, err)
	case code&0xff == sqlite3.SQLITE_CORRUPT, code&0xff == sqlite3.SQLITE_NOTADB:
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	case code == sqlite3.SQLITE_CONSTRAINT_UNIQUE, code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}
