package fleet

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Worker-ended notices (docs/architecture.md "Worker-ended notices"). When
// a worker's record becomes terminal, the transaction that makes it so
// also records that its manager is owed one message about it. The message
// goes out from the worker's own session id: from the shim's session when
// the shim recorded the end itself, else from a short registration of that
// id by whichever agent-fleet process delivers it. Its id is fixed per run
// (EndedMessageID) and its text and control are composed once and stored,
// so a resend after a crash between sending and recording is the same
// message, which every v4 broker and inbox deduplicates: the manager sees
// it once.

// EndedControlType is the content.control type of a worker-ended notice;
// its data is an Ended (version EndedControlVersion).
const (
	EndedControlType    = "agent-fleet.worker.ended"
	EndedControlVersion = 1
)

// endedLogLines is how many log lines a notice carries, each cut at
// endedLogLineChars bytes.
const (
	endedLogLines     = 10
	endedLogLineChars = 300
)

// noticeClaim is how long a deliverer holds a notice before another may
// try it (a deliverer that crashed mid-send).
const noticeClaim = 30 * time.Second

// Ends: how a worker ended (Ended.How, EndOf).
const (
	EndExited       = "exited"        // its command ended by itself; ExitStatus says with what
	EndKilled       = "killed"        // killed by a signal nobody in the fleet sent
	EndStopped      = "stopped"       // stopped on request (stop)
	EndLeaseExpired = "lease-expired" // stopped by the janitor: its idle lease ran out
	EndMaxRuntime   = "max-runtime"   // stopped by systemd at its maximum runtime
	EndFailed       = "failed"        // failed spawn, or a stop whose cleanup could not be verified
	EndLost         = "lost"          // its unit vanished without a recorded end
)

// EndOf says how a terminal record ended (one of the End constants; ""
// while it is live).
func EndOf(w *Worker) string {
	switch {
	case w.State.Live():
		return ""
	case w.State == StateFailed:
		return EndFailed
	case w.State == StateLost:
		return EndLost
	case w.StopReason == "lease-expired":
		return EndLeaseExpired
	case w.StopReason == StopMaxRuntime:
		return EndMaxRuntime
	case w.StopReason != "" || w.State == StateStopped:
		return EndStopped
	case w.HasExit && w.ExitCode != "exited":
		return EndKilled
	}
	return EndExited
}

