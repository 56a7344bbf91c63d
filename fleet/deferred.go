package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Messages kept for workers whose session is not on the broker yet
// (docs/architecture.md "Deferred delivery"): a sender's session hands them
// over (Deferral, intercom.Deferral), the worker's shim takes them into its
// inbox when its session registers (DeferredFor, DeferredDelivered). Rows
// are per incarnation: a message kept for a run that ended is never given
// to the next one (its sender sees "worker-ended").

// Deferred rows are kept this long after they were queued, whatever became
// of them; senders see those of the last deferredShown.
const (
	deferredKept  = 7 * 24 * time.Hour
	deferredShown = 24 * time.Hour
)

// Defer keeps msg from `from` for the live incarnation of worker id.
// intercom.ErrNotDeferrable when id has none (or it is stopping);
// intercom.ErrDeferredFull when intercom.MaxDeferredPerWorker wait for it.
// The same message kept again returns the kept one.
func (r *Registry) Defer(ctx context.Context, id string, from intercom.Sender, msg *wire.MessageInfo) (*intercom.DeferredMessage, error) {
	if ValidID(id) != nil {
		return nil, intercom.ErrNotDeferrable
	}
	now := r.now()
	var out *intercom.DeferredMessage
	err := r.writeLocked(ctx, func(q querier) error {
		live, err := liveIncarnation(ctx, q, id)
		if err != nil {
			return err
		}
		if live == nil || live.State == StateStopping {
			return intercom.ErrNotDeferrable
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM deferred_messages WHERE queued_at_ms < ?`, toMS(now.Add(-deferredKept))); err != nil {
			return classify(err)
		}
		var queuedAt, deliveredAt int64
		err = q.QueryRowContext(ctx, `SELECT queued_at_ms, delivered_at_ms FROM deferred_messages
			WHERE id = ? AND run_id = ? AND from_id = ? AND message_id = ?`, id, live.RunID, from.ID, msg.ID).Scan(&queuedAt, &deliveredAt)
		if err == nil {
			out = deferredView(id, from, msg, queuedAt, deliveredAt, StateRunning)
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return classify(err)
		}
		var n int
		if err := q.QueryRowContext(ctx, `SELECT count(*) FROM deferred_messages WHERE id = ? AND run_id = ? AND delivered_at_ms = 0`,
			id, live.RunID).Scan(&n); err != nil {
			return classify(err)
		}
		if n >= intercom.MaxDeferredPerWorker {
			return fmt.Errorf("%w: %d messages already wait for worker %s (%s) to connect, the most it keeps; "+
				"send again once it has taken them (agent-fleet intercom status lists yours)", intercom.ErrDeferredFull, n, id, live.State)
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO deferred_messages (id, run_id, from_id, message_id, from_name, message, queued_at_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, id, live.RunID, from.ID, msg.ID, from.Name, string(msg.Raw), toMS(now)); err != nil {
			return classify(err)
		}
		out = deferredView(id, from, msg, toMS(now), 0, StateRunning)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func deferredView(id string, from intercom.Sender, msg *wire.MessageInfo, queuedAt, deliveredAt int64, state State) *intercom.DeferredMessage {
	d := &intercom.DeferredMessage{To: id, MessageID: msg.ID, From: from, Preview: intercom.Preview(msg.Text, 80),
		QueuedAt: float64(queuedAt), DeliveredAt: float64(deliveredAt), Message: msg.Raw}
	switch {
	case deliveredAt > 0:
		d.State = intercom.DeferredDelivered
	case state.Live():
		d.State = intercom.DeferredQueued
	default:
		d.State = intercom.DeferredWorkerEnded
	}
	return d
}

// DeferredFor is what waits for incarnation id/runID, oldest first.
func (r *Registry) DeferredFor(ctx context.Context, id, runID string) ([]intercom.DeferredMessage, error) {
	return r.deferred(ctx, `d.id = ? AND d.run_id = ? AND d.delivered_at_ms = 0`, id, runID)
}

// DeferredFrom is what sender fromID handed over in the last day, oldest
// first, each with its state.
func (r *Registry) DeferredFrom(ctx context.Context, fromID string) ([]intercom.DeferredMessage, error) {
	return r.deferred(ctx, `d.from_id = ? AND d.queued_at_ms >= ?`, fromID, toMS(r.now().Add(-deferredShown)))
}

func (r *Registry) deferred(ctx context.Context, where string, args ...any) ([]intercom.DeferredMessage, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT d.id, d.from_id, d.from_name, d.message, d.queued_at_ms, d.delivered_at_ms,
		coalesce(w.state, 'lost') FROM deferred_messages d LEFT JOIN workers w ON w.id = d.id AND w.run_id = d.run_id
		WHERE `+where+` ORDER BY d.queued_at_ms, d.message_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("read kept messages: %w", classify(err))
	}
	defer rows.Close()
	var out []intercom.DeferredMessage
	for rows.Next() {
		var id, raw, state string
		var from intercom.Sender
		var queuedAt, deliveredAt int64
		if err := rows.Scan(&id, &from.ID, &from.Name, &raw, &queuedAt, &deliveredAt, &state); err != nil {
			return nil, fmt.Errorf("read kept messages: %w", classify(err))
		}
		msg, err := wire.ParseMessage([]byte(raw))
		if err != nil {
			continue // not written by Defer
		}
		out = append(out, *deferredView(id, from, msg, queuedAt, deliveredAt, State(state)))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read kept messages: %w", classify(err))
	}
	return out, nil
}

// DeferredDelivered records that kept messages reached the worker's inbox
// (by sender and message id; of any run of id when runID is "").
func (r *Registry) DeferredDelivered(ctx context.Context, id, runID string, keys ...[2]string) error {
	if len(keys) == 0 {
		return nil
	}
	now := toMS(r.now())
	return r.writeLocked(ctx, func(q querier) error {
		for _, k := range keys {
			if _, err := q.ExecContext(ctx, `UPDATE deferred_messages SET delivered_at_ms = ?
				WHERE id = ? AND (run_id = ? OR ? = '') AND from_id = ? AND message_id = ? AND delivered_at_ms = 0`,
				now, id, runID, runID, k[0], k[1]); err != nil {
				return classify(err)
			}
		}
		return nil
	})
}

// Deferral is intercom.Deferral over the registry a handle opens (it
// never creates one: without a registry there are no workers).
type Deferral struct {
	Registry *RegistryHandle
}

var _ intercom.Deferral = Deferral{}

// Defer implements intercom.Deferral.
func (d Deferral) Defer(ctx context.Context, from intercom.Sender, to string, msg *wire.MessageInfo) (*intercom.DeferredMessage, error) {
	reg, err := d.Registry.Get(ctx)
	if err != nil || reg == nil {
		return nil, intercom.ErrNotDeferrable
	}
	return reg.Defer(ctx, to, from, msg)
}

// Delivered implements intercom.Deferral.
func (d Deferral) Delivered(ctx context.Context, to, fromID, messageID string) error {
	reg, err := d.Registry.Get(ctx)
	if err != nil || reg == nil {
		return err
	}
	return reg.DeferredDelivered(ctx, to, "", [2]string{fromID, messageID})
}

// From implements intercom.Deferral.
func (d Deferral) From(ctx context.Context, fromID string) ([]intercom.DeferredMessage, error) {
	reg, err := d.Registry.Get(ctx)
	if err != nil || reg == nil {
		return nil, err
	}
	return reg.DeferredFrom(ctx, fromID)
}
