package fleet

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/units"
)

// This file is the registry file's side: opening it safely (checks before
// any write, WAL), its schema and migrations, and the Go mapping of its rows.
// registry.go holds the operations.

// RegistrySchemaVersion is the newest registry schema this build knows. The
// file records its own in PRAGMA user_version; a file with a larger number is
// refused with ErrSchemaNewer before anything is written to it.
const RegistrySchemaVersion = 9

// migrations[i] takes a registry from schema version i to i+1. Append only:
// never edit a migration that has shipped. Each runs inside the one
// BEGIN IMMEDIATE transaction of migrate, together with the user_version bump,
// so a crash leaves the file at the old version, never half-migrated.
var migrations = [][]string{
	// 0 → 1: the first schema.
	{
		// meta: registry_id (a random UUID, new whenever the file is created;
		// a changed id means the file was replaced), created_at_ms.
		`CREATE TABLE meta (
			key   TEXT PRIMARY KEY,
			value TEXT NOT NULL
		) STRICT`,

		// The generation ledger: the highest generation ever given to an id.
		// Rows are never deleted (Forget and Prune keep them), so an id's next
		// incarnation always gets a larger generation.
		`CREATE TABLE generations (
			id            TEXT PRIMARY KEY,
			generation    INTEGER NOT NULL CHECK (generation >= 1),
			updated_at_ms INTEGER NOT NULL
		) STRICT`,

		// The run ledger: every RunID ever used for an id, never deleted, so
		// a RunID (and with it a unit name) is never reused for an id.
		`CREATE TABLE runs (
			id            TEXT NOT NULL REFERENCES generations (id),
			run_id        TEXT NOT NULL,
			generation    INTEGER NOT NULL CHECK (generation >= 1),
			created_at_ms INTEGER NOT NULL,
			PRIMARY KEY (id, run_id)
		) STRICT, WITHOUT ROWID`,

		// One row per incarnation. Times are epoch milliseconds (0 = none),
		// durations milliseconds, command/env_keys JSON arrays of strings.
		`CREATE TABLE workers (
			id                    TEXT NOT NULL,
			run_id                TEXT NOT NULL,
			generation            INTEGER NOT NULL CHECK (generation >= 1),
			kind                  TEXT NOT NULL DEFAULT '',
			role                  TEXT NOT NULL DEFAULT '',
			task                  TEXT NOT NULL DEFAULT '',
			cwd                   TEXT NOT NULL DEFAULT '',
			command               TEXT NOT NULL DEFAULT '[]',
			env_keys              TEXT NOT NULL DEFAULT '[]',
			model                 TEXT NOT NULL DEFAULT '',
			effort                TEXT NOT NULL DEFAULT '',
			permission            TEXT NOT NULL DEFAULT '',
			unit                  TEXT NOT NULL,
			main_pid              INTEGER NOT NULL DEFAULT 0,
			control_group         TEXT NOT NULL DEFAULT '',
			invocation_id         TEXT NOT NULL DEFAULT '',
			log_path              TEXT NOT NULL DEFAULT '',
			state                 TEXT NOT NULL,
			state_reason          TEXT NOT NULL DEFAULT '',
			manager               TEXT NOT NULL DEFAULT '',
			first_manager         TEXT NOT NULL DEFAULT '',
			lease_duration_ms     INTEGER NOT NULL DEFAULT 0,
			lease_deadline_ms     INTEGER NOT NULL DEFAULT 0,
			last_activity_ms      INTEGER NOT NULL DEFAULT 0,
			checkpoint_sent_at_ms INTEGER NOT NULL DEFAULT 0,
			checkpoint_attempts   INTEGER NOT NULL DEFAULT 0,
			grace_deadline_ms     INTEGER NOT NULL DEFAULT 0,
			created_at_ms         INTEGER NOT NULL,
			updated_at_ms         INTEGER NOT NULL,
			ready_at_ms           INTEGER NOT NULL DEFAULT 0,
			stop_requested_at_ms  INTEGER NOT NULL DEFAULT 0,
			ended_at_ms           INTEGER NOT NULL DEFAULT 0,
			has_exit              INTEGER NOT NULL DEFAULT 0,
			exit_code             TEXT NOT NULL DEFAULT '',
			exit_status           INTEGER NOT NULL DEFAULT 0,
			last_error            TEXT NOT NULL DEFAULT '',
			stop_reason           TEXT NOT NULL DEFAULT '',
			PRIMARY KEY (id, run_id),
			FOREIGN KEY (id, run_id) REFERENCES runs (id, run_id)
		) STRICT`,

		// At most one live incarnation per id: the backstop under Reserve's
		// check, and what makes Insert and Update unable to create a second.
		// The WHERE text is liveStatesSQL; List's live-only filter repeats it
		// so the planner can use this index.
		`CREATE UNIQUE INDEX workers_one_live ON workers (id)
			WHERE state IN ('provisioning', 'running', 'stopping')`,

		// Get's "most recent incarnation" and List's order (ids, newest first).
		`CREATE INDEX workers_id_generation ON workers (id, generation DESC)`,

		`CREATE INDEX workers_manager ON workers (manager, id)`,
	},

	// 1 → 2: coding-agent workers' budgets, usage and rate-limit pauses.
	{
		// The budget (0 = none; USD in US dollars, tokens every token the
		// harness reports) and the usage totals of the incarnation's turns,
		// kept by its shim in the same transaction as each turn_usage row.
		`ALTER TABLE workers ADD COLUMN budget_usd REAL NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN budget_tokens INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_turns INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_input_tokens INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_output_tokens INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_cache_read_tokens INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_cache_write_tokens INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_cost_usd REAL NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_unpriced_turns INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN usage_model TEXT NOT NULL DEFAULT ''`,
		// Epoch ms before which a rate-limited worker starts no turn (0 =
		// not paused by a rate limit).
		`ALTER TABLE workers ADD COLUMN paused_until_ms INTEGER NOT NULL DEFAULT 0`,

		// One row per turn whose output reported usage: the usage report's
		// source (--since, --by). The manager and kind are the turn's, so
		// an adoption later does not move spending made before it. Rows
		// reference the run ledger, not workers: forget and prune keep them,
		// as they keep the ledgers.
		`CREATE TABLE turn_usage (
			id                 TEXT NOT NULL,
			run_id             TEXT NOT NULL,
			turn               INTEGER NOT NULL CHECK (turn >= 1),
			ended_at_ms        INTEGER NOT NULL,
			kind               TEXT NOT NULL DEFAULT '',
			manager            TEXT NOT NULL DEFAULT '',
			model              TEXT NOT NULL DEFAULT '',
			input_tokens       INTEGER NOT NULL DEFAULT 0,
			output_tokens      INTEGER NOT NULL DEFAULT 0,
			cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
			cache_write_tokens INTEGER NOT NULL DEFAULT 0,
			cost_usd           REAL NOT NULL DEFAULT 0,
			cost_known         INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (id, run_id, turn),
			FOREIGN KEY (id, run_id) REFERENCES runs (id, run_id)
		) STRICT, WITHOUT ROWID`,
		`CREATE INDEX turn_usage_ended ON turn_usage (ended_at_ms)`,
	},

	// 2 → 3: resource limits and pause.
	{
		// The unit's MemoryMax= (bytes), CPUQuota= (percent of one CPU) and
		// TasksMax= (0 = none), and when pause froze the worker (epoch ms,
		// 0 = not paused).
		`ALTER TABLE workers ADD COLUMN memory_max INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN cpu_quota_percent INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN tasks_max INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN frozen_at_ms INTEGER NOT NULL DEFAULT 0`,
	},

	// 3 → 4: workers' git worktrees (spawn --worktree).
	{
		// One row per incarnation that got a worktree, for as long as the
		// worktree is agent-fleet's to remove: it references the run
		// ledger, not workers, so a worktree kept for its uncommitted or
		// unmerged work outlives its worker's record (forget, prune) and a
		// later prune can still remove it once that work is safe. Paths
		// are absolute; end_status is a JSON array of `git status
		// --porcelain` lines.
		`CREATE TABLE worktrees (
			id               TEXT NOT NULL,
			run_id           TEXT NOT NULL,
			path             TEXT NOT NULL,
			repository       TEXT NOT NULL,
			common_dir       TEXT NOT NULL,
			branch           TEXT NOT NULL,
			created_branch   INTEGER NOT NULL DEFAULT 0,
			base_branch      TEXT NOT NULL DEFAULT '',
			base_commit      TEXT NOT NULL,
			base_dirty_files INTEGER NOT NULL DEFAULT 0,
			created_at_ms    INTEGER NOT NULL,
			end_head         TEXT NOT NULL DEFAULT '',
			end_status       TEXT NOT NULL DEFAULT '[]',
			ended_at_ms      INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (id, run_id),
			FOREIGN KEY (id, run_id) REFERENCES runs (id, run_id)
		) STRICT, WITHOUT ROWID`,
		`CREATE UNIQUE INDEX worktrees_path ON worktrees (path)`,
	},

	// 4 → 5: sandbox profiles.
	{
		// The profile the worker runs in ('' for one spawned before
		// profiles: trusted) and what of it this user manager did not
		// enforce ('' = all of it).
		`ALTER TABLE workers ADD COLUMN profile TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE workers ADD COLUMN profile_degraded TEXT NOT NULL DEFAULT ''`,
	},

	// 5 → 6: permission prompts relayed to the manager.
	{
		// How long a coding-agent worker waits for its manager's answer to
		// a permission prompt (0 = the default), and what it waits for
		// meanwhile ('' = nothing).
		`ALTER TABLE workers ADD COLUMN permission_wait_ms INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE workers ADD COLUMN needs_input TEXT NOT NULL DEFAULT ''`,
	},

	// 6 → 7: worker-ended notices (ended.go).
	{
		// One row per incarnation that ended, written in the transaction
		// that made its record terminal: the message its manager is owed.
		// message_id is stable per run, so a resend after a crash is the
		// same message to every v4 deduplication; text and control are
		// composed once, by the first delivery attempt, and sent verbatim
		// ever after. sent_at_ms 0 = still owed; claimed_until_ms keeps two
		// deliverers from sending at once. Rows reference the run ledger,
		// so forget and prune of the worker record keep them.
		`CREATE TABLE ended_notices (
			id               TEXT NOT NULL,
			run_id           TEXT NOT NULL,
			message_id       TEXT NOT NULL,
			manager          TEXT NOT NULL,
			created_at_ms    INTEGER NOT NULL,
			text             TEXT NOT NULL DEFAULT '',
			control          TEXT NOT NULL DEFAULT '',
			claimed_until_ms INTEGER NOT NULL DEFAULT 0,
			attempts         INTEGER NOT NULL DEFAULT 0,
			last_error       TEXT NOT NULL DEFAULT '',
			sent_at_ms       INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (id, run_id),
			FOREIGN KEY (id, run_id) REFERENCES runs (id, run_id)
		) STRICT, WITHOUT ROWID`,
		`CREATE INDEX ended_notices_owed ON ended_notices (manager) WHERE sent_at_ms = 0`,
	},

	// 7 → 8: messages kept for workers that are not on the broker yet.
	{
		// One row per message a sender handed over for a live incarnation
		// whose session was not connected (deferred.go): the v4 message JSON
		// as sent, its sender's id and name, when it was queued (epoch ms)
		// and when the worker's shim put it in the worker's inbox (0 = still
		// queued). The key is the inbox's deduplication key, (sender,
		// message id), per incarnation.
		`CREATE TABLE deferred_messages (
			id              TEXT NOT NULL,
			run_id          TEXT NOT NULL,
			from_id         TEXT NOT NULL,
			message_id      TEXT NOT NULL,
			from_name       TEXT NOT NULL DEFAULT '',
			message         TEXT NOT NULL,
			queued_at_ms    INTEGER NOT NULL,
			delivered_at_ms INTEGER NOT NULL DEFAULT 0,
			PRIMARY KEY (id, run_id, from_id, message_id),
			FOREIGN KEY (id, run_id) REFERENCES runs (id, run_id)
		) STRICT, WITHOUT ROWID`,
		`CREATE INDEX deferred_messages_from ON deferred_messages (from_id, queued_at_ms)`,
	},

	// 8 → 9: the unit's stop timeout, as spawn set it.
	{
		// TimeoutStopSec= of the worker's unit in ms (0 = not recorded: a
		// record from before, or one recovered from a unit), so that a stop
		// need not ask the user manager before its first signal.
		`ALTER TABLE workers ADD COLUMN stop_timeout_ms INTEGER NOT NULL DEFAULT 0`,
	},
}

