// Package history is a session's message history (docs/architecture.md
// "History"): every message a session sent or received with its receipts
// (queued, accepted, delivered, read), in one SQLite file per agent
// directory, <agentDir>/intercom/history.db (mode 0600), shared by every
// agent-fleet process of the user and bounded by a retention (Options.Days,
// AGENT_FLEET_HISTORY_DAYS, 30 days by default).
//
// Store is the intercom.Recorder the command layer gives sessions (writes
// are batched off the send and receive paths) and the read API of
// `agent-fleet intercom history`, intercom_history and a dashboard: List
// (filtered, newest N) and Changes/Follow (every new entry or receipt
// after a cursor). No entry carries a routing scope: a message's team is
// the named team's name.
package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// DaysEnv overrides the retention in days (a positive integer).
const DaysEnv = "AGENT_FLEET_HISTORY_DAYS"

// DefaultDays is how many days of history are kept unless told otherwise.
const DefaultDays = 30

// File is the history's file name below the intercom directory.
const File = "history.db"

// Limits of a List.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// Options configure Open.
type Options struct {
	// Days is the retention: entries older than that many days are
	// deleted when the store opens (0: DefaultDays).
	Days int
	// TeamName maps a session's routing scope to its named team's name
	// ("" for none); nil records no teams.
	TeamName func(scope string) string
	Logger   *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// DaysFromEnv reads DaysEnv: 0 when unset, an error when it is not a
// positive number of days.
func DaysFromEnv(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %s=%q: want a positive number of days", intercom.ErrInvalidInput, DaysEnv, v)
	}
	return n, nil
}

// Entry is one message in a session's history with its receipts. Times
// are epoch milliseconds (0: not yet), as the intercom's other JSON.
type Entry struct {
	// Cursor orders changes: it is new whenever the entry or one of its
	// receipts is recorded (Changes).
	Cursor      int64  `json:"cursor"`
	Session     string `json:"session"`   // whose history
	Direction   string `json:"direction"` // "sent" or "received"
	MessageID   string `json:"messageId"`
	Peer        string `json:"peer"` // the recipient of a sent message, the sender of a received one
	PeerName    string `json:"peerName,omitempty"`
	Team        string `json:"team,omitempty"` // the named team the session was in
	Kind        string `json:"kind"`           // "message", "ask" or "reply"
	ReplyTo     string `json:"replyTo,omitempty"`
	Text        string `json:"text"`
	Attachments int    `json:"attachments,omitempty"`
	At          int64  `json:"at"` // sent (its timestamp) or received
	QueuedAt    int64  `json:"queuedAt,omitempty"`
	AcceptedAt  int64  `json:"acceptedAt,omitempty"`
	DeliveredAt int64  `json:"deliveredAt,omitempty"`
	ReadAt      int64  `json:"readAt,omitempty"`
	Failed      string `json:"failed,omitempty"` // code: reason
}

// Receipts names the receipts an entry has, in order.
func (e Entry) Receipts() []string {
	var out []string
	for _, r := range []struct {
		at   int64
		name string
	}{{e.QueuedAt, intercom.ReceiptQueued}, {e.AcceptedAt, intercom.ReceiptAccepted},
		{e.DeliveredAt, intercom.ReceiptDelivered}, {e.ReadAt, intercom.ReceiptRead}} {
		if r.at != 0 {
			out = append(out, r.name)
		}
	}
	if e.Failed != "" {
		out = append(out, intercom.ReceiptFailed)
	}
	return out
}

// Store is an open history. Safe for concurrent use.
type Store struct {
	db   *sql.DB
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	queue   []event
	writing chan struct{} // closed when the write under way ends
	teams   map[string]string
	closed  bool
}

type event struct {
	session string
	e       intercom.HistoryEvent
	team    string
}

var _ intercom.Recorder = (*Store)(nil)

// Path is the history file of p.
func Path(p intercom.Paths) string { return filepath.Join(p.Dir, File) }

