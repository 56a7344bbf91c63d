package intercom

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Message history (docs/architecture.md "History"): the process that holds
// a session — a holder, or a one-shot command registered for its length —
// tells its Recorder about every message the session sends and receives
// and about their receipts. intercom/history keeps them in a local store;
// the command layer injects it.

// HistoryDirection says whether a session sent or received a message.
type HistoryDirection string

// History directions.
const (
	Sent     HistoryDirection = "sent"
	Received HistoryDirection = "received"
)

// Receipts of a message, in the order they normally come.
const (
	ReceiptQueued    = "queued"    // kept for a worker that was not connected (deferred.go)
	ReceiptAccepted  = "accepted"  // the broker routed it
	ReceiptDelivered = "delivered" // the recipient stored it
	ReceiptRead      = "read"      // the recipient read it (for a sent message: its read receipt came)
	ReceiptFailed    = "failed"    // the broker failed it (Reason says why)
)

// Message kinds in history.
const (
	KindMessage = "message"
	KindAsk     = "ask"
	KindReply   = "reply"
)

// HistoryEvent is one thing a Recorder learns: a message (Receipt "") or a
// receipt of one recorded before, named by Direction, Peer and MessageID.
type HistoryEvent struct {
	Direction HistoryDirection
	// Receipt is "" for the message itself, else one of the Receipt*
	// constants.
	Receipt string
	// Peer is the other session's id: the recipient of a sent message,
	// the sender of a received one; PeerName its name, when known.
	Peer, PeerName string
	MessageID      string
	Kind           string // KindMessage, KindAsk or KindReply
	ReplyTo        string // the message id a reply answers
	Text           string
	Attachments    int
	// Team is the message's named team (content.team), which a Recorder
	// prefers; else Scope, the session's routing scope when it happened.
	// Scope is private: a Recorder turns it into a team name and never
	// stores or shows it.
	Team  string
	Scope string
	// At is when it happened (for a sent message, its timestamp).
	At time.Time
	// Reason is a failure's code and reason.
	Reason string
}

// Recorder receives a session's history events. Record must not block on
// the disk (it runs on the session's send and receive paths); Flush
// returns once everything recorded so far is stored.
type Recorder interface {
	Record(session string, e HistoryEvent)
	Flush() error
}

// ReadReceiptControl is the content.control type of a read receipt: what a
// receiver sends the sender of messages it read, only under agent-fleet's
// broker and only to a sender that an agent-fleet holder serves (no
// TypeScript client ever gets one). data: {"messageIds": [...], "readAt": ms}.
const ReadReceiptControl = "agent-fleet.intercom/read-receipt"

// maxReceiptIDs bounds the message ids of one receipt (content.control
// data is at most 16 KiB; ids at most 256 characters).
const maxReceiptIDs = 40

type readReceipt struct {
	MessageIDs []string `json:"messageIds"`
	ReadAt     float64  `json:"readAt"`
}

func kindOf(m *wire.MessageInfo) string {
	switch {
	case m.ExpectsReply:
		return KindAsk
	case m.ReplyTo != "":
		return KindReply
	}
	return KindMessage
}

// record hands e to the session's Recorder, if it has one.
func (s *Session) record(e HistoryEvent) {
	if s.cfg.History == nil {
		return
	}
	e.Scope = s.client.Identity().Scope
	s.cfg.History.Record(s.cfg.Identity.SessionID, e)
}

// recordSent records a message this session sent and what became of it.
func (s *Session) recordSent(msg *wire.MessageInfo, res *SendResult, err error) {
	if s.cfg.History == nil || res == nil {
		return
	}
	peer := res.TargetID
	if peer == "" {
		peer = res.To
	}
	s.record(HistoryEvent{Direction: Sent, Peer: peer, MessageID: msg.ID, Kind: kindOf(msg), ReplyTo: msg.ReplyTo,
		Text: msg.Text, Attachments: len(msg.Attachments), Team: msg.Team, At: time.UnixMilli(int64(msg.Timestamp))})
	now := time.Now()
	receipt := func(r, reason string) {
		s.record(HistoryEvent{Direction: Sent, Receipt: r, Peer: peer, MessageID: msg.ID, At: now, Reason: reason})
	}
	switch {
	case err != nil:
	case res.State == DeferredQueued:
		receipt(ReceiptQueued, "")
	case res.OK:
		receipt(ReceiptAccepted, "")
		receipt(ReceiptDelivered, "")
	default:
		if res.Accepted {
			receipt(ReceiptAccepted, "")
		}
		receipt(ReceiptFailed, res.Code+": "+res.Reason)
	}
}

// recordReceived records messages this session stored.
func (s *Session) recordReceived(ms []*InboundMessage) {
	if s.cfg.History == nil {
		return
	}
	for _, m := range ms {
		s.record(HistoryEvent{Direction: Received, Peer: m.From.ID, PeerName: m.From.Name, MessageID: m.Message.ID,
			Kind: kindOf(m.Message), ReplyTo: m.Message.ReplyTo, Text: m.Message.Text,
			Attachments: len(m.Message.Attachments), Team: m.Message.Team, At: time.UnixMilli(int64(m.ReceivedAt))})
	}
}