// Ended is the facts of a worker's end: the data of a notice's control,
// for programs; the text says the same for people and models.
type Ended struct {
	ID      string `json:"id"`
	RunID   string `json:"runId"`
	Kind    string `json:"kind"`
	Role    string `json:"role,omitempty"`
	Manager string `json:"manager"`
	// State is the record's final state; How is EndOf.
	State string `json:"state"`
	How   string `json:"how"`
	// ExitCode is systemd's ExecMainCode name (exited, killed, dumped) and
	// ExitStatus the status, or the signal number when killed, when the
	// end was recorded; Signal names that signal (SIGTERM).
	ExitCode   string `json:"exitCode,omitempty"`
	ExitStatus *int   `json:"exitStatus,omitempty"`
	Signal     string `json:"signal,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
	LastError  string `json:"lastError,omitempty"`
	// StartedAt is when it was spawned, EndedAt when it ended: RFC 3339,
	// UTC. RuntimeMs is the span between. (Not from READY: an exec
	// worker's command has run for the readiness grace by then.)
	StartedAt string   `json:"startedAt"`
	EndedAt   string   `json:"endedAt"`
	RuntimeMs int64    `json:"runtimeMs"`
	LogTail   []string `json:"logTail"`
}

// EndedMessageID is the message id of the notice of run: the same for
// every attempt, so that v4 deduplication makes resends harmless.
func EndedMessageID(id, run string) string { return endedIDPrefix + id + "-" + run }

const endedIDPrefix = "agent-fleet-ended-"

// IsEndedNotice reports whether m is a worker-ended notice: by its
// control where the broker forwarded one, else by its id (TypeScript
// brokers get the text alone).
func IsEndedNotice(m *wire.MessageInfo) bool {
	return m.ControlType == EndedControlType || strings.HasPrefix(m.ID, endedIDPrefix)
}

// EndedNotice is a notice a manager is owed, or was sent.
type EndedNotice struct {
	ID, RunID string
	MessageID string
	// Manager is the worker's manager when it ended.
	Manager   string
	CreatedAt time.Time
	// Text and Control are the message, once composed (empty before the
	// first attempt); Control is the control envelope's JSON.
	Text    string
	Control json.RawMessage
	// Attempts counts the deliveries that did not reach the manager;
	// LastError says why the last did not.
	Attempts  int
	LastError string
	// SentAt is when the manager got it (zero: still owed).
	SentAt time.Time
}

// ControlEnvelope is Control as a wire control (nil before composing).
func (n *EndedNotice) ControlEnvelope() *wire.Control {
	if len(n.Control) == 0 {
		return nil
	}
	var c wire.Control
	if json.Unmarshal(n.Control, &c) != nil {
		return nil
	}
	return &c
}

// owe records, inside the transaction that made w terminal, the notice its
// manager is owed (none without a manager; once per run).
func owe(ctx context.Context, tx querier, w *Worker, now time.Time) error {
	if w.Manager == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, oweSQL, w.ID, w.RunID, EndedMessageID(w.ID, w.RunID), w.Manager, toMS(now))
	return classify(err)
}

// oweSQL records an ended notice (owe).
const oweSQL = `INSERT INTO ended_notices (id, run_id, message_id, manager, created_at_ms)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`

const noticeColumns = `id, run_id, message_id, manager, created_at_ms, text, control, attempts, last_error, sent_at_ms`

func scanNotice(s rowScanner) (*EndedNotice, error) {
	var n EndedNotice
	var created, sent int64
	var control string
	if err := s.Scan(&n.ID, &n.RunID, &n.MessageID, &n.Manager, &created, &n.Text, &control, &n.Attempts, &n.LastError, &sent); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, classify(err)
	}
	n.CreatedAt, n.SentAt = fromMS(created), fromMS(sent)
	if control != "" {
		n.Control = json.RawMessage(control)
	}
	return &n, nil
}

// EndedNotice returns the notice of incarnation id+run. Errors:
// ErrNotFound (it has not ended, or had no manager).
func (r *Registry) EndedNotice(ctx context.Context, id, run string) (*EndedNotice, error) {
	n, err := scanNotice(r.cached().QueryRowContext(ctx, `SELECT `+noticeColumns+` FROM ended_notices WHERE id = ? AND run_id = ?`, id, run))
	if err != nil {
		return nil, fmt.Errorf("ended notice of %q run %s: %w", id, run, err)
	}
	return n, nil
}

// NoticeFilter selects owed notices: of one manager, of one worker id
// (every run), or all ("" for either).
type NoticeFilter struct {
	Manager string
	ID      string
}

// OwedNotices returns the notices not yet delivered, oldest first.
func (r *Registry) OwedNotices(ctx context.Context, f NoticeFilter) ([]*EndedNotice, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT `+noticeColumns+` FROM ended_notices
		WHERE sent_at_ms = 0 AND (?1 = '' OR manager = ?1) AND (?2 = '' OR id = ?2)
		ORDER BY created_at_ms, id, run_id`, f.Manager, f.ID)
	if err != nil {
		return nil, fmt.Errorf("owed notices: %w", classify(err))
	}
	defer rows.Close()
	var out []*EndedNotice
	for rows.Next() {
		n, err := scanNotice(rows)
		if err != nil {
			return nil, fmt.Errorf("owed notices: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("owed notices: %w", classify(err))
	}
	return out, nil
}

// execOne runs one statement in its own write transaction and reports
// whether it changed a row.
func (r *Registry) execOne(ctx context.Context, q string, args ...any) (bool, error) {
	var n int64
	err := r.writeLocked(ctx, func(tx querier) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return classify(err)
		}
		n, err = res.RowsAffected()
		return classify(err)
	})
	return n > 0, err
}

// claimNotice takes id+run's owed notice for one delivery attempt, unless
// another deliverer holds it, and in the same write stores text and
// control unless an earlier attempt did ("" stores nothing): one write for
// both, on the way of every stop.
func (r *Registry) claimNotice(ctx context.Context, id, run string, now time.Time, text string, control []byte) (bool, error) {
	return r.execOne(ctx, `UPDATE ended_notices SET claimed_until_ms = ?,
		text = CASE WHEN text = '' THEN ? ELSE text END, control = CASE WHEN text = '' THEN ? ELSE control END
		WHERE id = ? AND run_id = ? AND sent_at_ms = 0 AND claimed_until_ms < ?`,
		toMS(now.Add(noticeClaim)), text, string(control), id, run, toMS(now))
}

// noticeOutcome records an attempt: sent (the manager has it, or it was
// refused for good: lastError says why), or owed still, released for the
// next attempt.
func (r *Registry) noticeOutcome(ctx context.Context, id, run string, sent bool, lastError string, now time.Time) error {
	var err error
	if sent {
		_, err = r.execOne(ctx, `UPDATE ended_notices SET sent_at_ms = ?, last_error = ?, claimed_until_ms = 0 WHERE id = ? AND run_id = ?`, toMS(now), lastError, id, run)
	} else {
		_, err = r.execOne(ctx, `UPDATE ended_notices SET attempts = attempts + 1, last_error = ?, claimed_until_ms = 0 WHERE id = ? AND run_id = ?`, lastError, id, run)
	}
	return err
}

