package broker

import (
	"cmp"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// delivery is one accepted message waiting for the recipient's
// acknowledgement (spec §5.1).
type delivery struct {
	seq          uint64 // acceptance order
	id           string // deliveryId
	uuid         [16]byte
	key          dedupKey
	fingerprint  [32]byte
	messageID    string
	replyTo      string
	expectsReply bool
	// Across hosts (proxy.go): forwarded marks a delivery to a proxy
	// session, which its host decides; accepted says whether the sender
	// heard delivery_accepted. (Beside expectsReply: they fill its padding.)
	forwarded bool
	accepted  bool
	from, to  string
	sender    *conn
	recipient *conn
	deadline  time.Time // when it fails DELIVERY_TIMEOUT (deadline.go)
	done      bool      // acknowledged or failed: out of the table
	// origin is set for a send injected by ProxySend (proxy.go): what the
	// sender would hear goes to Federation.Outcome.
	origin *proxyOrigin
}

// deliveryTable indexes pending deliveries by delivery id, by dedup key and
// by sender, so no operation scans all of them.
type deliveryTable struct {
	byID   map[string]*delivery
	byKey  map[dedupKey]*delivery
	byFrom map[string]int
	seq    uint64
	// Deadlines of local deliveries, and of forwarded ones, which have
	// forwardAllowance more.
	local, forwarded deliveryDeadlines
}

func (t *deliveryTable) init(b *Broker) {
	t.byID = make(map[string]*delivery)
	t.byKey = make(map[dedupKey]*delivery)
	t.byFrom = make(map[string]int)
	t.local = deliveryDeadlines{b: b, timeout: b.cfg.DeliveryTimeout}
	t.forwarded = deliveryDeadlines{b: b, timeout: b.cfg.DeliveryTimeout + forwardAllowance}
}

// add enters d, whose timeout starts now.
func (t *deliveryTable) add(d *delivery, now time.Time) {
	t.seq++
	d.seq = t.seq
	if d.forwarded {
		t.forwarded.add(d, now)
	} else {
		t.local.add(d, now)
	}
	t.byID[d.id] = d
	t.byKey[d.key] = d
	t.byFrom[d.from]++
	d.sender.deliveries[d] = struct{}{}
	d.recipient.deliveries[d] = struct{}{}
}

func (t *deliveryTable) remove(d *delivery) {
	d.done = true
	delete(t.byID, d.id)
	if t.byKey[d.key] == d {
		delete(t.byKey, d.key)
	}
	if n := t.byFrom[d.from] - 1; n > 0 {
		t.byFrom[d.from] = n
	} else {
		delete(t.byFrom, d.from)
	}
	delete(d.sender.deliveries, d)
	delete(d.recipient.deliveries, d)
}

func (t *deliveryTable) stopTimers() {
	t.local.stop()
	t.forwarded.stop()
}

// fpPrefix is what the dedup cache keeps of a payload fingerprint.
func fpPrefix(fp *[32]byte) [8]byte { return [8]byte(fp[:8]) }

// handleSend routes one send frame of from on c.
func (b *Broker) handleSend(c *conn, from *session, env *wire.Envelope) {
	b.routeSend(c, from, env.DecodeSend(), nil)
}

// routeSend routes one send (spec §5.1–§5.2, §5.7) of from on c. A send
// that a proxy session's host injected (ProxySend) has its origin: the
// sender's answers go to Federation.Outcome instead of c.
func (b *Broker) routeSend(c *conn, from *session, s *wire.Send, origin *proxyOrigin) {
	fail := func(code wire.FailureCode, reason string) {
		b.stats.refused.Add(1)
		if origin != nil {
			b.outcome(origin, from.info.ID, s.MessageID, OutcomeFailed, false, code, reason)
			return
		}
		b.scratch = wire.AppendDeliveryFailed(b.scratch[:0], s.MessageID, false, code, reason)
		c.send(b.scratch)
	}
	if s.Failure != "" {
		fail(s.Failure, s.Reason)
		return
	}
	fromID := from.info.ID
	key := b.keys.dedupKey(fromID, s.MessageID)
	now := time.Now()
	b.recent.prune(now)
	if r := b.recent.lookup(key); r != nil {
		if r.fp != fpPrefix(&s.Meta.Fingerprint) {
			fail(wire.FailDuplicateMessageID, "Message ID was already used with a different payload")
			return
		}
		if r.meta&recentRetryable != 0 || b.sessionDigests[r.to] == 0 {
			b.recent.delete(key)
		} else {
			// An identical retry of a delivered send: answer as before, with
			// the original deliveryId (failures are retryable, never here).
			if origin != nil {
				b.outcome(origin, fromID, s.MessageID, OutcomeAccepted, false, "", "")
				b.outcome(origin, fromID, s.MessageID, OutcomeDelivered, false, "", "")
				return
			}
			did := uuid.UUID(r.deliveryID).String()
			b.scratch = wire.AppendDeliveryAccepted(b.scratch[:0], s.MessageID, did)
			b.scratch = wire.AppendDelivered(b.scratch, s.MessageID, did)
			c.send(b.scratch)
			return
		}
	}
	if p := b.deliveries.byKey[key]; p != nil {
		if p.fingerprint != s.Meta.Fingerprint {
			fail(wire.FailDuplicateMessageID, "Message ID is already pending with a different payload")
			return
		}
		if b.sessions[p.from] != nil && b.sessions[p.to] != nil {
			switch {
			case origin != nil:
				// Retried through the sender's host: the pending delivery
				// now answers to this attempt.
				p.origin = origin
				b.outcome(origin, fromID, s.MessageID, OutcomeAccepted, false, "", "")
			case p.forwarded && !p.accepted:
				// The recipient's host has not accepted it yet; the sender
				// hears accepted when it does.
			default:
				b.scratch = wire.AppendDeliveryAccepted(b.scratch[:0], s.MessageID, p.id)
				c.send(b.scratch)
			}
			return
		}
		b.failDelivery(p, wire.FailSessionNotFound, "Delivery authorization changed while pending")
	}
	if len(b.deliveries.byID) >= MaxPendingDeliveries || b.deliveries.byFrom[fromID] >= MaxPendingPerSender {
		fail(wire.FailTooManyPendingDeliveries, "Too many messages are waiting for receiver acknowledgement")
		return
	}
	targets := b.resolve(from, s.To)
	switch {
	case len(targets) > 1:
		fail(wire.FailAmbiguousTarget, `Multiple sessions named "`+s.To+`" are connected. Use the session ID instead.`)
		return
	case len(targets) == 0:
		fail(wire.FailSessionNotFound, "Session not found")
		return
	}
	target := targets[0]
	if origin != nil && target.proxyHost != "" {
		// No transit: a host routes only to its own sessions.
		fail(wire.FailSessionNotFound, "Session not found")
		return
	}
	toID := target.info.ID
	if wire.MessagePayloadSize(deliveryIDLen, from.infoRaw, s.Message) > wire.MaxFrameBytes {
		// A send just under the frame cap whose delivery, carrying the
		// sender's session info, is over it: the recipient's reader would
		// drop the connection on it (spec §1.2, §6.7).
		fail(wire.FailInvalidMessage, "Message too large to deliver: with the sender's session info it is over the 1 MiB frame limit")
		return
	}
	m := &s.Meta
	if m.ReplyTo != "" {
		edge := b.asks.byKey[askKey(toID, m.ReplyTo)]
		if edge == nil {
			fail(wire.FailInvalidReplyTarget, "Reply target does not match a pending ask")
			return
		}
		if edge.to != fromID {
			fail(wire.FailInvalidReplyTarget, "Reply target does not match the pending ask")
			return
		}
	}
	if m.ExpectsReply {
		if code, reason := b.asks.admit(fromID, toID, m.ReplyTo); code != "" {
			fail(code, reason)
			return
		}
		b.addAskEdge(m.ID, fromID, toID)
	}
	d := &delivery{
		key:          key,
		fingerprint:  m.Fingerprint,
		messageID:    m.ID,
		replyTo:      m.ReplyTo,
		expectsReply: m.ExpectsReply,
		from:         fromID,
		to:           toID,
		sender:       c,
		recipient:    target.conn,
		origin:       origin,
		forwarded:    target.proxyHost != "",
	}
	d.id, d.uuid = b.ids.deliveryID()
	b.deliveries.add(d, now)
	if d.forwarded {
		// Accepted only once the recipient's host routed it (ForwardAccepted).
		b.fed.Forward(Forward{Host: target.proxyHost, DeliveryID: d.id, From: fromID, To: toID,
			FromInfo: slices.Clone(from.infoRaw), Message: slices.Clone(s.Message)})
		return
	}
	b.stats.accepted.Add(1)
	d.accepted = true
	if origin != nil {
		b.outcome(origin, fromID, m.ID, OutcomeAccepted, false, "", "")
	} else {
		b.scratch = wire.AppendDeliveryAccepted(b.scratch[:0], m.ID, d.id)
		c.send(b.scratch)
	}
	b.scratch = wire.AppendMessage(b.scratch[:0], d.id, from.infoRaw, s.Message)
	target.conn.send(b.scratch)
}

// handleAck completes a delivery the recipient stored (spec §5.1 step 5).
func (b *Broker) handleAck(c *conn, s *session, env *wire.Envelope) {
	ack, err := env.DecodeMessageReceived()
	if err != nil {
		b.refuse(c, err)
		return
	}
	d := b.deliveries.byID[ack.DeliveryID]
	if d == nil || d.to != s.info.ID || d.recipient != c {
		return
	}
	b.completeDelivery(d)
}

// completeDelivery ends a delivery the recipient's inbox holds: the
// recipient acknowledged it, or its host reported so (ForwardDelivered).
func (b *Broker) completeDelivery(d *delivery) {
	sender := b.sessions[d.from]
	if sender == nil {
		b.failDelivery(d, wire.FailSessionNotFound, "Delivery authorization changed before acknowledgement")
		return
	}
	b.deliveries.remove(d)
	if d.replyTo != "" {
		// The reply reached the asker: the ask is answered.
		b.removeAskEdge(askKey(d.to, d.replyTo), "")
	}
	b.recent.put(recentRecord{key: d.key, fp: fpPrefix(&d.fingerprint), to: b.keys.session(d.to), deliveryID: d.uuid}, time.Now())
	b.stats.delivered.Add(1)
	b.stats.deliveredRate.add(1)
	switch {
	case d.origin != nil:
		b.outcome(d.origin, d.from, d.messageID, OutcomeDelivered, false, "", "")
	case sender.conn == d.sender:
		b.scratch = wire.AppendDelivered(b.scratch[:0], d.messageID, d.id)
		sender.conn.send(b.scratch)
	}
}

// handleReject fails a delivery the recipient refused as conflicting.
func (b *Broker) handleReject(c *conn, s *session, env *wire.Envelope) {
	rej, err := env.DecodeMessageRejected()
	if err != nil {
		b.refuse(c, err)
		return
	}
	if d := b.deliveries.byID[rej.DeliveryID]; d != nil && d.to == s.info.ID && d.recipient == c {
		b.failDelivery(d, wire.FailConflictingMessageID, rej.Reason)
	}
}

// failDelivery ends an accepted delivery with a failure (accepted:true). A
// failed ask loses its edge and the recipient hears ask_cancelled.
func (b *Broker) failDelivery(d *delivery, code wire.FailureCode, reason string) {
	b.deliveries.remove(d)
	if d.expectsReply {
		b.removeAskEdge(askKey(d.from, d.messageID), wire.AskDeliveryFailed)
	}
	b.recent.put(recentRecord{key: d.key, fp: fpPrefix(&d.fingerprint), to: b.keys.session(d.to), meta: recentRetryable}, time.Now())
	b.stats.failed.Add(1)
	if d.origin != nil {
		b.outcome(d.origin, d.from, d.messageID, OutcomeFailed, true, code, reason)
	} else if sender := b.sessions[d.from]; sender != nil && sender.conn == d.sender {
		b.scratch = wire.AppendDeliveryFailed(b.scratch[:0], d.messageID, true, code, reason)
		sender.conn.send(b.scratch)
	}
}

// failDeliveriesOf fails the deliveries that sessionID had pending on c, as
// recipient or as sender (spec §3.2 RECIPIENT_/SENDER_DISCONNECTED).
func (b *Broker) failDeliveriesOf(sessionID string, c *conn) {
	if len(c.deliveries) == 0 {
		return
	}
	ds := make([]*delivery, 0, len(c.deliveries))
	for d := range c.deliveries {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(x, y *delivery) int { return cmp.Compare(x.seq, y.seq) })
	for _, d := range ds {
		if b.deliveries.byID[d.id] != d {
			continue
		}
		switch {
		case d.to == sessionID && d.recipient == c:
			b.failDelivery(d, wire.FailRecipientDisconnected, "Recipient disconnected before acknowledging the message")
		case d.from == sessionID && d.sender == c:
			b.failDelivery(d, wire.FailSenderDisconnected, "Sender disconnected before delivery was acknowledged")
		}
	}
}

// deliveryIDLen is the length of a delivery id as written: a UUID's text.
const deliveryIDLen = 36