// Open opens (creating if missing, mode 0600) the history of p and deletes
// what is older than the retention.
func Open(ctx context.Context, p intercom.Paths, opts Options) (*Store, error) {
	if opts.Days <= 0 {
		opts.Days = DefaultDays
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := intercom.EnsureDir(p.Dir); err != nil {
		return nil, err
	}
	path := Path(p)
	// SQLite gives its -wal and -shm files the database file's mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, intercom.FileMode)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	f.Close()
	slashed := filepath.ToSlash(path)
	if !strings.HasPrefix(slashed, "/") {
		slashed = "/" + slashed // Windows: C:/x → file:///C:/x
	}
	u := url.URL{Path: slashed}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file://"+u.EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	db.SetMaxOpenConns(4)
	s := &Store{db: db, opts: opts, log: opts.Logger, teams: map[string]string{}}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	cutoff := opts.Now().Add(-time.Duration(opts.Days) * 24 * time.Hour).UnixMilli()
	if _, err := db.ExecContext(ctx, `DELETE FROM messages WHERE at_ms < ?`, cutoff); err != nil {
		db.Close()
		return nil, fmt.Errorf("history: prune: %w", err)
	}
	return s, nil
}

const schemaVersion = 1

func (s *Store) migrate(ctx context.Context) error {
	var v int
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if v == schemaVersion {
		return nil
	}
	if v > schemaVersion {
		return fmt.Errorf("history: %s has schema %d, this build knows up to %d; upgrade agent-fleet", File, v, schemaVersion)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil || v == schemaVersion {
		return err
	}
	for _, stmt := range []string{
		// One row per message of a session; times epoch ms (0: not yet).
		// changed is the cursor of the row's last change (meta
		// 'next_change' hands them out).
		`CREATE TABLE messages (
			session         TEXT NOT NULL,
			direction       TEXT NOT NULL,
			peer            TEXT NOT NULL,
			message_id      TEXT NOT NULL,
			peer_name       TEXT NOT NULL DEFAULT '',
			team            TEXT NOT NULL DEFAULT '',
			kind            TEXT NOT NULL DEFAULT 'message',
			reply_to        TEXT NOT NULL DEFAULT '',
			text            TEXT NOT NULL DEFAULT '',
			attachments     INTEGER NOT NULL DEFAULT 0,
			at_ms           INTEGER NOT NULL,
			queued_at_ms    INTEGER NOT NULL DEFAULT 0,
			accepted_at_ms  INTEGER NOT NULL DEFAULT 0,
			delivered_at_ms INTEGER NOT NULL DEFAULT 0,
			read_at_ms      INTEGER NOT NULL DEFAULT 0,
			failed          TEXT NOT NULL DEFAULT '',
			changed         INTEGER NOT NULL,
			PRIMARY KEY (session, direction, peer, message_id)
		) STRICT`,
		`CREATE INDEX messages_session_at ON messages (session, at_ms)`,
		`CREATE INDEX messages_at ON messages (at_ms)`,
		`CREATE UNIQUE INDEX messages_changed ON messages (changed)`,
		`CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) STRICT`,
		`INSERT INTO meta (key, value) VALUES ('next_change', 1)`,
		fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion),
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("history: create schema: %w", err)
		}
	}
	return tx.Commit()
}

// Record implements intercom.Recorder: the event is written soon, in a
// batch, off the caller's path.
func (s *Store) Record(session string, e intercom.HistoryEvent) {
	team := e.Team
	if team == "" {
		team = s.teamOf(e.Scope)
	}
	e.Scope = ""
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.queue = append(s.queue, event{session: session, e: e, team: team})
	if s.writing == nil {
		s.writing = make(chan struct{})
		go s.writeQueue()
	}
}

func (s *Store) teamOf(scope string) string {
	if scope == "" || s.opts.TeamName == nil {
		return ""
	}
	s.mu.Lock()
	name, ok := s.teams[scope]
	s.mu.Unlock()
	if ok {
		return name
	}
	name = s.opts.TeamName(scope)
	s.mu.Lock()
	s.teams[scope] = name
	s.mu.Unlock()
	return name
}

// writeQueue writes what is queued until nothing is.
func (s *Store) writeQueue() {
	for {
		s.mu.Lock()
		batch := s.queue
		s.queue = nil
		if len(batch) == 0 {
			close(s.writing)
			s.writing = nil
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if err := s.write(context.Background(), batch); err != nil {
			s.log.Warn("could not record message history", "events", len(batch), "err", err)
		}
	}
}

// Flush implements intercom.Recorder: it returns once everything recorded
// so far is written.
func (s *Store) Flush() error {
	for {
		s.mu.Lock()
		w := s.writing
		s.mu.Unlock()
		if w == nil {
			return nil
		}
		<-w
	}
}

// Close writes what is queued and closes the file.
func (s *Store) Close() error {
	err := s.Flush()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return errors.Join(err, s.db.Close())
}

func (s *Store) write(ctx context.Context, batch []event) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var next int64
	if err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'next_change'`).Scan(&next); err != nil {
		return err
	}
	for _, ev := range batch {
		e := ev.e
		at := e.At.UnixMilli()
		if e.At.IsZero() {
			at = s.opts.Now().UnixMilli()
		}
		key := []any{ev.session, string(e.Direction), e.Peer, e.MessageID}
		if e.Receipt == "" {
			_, err = tx.ExecContext(ctx, `INSERT INTO messages (session, direction, peer, message_id, peer_name, team, kind, reply_to, text, attachments, at_ms, changed)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT DO UPDATE SET peer_name = excluded.peer_name, team = excluded.team, kind = excluded.kind,
					reply_to = excluded.reply_to, text = excluded.text, attachments = excluded.attachments, at_ms = excluded.at_ms,
					changed = excluded.changed`,
				append(key, e.PeerName, ev.team, e.Kind, e.ReplyTo, e.Text, e.Attachments, at, next)...)
		} else {
			col := map[string]string{intercom.ReceiptQueued: "queued_at_ms", intercom.ReceiptAccepted: "accepted_at_ms",
				intercom.ReceiptDelivered: "delivered_at_ms", intercom.ReceiptRead: "read_at_ms", intercom.ReceiptFailed: "failed"}[e.Receipt]
			if col == "" {
				continue
			}
			var val any = at
			set := col + ` = CASE WHEN ` + col + ` = 0 THEN excluded.` + col + ` ELSE ` + col + ` END`
			if col == "failed" {
				val, set = e.Reason, `failed = excluded.failed`
			}
			// A receipt before its message (a read receipt can overtake
			// the sender's own record) makes a row the message fills.
			_, err = tx.ExecContext(ctx, `INSERT INTO messages (session, direction, peer, message_id, at_ms, changed, `+col+`)
				VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET `+set+`, changed = excluded.changed`,
				append(key, at, next, val)...)
		}
		if err != nil {
			return err
		}
		next++
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'next_change'`, next); err != nil {
		return err
	}
	return tx.Commit()
}