// PruneNotices deletes the notices recorded before before, delivered or
// not (a manager that never came back within the retention), and returns
// how many.
func (r *Registry) PruneNotices(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := r.write(ctx, func(tx querier) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM ended_notices WHERE `+prunableNoticesSQL, toMS(before))
		if err != nil {
			return classify(err)
		}
		n, err = res.RowsAffected()
		return classify(err)
	})
	if err != nil {
		return 0, fmt.Errorf("prune ended notices: %w", err)
	}
	return int(n), nil
}

// prunableNoticesSQL selects the notices PruneNotices deletes; its
// argument is the cutoff in ms.
const prunableNoticesSQL = `created_at_ms < ?`

// CountPrunableNotices is how many notices PruneNotices(before) would
// delete.
func (r *Registry) CountPrunableNotices(ctx context.Context, before time.Time) (int, error) {
	var n int
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM ended_notices WHERE `+prunableNoticesSQL, toMS(before)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count ended notices: %w", classify(err))
	}
	return n, nil
}

// EndedOf gathers the facts of w's end; logTail is its last log lines.
func EndedOf(w *Worker, logTail []string) Ended {
	e := Ended{ID: w.ID, RunID: w.RunID, Kind: w.Kind, Role: w.Role, Manager: w.Manager, State: string(w.State),
		How: EndOf(w), StopReason: w.StopReason, LastError: w.LastError, LogTail: clipLines(logTail)}
	if e.Kind == "" {
		e.Kind = "exec"
	}
	if w.HasExit {
		st := w.ExitStatus
		e.ExitCode, e.ExitStatus = w.ExitCode, &st
		if w.ExitCode != "exited" {
			e.Signal = signalName(w.ExitStatus)
		}
	}
	start := w.CreatedAt
	end := w.EndedAt
	if end.IsZero() {
		end = w.UpdatedAt
	}
	e.StartedAt, e.EndedAt = stamp(start), stamp(end)
	if d := end.Sub(start); d > 0 {
		e.RuntimeMs = d.Milliseconds()
	}
	return e
}

func clipLines(lines []string) []string {
	if len(lines) > endedLogLines {
		lines = lines[len(lines)-endedLogLines:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) > endedLogLineChars {
			n := endedLogLineChars
			for n > 0 && l[n]&0xC0 == 0x80 {
				n--
			}
			l = l[:n] + "…"
		}
		out[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	return out
}

// signalNames are the signals a worker is commonly killed by.
var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
	9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}

func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return fmt.Sprintf("signal %d", n)
}

// Text is the notice for people and models: one line saying who ended how
// and after how long, the last lines of the log, and where to look.
func (e Ended) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent-fleet: worker %s (%s) %s.", e.ID, e.Kind, e.Summary())
	if len(e.LogTail) > 0 {
		b.WriteString("\nLast lines of its log:")
		for _, l := range e.LogTail {
			b.WriteString("\n  " + l)
		}
	} else {
		b.WriteString("\nIts log is empty.")
	}
	fmt.Fprintf(&b, "\nMore: agent-fleet status %s, agent-fleet logs %s (agent_fleet: action status or logs).", e.ID, e.ID)
	return b.String()
}

// Summary is how the worker ended and after how long, for a line about
// it: "exited with status 3 after 2s".
func (e Ended) Summary() string {
	return e.howText() + " after " + roundSpan(time.Duration(e.RuntimeMs)*time.Millisecond)
}

func (e Ended) howText() string {
	exit := ""
	switch {
	case e.ExitStatus == nil:
	case e.ExitCode == "exited":
		exit = fmt.Sprintf("exit status %d", *e.ExitStatus)
	default:
		exit = "killed by " + e.Signal
	}
	with := func(s string) string {
		if exit == "" {
			return s
		}
		return s + " (" + exit + ")"
	}
	switch e.How {
	case EndExited:
		return fmt.Sprintf("exited with status %d", deref(e.ExitStatus))
	case EndKilled:
		return "was killed by " + e.Signal
	case EndStopped:
		return with("was stopped by its manager's request")
	case EndLeaseExpired:
		return with("was stopped by the janitor: its lease expired")
	case EndMaxRuntime:
		return with("was stopped at its maximum runtime")
	case EndLost:
		return "was lost: its unit vanished without a recorded end"
	}
	msg := "failed"
	if e.LastError != "" {
		msg += ": " + e.LastError
	}
	return with(msg)
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// roundSpan is d for people: 850ms, 12s, 3m4s, 2h5m.
func roundSpan(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
