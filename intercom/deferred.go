package intercom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Deferred delivery (docs/architecture.md "Deferred delivery"): a message
// for a fleet worker that is live but whose session is not on the broker
// (starting, or re-registering) is kept in agent-fleet's own store instead
// of failing, and the worker's shim puts it into the worker's inbox when
// its session registers. Nothing of this is on the wire: the v4 message is
// kept as sent, and the inbox's deduplication by sender and message id
// makes the hand-over exactly once.

// MaxDeferredPerWorker bounds the messages kept for one worker
// incarnation; the next is refused with ErrDeferredFull.
const MaxDeferredPerWorker = 50

// Deferred message states, as the sender sees them.
const (
	// DeferredQueued: kept; the worker has not taken it yet.
	DeferredQueued = "queued"
	// DeferredDelivered: in the worker's inbox (its next turn gets it).
	DeferredDelivered = "delivered"
	// DeferredWorkerEnded: the worker ended before it took the message.
	DeferredWorkerEnded = "worker-ended"
)

var (
	// ErrDeferredFull: MaxDeferredPerWorker messages already wait for the
	// worker; the send is refused and nothing is kept (exit 4).
	ErrDeferredFull = errors.New("too many messages wait for the worker")
	// ErrNotDeferrable: the target is not a live fleet worker; the send's
	// failure stands as the broker reported it.
	ErrNotDeferrable = errors.New("not a live fleet worker")
)

// DeferredMessage is a message kept for a worker: what the sender sees in
// its status and send results, and what the worker's shim hands to its
// session (Session.Deliver).
type DeferredMessage struct {
	To        string `json:"to"` // the worker id
	MessageID string `json:"messageId"`
	From      Sender `json:"from"`
	// Preview is the start of the text (80 characters, whitespace
	// collapsed).
	Preview     string  `json:"preview"`
	State       string  `json:"state"`                 // DeferredQueued, DeferredDelivered or DeferredWorkerEnded
	QueuedAt    float64 `json:"queuedAt"`              // epoch ms
	DeliveredAt float64 `json:"deliveredAt,omitempty"` // epoch ms
	// Message is the v4 message as sent.
	Message json.RawMessage `json:"-"`
}

// Deferral keeps messages for fleet workers (fleet implements it over its
// registry; the command layer injects it, as it does the broker starter).
type Deferral interface {
	// Defer keeps msg from `from` for the live fleet worker whose id is
	// `to`. ErrNotDeferrable when `to` is not one; ErrDeferredFull when
	// MaxDeferredPerWorker messages wait for it already. A message kept
	// before (same sender and id) is returned as it is.
	Defer(ctx context.Context, from Sender, to string, msg *wire.MessageInfo) (*DeferredMessage, error)
	// Delivered records that a kept message reached the worker another
	// way (its sender sent it again once the worker was connected).
	Delivered(ctx context.Context, to, fromID, messageID string) error
	// From lists the messages fromID handed over that are still queued or
	// changed state in the last day, oldest first.
	From(ctx context.Context, fromID string) ([]DeferredMessage, error)
}

// deferrable: the broker's failure says the target is not connected, which
// for a worker that is starting ends.
func deferrable(code string) bool {
	switch wire.FailureCode(code) {
	case wire.FailSessionNotFound, wire.FailRecipientDisconnected:
		return true
	}
	return false
}

// deferSend keeps a message the broker could not deliver because its
// target is not connected, when the target is a live fleet worker; res
// is then a success with State "queued". A worker that connected meanwhile
// (its shim may have taken its queue before this message was in it) gets
// the message sent again under the same id: the inbox deduplicates it.
func (s *Session) deferSend(ctx context.Context, target string, msg *wire.MessageInfo, res *SendResult) (*SendResult, error) {
	if s.cfg.Deferral == nil || msg.ExpectsReply || msg.ReplyTo != "" || !deferrable(res.Code) {
		return res, nil
	}
	me := s.cfg.Identity
	d, err := s.cfg.Deferral.Defer(ctx, Sender{ID: me.SessionID, Name: me.Name}, target, msg)
	if errors.Is(err, ErrNotDeferrable) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	out := *res
	out.OK, out.Code, out.Reason, out.TargetID = true, "", "", d.To
	out.State, out.QueuedAt = d.State, d.QueuedAt
	s.record(HistoryEvent{Direction: Sent, Receipt: ReceiptQueued, Peer: d.To, MessageID: msg.ID, At: time.Now()})
	if d.State != DeferredQueued || !s.connectedElsewhere(ctx, d.To) {
		return &out, nil
	}
	again, err := s.send(ctx, out.To, d.To, msg)
	if err != nil || !again.OK {
		return &out, nil // kept: the shim takes it when it registers again
	}
	if err := s.cfg.Deferral.Delivered(ctx, d.To, me.SessionID, msg.ID); err != nil {
		s.log.Warn("could not record a kept message as delivered", "to", d.To, "err", err)
	}
	return again, nil
}

// Deliver puts a message kept for this session (a DeferredMessage) into
// its inbox as if the broker had delivered it from d.From, and wakes its
// listeners. A message already there (the same sender and id) is not added
// again: duplicate is true. It returns once the inbox is on disk.
func (s *Session) Deliver(d DeferredMessage) (duplicate bool, err error) {
	msg, err := wire.ParseMessage(d.Message)
	if err != nil {
		return false, fmt.Errorf("%w: kept message %s: %v", ErrInvalidInput, d.MessageID, err)
	}
	from := wire.SessionInfo{ID: d.From.ID, Name: d.From.Name, HasName: d.From.Name != ""}
	raw := []byte(`{"id":`)
	raw = wire.AppendString(raw, from.ID)
	if from.HasName {
		raw = append(raw, `,"name":`...)
		raw = wire.AppendString(raw, from.Name)
	}
	raw = append(raw, `,"cwd":"","model":"","pid":0}`...)
	res := s.inbox.Stage(raw, from, msg, d.QueuedAt)
	if res.Conflict {
		return false, fmt.Errorf("%w: kept message %s conflicts with another of the same id", ErrInvalidInput, d.MessageID)
	}
	if !res.Duplicate {
		s.mu.Lock()
		s.staged = append(s.staged, res.Message)
		s.mu.Unlock()
	}
	return res.Duplicate, s.Commit()
}