// liveStatesSQL and terminalStatesSQL are the SQL forms of State.Live and
// State.Terminal. liveStatesSQL must stay textually equal to the WHERE clause
// of workers_one_live.
const (
	liveStatesSQL     = `state IN ('provisioning', 'running', 'stopping')`
	terminalStatesSQL = `state IN ('stopped', 'exited', 'failed', 'lost')`
)

// migrate brings the schema to RegistrySchemaVersion in one IMMEDIATE
// transaction, re-reading user_version under the write lock so concurrent
// openers migrate once. A file newer than this build is ErrSchemaNewer and the
// transaction is rolled back without having written anything.
func migrate(ctx context.Context, db *sql.DB, nowMS int64) error {
	// The common case, a current file, needs no write lock: opening never
	// waits behind another process's write transaction.
	var version int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("read schema version: %w", classify(err))
	}
	if version > RegistrySchemaVersion {
		return schemaNewerError(version)
	}
	if version == RegistrySchemaVersion {
		return nil
	}

	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock=immediate)
	if err != nil {
		return fmt.Errorf("begin migration: %w", classify(err))
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op

	// Again under the write lock: another process may have migrated (or a
	// newer agent-fleet upgraded) the file since.
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return classify(err)
	}
	if version > RegistrySchemaVersion {
		return schemaNewerError(version)
	}
	if version == RegistrySchemaVersion {
		return nil // rollback of a transaction that wrote nothing
	}
	for v := version; v < RegistrySchemaVersion; v++ {
		for _, stmt := range migrations[v] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, classify(err))
			}
		}
		if v == 0 {
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO meta (key, value) VALUES ('registry_id', ?), ('created_at_ms', ?)`,
				uuid.NewString(), strconv.FormatInt(nowMS, 10)); err != nil {
				return fmt.Errorf("migrate schema 0→1: %w", classify(err))
			}
		}
	}
	// PRAGMA takes no bound parameters; the value is our own constant.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, RegistrySchemaVersion)); err != nil {
		return classify(err)
	}
	return classify(tx.Commit())
}

func schemaNewerError(version int) error {
	return fmt.Errorf("%w: the file has schema %d, this build knows up to %d; upgrade agent-fleet",
		ErrSchemaNewer, version, RegistrySchemaVersion)
}

// ---- opening the file ----

// enableWAL puts the file in WAL mode (a persistent property of the file, a
// no-op when it is already). Switching a fresh file needs its exclusive lock,
// and two connections switching at once can deadlock, which SQLite reports at
// once as SQLITE_BUSY without waiting in the busy handler: so retry, with
// backoff and jitter, for up to wait.
func enableWAL(ctx context.Context, db *sql.DB, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	delay := 2 * time.Millisecond
	for {
		var mode string
		err := classify(db.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode))
		switch {
		case err == nil && strings.EqualFold(mode, "wal"):
			return nil
		case err == nil:
			return fmt.Errorf("enable WAL: journal_mode stayed %q", mode)
		case !errors.Is(err, ErrBusy) || time.Now().After(deadline):
			return fmt.Errorf("enable WAL: %w", err)
		}
		jitter := time.Duration(time.Now().UnixNano() % int64(delay))
		select {
		case <-time.After(delay + jitter):
		case <-ctx.Done():
			return fmt.Errorf("enable WAL: %w", ctx.Err())
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// dsn is the modernc.org/sqlite data source for path. Every connection gets
// busy_timeout first (so the pragmas after it wait too), foreign_keys, and,
// unless read-only, synchronous=NORMAL; write transactions begin with
// BEGIN IMMEDIATE (_txlock), taking the write lock before the first read.
//
// NORMAL in WAL mode keeps every commit through a crash of any process; only
// an OS crash or a power loss can roll back the last commits, and those end
// every worker too (user services do not survive them), which reconciliation
// records. FULL would add an fsync to every commit: two on each spawn's path.
// WAL mode is not a per-connection setting: enableWAL sets it on the file once.
func dsn(path string, busy time.Duration, readOnly bool) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Windows: C:/x → file:///C:/x
	}
	u := url.URL{Path: p}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Set("mode", "ro")
	} else {
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
	}
	return "file://" + u.EscapedPath() + "?" + q.Encode()
}

// sqliteHeader starts every SQLite 3 database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// preflight checks an existing file before anything may write to it:
//  1. the 100-byte database header must start with the SQLite magic, else
//     ErrCorrupt (read with plain file I/O);
//  2. the schema version: with no -wal or -journal beside the file, the
//     header's user_version (bytes 60-63, big-endian) is current and is read
//     from the bytes; otherwise a read-only connection reads it through the
//     WAL. Newer than this build: ErrSchemaNewer;
//  3. PRAGMA quick_check over a read-only connection: ErrCorrupt.
//
// Nothing writes to the database file. Step 3 (and step 2 with a WAL) opens
// the file with SQLite, which creates the empty -wal and -shm companions it
// needs to read a WAL database safely beside other processes.
func preflight(ctx context.Context, path string, busy time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	var head [100]byte
	_, err = io.ReadFull(f, head[:])
	f.Close()
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: not a SQLite database (%s is shorter than a database header)", ErrCorrupt, path)
	}
	if err != nil {
		return err
	}
	if !bytes.Equal(head[:len(sqliteHeader)], sqliteHeader) {
		return fmt.Errorf("%w: not a SQLite database (bad header)", ErrCorrupt)
	}
	if !exists(path+"-wal") && !exists(path+"-journal") {
		if v := int32(binary.BigEndian.Uint32(head[60:64])); v > RegistrySchemaVersion {
			return schemaNewerError(int(v))
		}
	}

	db, err := sql.Open("sqlite", dsn(path, busy, true))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var version int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return classify(err)
	}
	if version > RegistrySchemaVersion {
		return schemaNewerError(version)
	}
	return quickCheck(ctx, db)
}

// exists reports whether path exists (an unreadable path counts as existing).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// quickCheck runs PRAGMA quick_check and PRAGMA foreign_key_check; problems
// (at most 10 of each listed) are ErrCorrupt.
func quickCheck(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) error {
	const maxProblems = 10
	rows, err := q.QueryContext(ctx, fmt.Sprintf(`PRAGMA quick_check(%d)`, maxProblems))
	if err != nil {
		return classify(err)
	}
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return classify(err)
		}
		if s != "ok" {
			problems = append(problems, s)
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return classify(err)
	}
	rows.Close()
	if len(problems) > 0 {
		return fmt.Errorf("%w: quick_check: %s", ErrCorrupt, strings.Join(problems, "; "))
	}

	// foreign_key_check yields (table, rowid, parent, fkid) per violation; on
	// a file with no tables yet it yields nothing.
	rows, err = q.QueryContext(ctx, `PRAGMA foreign_key_check`)
	if err != nil {
		return classify(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var fkid int
		if err := rows.Scan(&table, &rowid, &parent, &fkid); err != nil {
			return classify(err)
		}
		if n < maxProblems {
			problems = append(problems, fmt.Sprintf("%s row %d has no %s parent", table, rowid.Int64, parent))
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	if n > 0 {
		return fmt.Errorf("%w: foreign_key_check: %d violations: %s", ErrCorrupt, n, strings.Join(problems, "; "))
	}
	return nil
}

// ---- the Go mapping of the workers table ----

// workerColumns is the column list every SELECT and INSERT uses, in the order
// of workerArgs and scanWorker.
const workerColumns = `id, run_id, generation, kind, role, task, cwd, command, env_keys,
	model, effort, permission, unit, main_pid, control_group, invocation_id, log_path,
	state, state_reason, manager, first_manager,
	lease_duration_ms, lease_deadline_ms, last_activity_ms, checkpoint_sent_at_ms,
	checkpoint_attempts, grace_deadline_ms,
	created_at_ms, updated_at_ms, ready_at_ms, stop_requested_at_ms, ended_at_ms,
	has_exit, exit_code, exit_status, last_error, stop_reason,
	budget_usd, budget_tokens, usage_turns, usage_input_tokens, usage_output_tokens,
	usage_cache_read_tokens, usage_cache_write_tokens, usage_cost_usd, usage_unpriced_turns, usage_model,
	paused_until_ms, memory_max, cpu_quota_percent, tasks_max, frozen_at_ms, profile, profile_degraded,
	permission_wait_ms, needs_input, stop_timeout_ms`

// identityColumns is how many leading columns of workerColumns are the
// identity (id, run_id, generation) that UPDATE never sets.
const identityColumns = 3

var (
	columnNames = func() []string {
		f := strings.Split(workerColumns, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		return f
	}()
	insertSQL = `INSERT INTO workers (` + workerColumns + `) VALUES (` +
		strings.TrimSuffix(strings.Repeat("?, ", len(columnNames)), ", ") + `)`
	updateSQL = func() string {
		set := make([]string, 0, len(columnNames)-identityColumns)
		for _, c := range columnNames[identityColumns:] {
			set = append(set, c+" = ?")
		}
		return `UPDATE workers SET ` + strings.Join(set, ", ") + ` WHERE id = ? AND run_id = ?`
	}()
)

// workerArgs encodes w in workerColumns order.
func workerArgs(w *Worker) []any {
	return []any{
		w.ID, w.RunID, int64(w.Generation), w.Kind, w.Role, w.Task, w.Cwd,
		encodeList(w.Command), encodeList(w.EnvKeys),
		w.Model, w.Effort, w.Permission, w.Unit, int64(w.MainPID), w.ControlGroup, w.InvocationID, w.LogPath,
		string(w.State), w.StateReason, w.Manager, w.FirstManager,
		w.LeaseDuration.Milliseconds(), toMS(w.LeaseDeadline), toMS(w.LastActivity), toMS(w.CheckpointSentAt),
		int64(w.CheckpointAttempts), toMS(w.GraceDeadline),
		toMS(w.CreatedAt), toMS(w.UpdatedAt), toMS(w.ReadyAt), toMS(w.StopRequestedAt), toMS(w.EndedAt),
		w.HasExit, w.ExitCode, int64(w.ExitStatus), w.LastError, w.StopReason,
		w.Budget.USD, w.Budget.Tokens, int64(w.Usage.Turns), w.Usage.InputTokens, w.Usage.OutputTokens,
		w.Usage.CacheReadTokens, w.Usage.CacheWriteTokens, w.Usage.CostUSD, int64(w.Usage.UnpricedTurns), w.Usage.Model,
		toMS(w.PausedUntil), int64(w.Limits.MemoryMax), int64(w.Limits.CPUQuotaPercent), int64(w.Limits.TasksMax),
		toMS(w.FrozenAt),
		string(w.Profile), w.ProfileDegraded,
		w.PermissionWait.Milliseconds(), w.NeedsInput, w.StopTimeout.Milliseconds(),
	}
}

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(...any) error }

// rawWorker holds one row as stored.
type rawWorker struct {
	id, runID, kind, role, task, cwd, command, envKeys           string
	model, effort, permission, unit, cgroup, invocation, logPath string
	state, stateReason, manager, firstManager                    string
	exitCode, lastError, stopReason                              string
	generation, mainPID, leaseDuration, leaseDeadline            int64
	lastActivity, checkpointSentAt, checkpointAttempts, grace    int64
	created, updated, ready, stopRequested, ended, exitStatus    int64
	hasExit                                                      bool
	budgetUSD, costUSD                                           float64
	budgetTokens, turns, input, output, cacheRead, cacheWrite    int64
	unpriced, pausedUntil, permissionWait                        int64
	memoryMax, cpuQuota, tasksMax, frozenAt, stopTimeout         int64
	usageModel, profile, profileDegraded, needsInput             string
}

func (x *rawWorker) dest() []any {
	return []any{
		&x.id, &x.runID, &x.generation, &x.kind, &x.role, &x.task, &x.cwd, &x.command, &x.envKeys,
		&x.model, &x.effort, &x.permission, &x.unit, &x.mainPID, &x.cgroup, &x.invocation, &x.logPath,
		&x.state, &x.stateReason, &x.manager, &x.firstManager,
		&x.leaseDuration, &x.leaseDeadline, &x.lastActivity, &x.checkpointSentAt,
		&x.checkpointAttempts, &x.grace,
		&x.created, &x.updated, &x.ready, &x.stopRequested, &x.ended,
		&x.hasExit, &x.exitCode, &x.exitStatus, &x.lastError, &x.stopReason,
		&x.budgetUSD, &x.budgetTokens, &x.turns, &x.input, &x.output,
		&x.cacheRead, &x.cacheWrite, &x.costUSD, &x.unpriced, &x.usageModel,
		&x.pausedUntil, &x.memoryMax, &x.cpuQuota, &x.tasksMax, &x.frozenAt, &x.profile, &x.profileDegraded,
		&x.permissionWait, &x.needsInput, &x.stopTimeout,
	}
}

func (x *rawWorker) worker() (*Worker, error) {
	cmd, err := decodeList(x.command)
	if err != nil {
		return nil, fmt.Errorf("%w: worker %q run %s: command: %v", ErrCorrupt, x.id, x.runID, err)
	}
	env, err := decodeList(x.envKeys)
	if err != nil {
		return nil, fmt.Errorf("%w: worker %q run %s: env_keys: %v", ErrCorrupt, x.id, x.runID, err)
	}
	return &Worker{
		ID: x.id, RunID: x.runID, Generation: int(x.generation),
		Kind: x.kind, Role: x.role, Task: x.task, Cwd: x.cwd,
		Command: cmd, EnvKeys: env,
		Model: x.model, Effort: x.effort, Permission: x.permission,
		Unit: x.unit, MainPID: int(x.mainPID), ControlGroup: x.cgroup, InvocationID: x.invocation, LogPath: x.logPath,
		State: State(x.state), StateReason: x.stateReason, Manager: x.manager, FirstManager: x.firstManager,
		LeaseDuration:      time.Duration(x.leaseDuration) * time.Millisecond,
		LeaseDeadline:      fromMS(x.leaseDeadline),
		LastActivity:       fromMS(x.lastActivity),
		CheckpointSentAt:   fromMS(x.checkpointSentAt),
		CheckpointAttempts: int(x.checkpointAttempts),
		GraceDeadline:      fromMS(x.grace),
		CreatedAt:          fromMS(x.created), UpdatedAt: fromMS(x.updated), ReadyAt: fromMS(x.ready),
		StopRequestedAt: fromMS(x.stopRequested), EndedAt: fromMS(x.ended),
		HasExit: x.hasExit, ExitCode: x.exitCode, ExitStatus: int(x.exitStatus),
		LastError: x.lastError, StopReason: x.stopReason,
		Budget: Budget{USD: x.budgetUSD, Tokens: x.budgetTokens},
		Usage: harness.UsageTotals{Turns: int(x.turns), InputTokens: x.input, OutputTokens: x.output,
			CacheReadTokens: x.cacheRead, CacheWriteTokens: x.cacheWrite, CostUSD: x.costUSD,
			UnpricedTurns: int(x.unpriced), Model: x.usageModel},
		PausedUntil: fromMS(x.pausedUntil),
		Limits: units.Limits{MemoryMax: uint64(x.memoryMax), CPUQuotaPercent: uint32(x.cpuQuota),
			TasksMax: uint64(x.tasksMax)},
		FrozenAt: fromMS(x.frozenAt),
		Profile:  Profile(x.profile), ProfileDegraded: x.profileDegraded,
		PermissionWait: time.Duration(x.permissionWait) * time.Millisecond,
		NeedsInput:     x.needsInput,
		StopTimeout:    time.Duration(x.stopTimeout) * time.Millisecond,
	}, nil
}

func scanWorker(s rowScanner) (*Worker, error) {
	var x rawWorker
	if err := s.Scan(x.dest()...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, classify(err)
	}
	return x.worker()
}

// roundTrip returns w as the registry stores it: what a read would return.
func roundTrip(w *Worker) *Worker {
	var x rawWorker
	args := workerArgs(w)
	for i, d := range x.dest() {
		switch p := d.(type) {
		case *string:
			*p = args[i].(string)
		case *int64:
			*p = args[i].(int64)
		case *bool:
			*p = args[i].(bool)
		case *float64:
			*p = args[i].(float64)
		}
	}
	out, err := x.worker()
	if err != nil { // cannot happen: encodeList output always decodes
		panic(err)
	}
	return out
}

// ---- encodings ----

// toMS is t in epoch milliseconds; the zero time is 0.
func toMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMS inverts toMS: 0 is the zero time, anything else a UTC time.
func fromMS(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// encodeList is a JSON array of strings ("[]" when empty).
func encodeList(l []string) string {
	if len(l) == 0 {
		return "[]"
	}
	b, err := json.Marshal(l)
	if err != nil { // cannot happen for []string
		panic(err)
	}
	return string(b)
}

func decodeList(s string) ([]string, error) {
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return nil, nil
	}
	return l, nil
}