// Query selects entries for List. Zero fields select everything.
type Query struct {
	// Session is whose history ("": every session's, as a dashboard
	// shows).
	Session string
	// With is the other session: its id, or its name in any letter case.
	With string
	// Team is a named team's name.
	Team string
	// Search is text the message contains, in any letter case.
	Search string
	// Since drops entries before it.
	Since time.Time
	// Limit is how many of the newest entries (0: DefaultLimit, at most
	// MaxLimit).
	Limit int
}

const entryColumns = `changed, session, direction, message_id, peer, peer_name, team, kind, reply_to, text, attachments,
	at_ms, queued_at_ms, accepted_at_ms, delivered_at_ms, read_at_ms, failed`

func scanEntry(rows *sql.Rows) (Entry, error) {
	var e Entry
	err := rows.Scan(&e.Cursor, &e.Session, &e.Direction, &e.MessageID, &e.Peer, &e.PeerName, &e.Team, &e.Kind, &e.ReplyTo,
		&e.Text, &e.Attachments, &e.At, &e.QueuedAt, &e.AcceptedAt, &e.DeliveredAt, &e.ReadAt, &e.Failed)
	return e, err
}

// List returns the newest entries q selects, oldest first.
func (s *Store) List(ctx context.Context, q Query) ([]Entry, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	if q.Limit > MaxLimit {
		return nil, fmt.Errorf("%w: a history lists at most %d entries", intercom.ErrInvalidInput, MaxLimit)
	}
	var where []string
	var args []any
	if q.Session != "" {
		where, args = append(where, `session = ?`), append(args, q.Session)
	}
	if q.With != "" {
		where, args = append(where, `(peer = ? OR lower(peer_name) = lower(?))`), append(args, q.With, q.With)
	}
	if q.Team != "" {
		where, args = append(where, `team = ?`), append(args, q.Team)
	}
	if q.Search != "" {
		where, args = append(where, `instr(lower(text), lower(?)) > 0`), append(args, q.Search)
	}
	if !q.Since.IsZero() {
		where, args = append(where, `at_ms >= ?`), append(args, q.Since.UnixMilli())
	}
	query := `SELECT ` + entryColumns + ` FROM messages`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY at_ms DESC, changed DESC LIMIT ?`
	out, err := s.query(ctx, query, append(args, q.Limit)...)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, err
}

// Changes returns the entries recorded or given a receipt after cursor
// (0: from the start), in the order of their changes, at most limit
// (0: DefaultLimit), and the cursor to pass next. An entry changed
// several times is returned once, as it is now.
func (s *Store) Changes(ctx context.Context, after int64, limit int) ([]Entry, int64, error) {
	if limit <= 0 || limit > MaxLimit {
		limit = DefaultLimit
	}
	out, err := s.query(ctx, `SELECT `+entryColumns+` FROM messages WHERE changed > ? ORDER BY changed LIMIT ?`, after, limit)
	if err != nil {
		return nil, after, err
	}
	if len(out) > 0 {
		after = out[len(out)-1].Cursor
	}
	return out, after, nil
}

// Follow calls emit for every change after cursor, then for each new one,
// checking every poll (0: 500 ms), until ctx ends (nil) or emit fails.
func (s *Store) Follow(ctx context.Context, after int64, poll time.Duration, emit func(Entry) error) error {
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	for {
		es, next, err := s.Changes(ctx, after, MaxLimit)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, e := range es {
			if err := emit(e); err != nil {
				return err
			}
		}
		after = next
		if len(es) == MaxLimit {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

func (s *Store) query(ctx context.Context, query string, args ...any) ([]Entry, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer rows.Close()
	out := []Entry{}
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