// markedRead records that messages were read here and sends their senders
// read receipts where that is allowed (ReadReceiptControl), in the
// background: reading never waits for them.
func (s *Session) markedRead(ms []*InboundMessage) {
	if len(ms) == 0 {
		return
	}
	now := time.Now()
	bySender := map[string][]string{}
	var order []string
	for _, m := range ms {
		s.record(HistoryEvent{Direction: Received, Receipt: ReceiptRead, Peer: m.From.ID, MessageID: m.Message.ID, At: now})
		if m.Message.HasControl {
			continue
		}
		if _, ok := bySender[m.From.ID]; !ok {
			order = append(order, m.From.ID)
		}
		bySender[m.From.ID] = append(bySender[m.From.ID], m.Message.ID)
	}
	if len(order) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing { // the client is going: a receipt would not leave
		return
	}
	for _, from := range order {
		k := slices.IndexFunc(s.unreceipted, func(r pendingReceipt) bool { return r.to == from })
		if k < 0 {
			s.unreceipted = append(s.unreceipted, pendingReceipt{to: from, at: now})
			k = len(s.unreceipted) - 1
		}
		s.unreceipted[k].ids = append(s.unreceipted[k].ids, bySender[from]...)
	}
	if !s.receipting {
		s.receipting = true
		s.receipts.Add(1)
		go s.sendReceipts()
	}
}

// pendingReceipt is the read receipt one sender is still to get: the ids
// of its messages read since the last, and when the first was read.
type pendingReceipt struct {
	to  string
	ids []string
	at  time.Time
}

// sendReceipts sends the queued read receipts until none is left. Reads
// made while it sends wait for the next round, so a burst of reads (a
// listen consuming a flood, one message at a time) costs the broker a few
// receipts, not one frame each.
func (s *Session) sendReceipts() {
	defer s.receipts.Done()
	for {
		s.mu.Lock()
		batch := s.unreceipted
		s.unreceipted = nil
		if len(batch) == 0 {
			s.receipting = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, r := range batch {
			if !s.takesReceipts(ctx, r.to) {
				continue
			}
			for ids := r.ids; len(ids) > 0; {
				n := min(len(ids), maxReceiptIDs)
				s.sendReceipt(ctx, r.to, ids[:n], r.at)
				ids = ids[n:]
			}
		}
		cancel()
	}
}

// takesReceipts: the broker is agent-fleet's (its local API answers), the
// sender is connected to it, and an agent-fleet holder serves the sender's
// session — only agent-fleet clients get read receipts.
func (s *Session) takesReceipts(ctx context.Context, sender string) bool {
	if sender == s.cfg.Identity.SessionID || !ValidSessionID(sender) {
		return false
	}
	peer, err := (&LocalAPIClient{Path: s.cfg.Paths.LocalAPISocket()}).Peer(ctx, sender)
	if err != nil || peer == nil || !peer.Connected {
		return false
	}
	var d net.Dialer
	d.Timeout = time.Second
	c, err := d.DialContext(ctx, "unix", s.cfg.Paths.HolderSocket(sender))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (s *Session) sendReceipt(ctx context.Context, to string, ids []string, at time.Time) {
	data, _ := json.Marshal(readReceipt{MessageIDs: ids, ReadAt: float64(at.UnixMilli())})
	text := fmt.Sprintf("[agent-fleet read receipt: %s read %d of your messages]", s.cfg.Identity.Name, len(ids))
	if len(ids) == 1 {
		text = fmt.Sprintf("[agent-fleet read receipt: %s read your message]", s.cfg.Identity.Name)
	}
	m := wire.Message{ID: NewMessageID(), Timestamp: float64(at.UnixMilli()), Text: text,
		Control: &wire.Control{Type: ReadReceiptControl, Version: 1, Data: data}}
	info, err := wire.ParseMessage(m.AppendJSON(nil))
	if err != nil {
		s.log.Warn("could not compose a read receipt", "err", err)
		return
	}
	if _, err := s.client.Send(ctx, to, info); err != nil {
		s.log.Debug("read receipt not sent", "to", to, "err", err)
	}
}

// takeReceipt handles an inbound read receipt: it records the read
// receipts of the messages it names and is not stored in the inbox. false
// when msg is not a read receipt.
func (s *Session) takeReceipt(from wire.SessionInfo, msg *wire.MessageInfo) bool {
	if msg.ControlType != ReadReceiptControl {
		return false
	}
	var body struct {
		Content struct {
			Control struct {
				Data readReceipt `json:"data"`
			} `json:"control"`
		} `json:"content"`
	}
	if json.Unmarshal(msg.Raw, &body) != nil {
		return true // ours, malformed: nothing to show anyone
	}
	at := time.UnixMilli(int64(body.Content.Control.Data.ReadAt))
	for _, id := range body.Content.Control.Data.MessageIDs {
		s.record(HistoryEvent{Direction: Sent, Receipt: ReceiptRead, Peer: from.ID, MessageID: id, At: at})
	}
	return true
}
