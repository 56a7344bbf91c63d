package intercom

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Inbox limits and versions (spec §5.4).
const (
	InboxVersion   = 3
	MaxSeenKeys    = 4096
	hashedFPPrefix = "sha256:"
	// seenSlack is how far past MaxSeenKeys the keys in memory may grow
	// before they are trimmed back: trimming walks them all, so doing it
	// for every arrival cost more than everything else a receiver does.
	// The file never holds more than MaxSeenKeys.
	seenSlack = MaxSeenKeys / 8
)

// InboundMessage is a message a session received and stored.
type InboundMessage struct {
	Key        string // sender id + "\x00" + message id
	From       wire.SessionInfo
	FromRaw    json.RawMessage
	Message    *wire.MessageInfo
	ReceivedAt float64 // epoch ms
	Sequence   int64
	DeferredAt float64 // epoch ms the asker stopped waiting; 0 = still blocking
}

// AskID is the stable receiver-local selector of an ask (spec §5.8):
// "ask-" + base64url(sha256(sender id + "\x00" + message id)).
func AskID(fromID, messageID string) string {
	sum := sha256.Sum256([]byte(fromID + "\x00" + messageID))
	return "ask-" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// AskID of this message.
func (m *InboundMessage) AskID() string { return AskID(m.From.ID, m.Message.ID) }

// ContextID is the receiver-local reply selector of any inbound message:
// "ctx-" and the same digest as its AskID.
func ContextID(fromID, messageID string) string {
	return "ctx-" + strings.TrimPrefix(AskID(fromID, messageID), "ask-")
}

// ContextID of this message.
func (m *InboundMessage) ContextID() string { return ContextID(m.From.ID, m.Message.ID) }

// storedMessage is the file form of an InboundMessage (Pi inbox v3).
type storedMessage struct {
	Key        string          `json:"key"`
	From       json.RawMessage `json:"from"`
	Message    json.RawMessage `json:"message"`
	ReceivedAt float64         `json:"receivedAt"`
	Sequence   int64           `json:"sequence"`
	DeferredAt float64         `json:"deferredAt,omitempty"`
}

type inboxFile struct {
	Version      json.RawMessage   `json:"version"`
	NextSequence json.RawMessage   `json:"nextSequence"`
	Entries      []storedMessage   `json:"entries"`
	PendingAsks  []storedMessage   `json:"pendingAsks"`
	Seen         []string          `json:"seen"`
	Fingerprints map[string]string `json:"fingerprints"`
}

// Inbox is a session's durable inbox (spec §5.4, version 3 format): inbound
// messages are staged, written atomically, and only then acknowledged to the
// broker. Unread entries stay until consumed; asks stay pending until
// answered, cancelled or expired. Delivery is deduplicated by sender and
// message id across restarts (the last MaxSeenKeys keys are remembered).
//
// Fingerprints this inbox writes for remembered keys are SHA-256 digests
// ("sha256:…") rather than the Pi inbox's full JSON, which keeps the file
// small; JSON fingerprints written by a Pi client are understood on load.
// Safe for concurrent use.
//
// Flush (called before acknowledging what was staged) returns once the
// inbox is on disk — in its journal (inbox_journal.go) — and concurrent
// flushes share one write. Marking messages read and dismissing, deferring
// or pruning asks are written with the next write, or soon in the
// background: a crash before that shows a message again or keeps an
// answered ask pending, the at-least-once the spec allows (§5.4). Close
// writes everything into the inbox file and removes the journal.
type Inbox struct {
	path string

	mu      sync.Mutex
	next    int64
	entries []*InboundMessage
	asks    []*InboundMessage
	seen    []string
	seenSet map[string]struct{}
	fps     map[string]string
	w       *fileWriter
	// keyJSON caches the JSON string literal of each remembered key: an
	// inbox rewrites up to MaxSeenKeys of them on every compaction.
	keyJSON map[string][]byte

	// j keeps the file and its journal (journal.go, inbox_journal.go);
	// w is j's fileWriter.
	j *journal
}

// OpenInbox loads (or starts) the inbox of sessionID, migrating versions 1
// and 2. A file that cannot be read is kept aside as <file>.corrupt-<ms>.
func OpenInbox(p Paths, sessionID string) (*Inbox, error) {
	path := p.Inbox(sessionID)
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	data, journal, err := readJournaled(path)
	if err != nil {
		return nil, fmt.Errorf("read inbox: %w", err)
	}
	in := newInbox(path)
	if data != nil {
		if err := in.load(data, false); err != nil {
			keepAside(path)
			in = newInbox(path)
		}
	}
	in.replay(journal)
	// What the journal held goes into the file with the first write.
	in.j.replayed(len(journal))
	return in, nil
}

func newInbox(path string) *Inbox {
	in := &Inbox{path: path, next: 1, seenSet: make(map[string]struct{}), fps: make(map[string]string),
		keyJSON: make(map[string][]byte)}
	in.j = newJournal(path, &in.mu, in.encode)
	in.w = in.j.w
	return in
}

// ReadPendingAsks reads another session's pending asks without creating,
// migrating or rewriting its inbox (manager inspection, spec §5.4, §7.4):
// only version 3 is read; a missing file is an empty inbox.
func ReadPendingAsks(p Paths, sessionID string) ([]*InboundMessage, error) {
	path := p.Inbox(sessionID)
	data, journal, err := readJournaled(path)
	if err != nil {
		return nil, fmt.Errorf("read inbox: %w", err)
	}
	in := newInbox("")
	if data != nil {
		if err := in.load(data, true); err != nil {
			return nil, err
		}
	}
	in.replay(journal)
	return in.PendingAsks(), nil
}

func (in *Inbox) load(data []byte, strictVersion bool) error {
	var f inboxFile
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	version := string(f.Version)
	if strictVersion && version != "3" {
		return ErrInboxVersion
	}
	if version != "1" && version != "2" && version != "3" {
		return ErrInboxVersion
	}
	var next float64
	if json.Unmarshal(f.NextSequence, &next) != nil || next < 1 || f.Entries == nil || f.Seen == nil {
		return errors.New("inbox: invalid state")
	}
	in.next = int64(next)
	decode := func(list []storedMessage) ([]*InboundMessage, error) {
		out := make([]*InboundMessage, 0, len(list))
		for _, s := range list {
			m, err := decodeStored(s)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		slices.SortStableFunc(out, func(a, b *InboundMessage) int { return int(a.Sequence - b.Sequence) })
		return out, nil
	}
	var err error
	if in.entries, err = decode(f.Entries); err != nil {
		return err
	}
	if version == "1" {
		for _, e := range in.entries {
			if e.Message.ExpectsReply {
				in.asks = append(in.asks, e)
			}
		}
	} else {
		if f.PendingAsks == nil {
			return errors.New("inbox: invalid pending asks")
		}
		asks, err := decode(f.PendingAsks)
		if err != nil {
			return err
		}
		uniq := map[string]bool{}
		for _, a := range asks {
			if !uniq[a.Key] {
				uniq[a.Key] = true
				in.asks = append(in.asks, a)
			}
		}
	}
	if version == "3" && f.Fingerprints == nil {
		return errors.New("inbox: invalid fingerprints")
	}
	for k, v := range f.Fingerprints {
		in.fps[k] = v
	}
	for _, k := range f.Seen {
		in.remember(k)
	}
	for _, e := range append(slices.Clone(in.entries), in.asks...) {
		in.remember(e.Key)
		in.fps[e.Key] = hashedFingerprint(e.Message)
		in.next = max(in.next, e.Sequence+1)
	}
	return nil
}

func decodeStored(s storedMessage) (*InboundMessage, error) {
	m := &InboundMessage{Key: s.Key, FromRaw: s.From, ReceivedAt: s.ReceivedAt, Sequence: s.Sequence, DeferredAt: s.DeferredAt}
	var from struct {
		ID     string  `json:"id"`
		Name   *string `json:"name"`
		Cwd    string  `json:"cwd"`
		Model  string  `json:"model"`
		PID    float64 `json:"pid"`
		Status *string `json:"status"`
		Origin string  `json:"origin"`
	}
	if err := json.Unmarshal(s.From, &from); err != nil || from.ID == "" {
		return nil, errors.New("inbox: invalid sender")
	}
	m.From = wire.SessionInfo{ID: from.ID, Cwd: from.Cwd, Model: from.Model, PID: from.PID, Origin: from.Origin}
	if from.Name != nil {
		m.From.Name, m.From.HasName = *from.Name, true
	}
	if from.Status != nil {
		m.From.Status, m.From.HasStatus = *from.Status, true
	}
	msg, err := wire.ParseMessage(s.Message)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	m.Message = msg
	if s.Key != from.ID+"\x00"+msg.ID {
		return nil, errors.New("inbox: entry key does not match its sender and id")
	}
	return m, nil
}

func hashedFingerprint(m *wire.MessageInfo) string {
	sum := m.ContentFingerprint()
	return hashedFPPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

func (in *Inbox) remember(key string) {
	if _, ok := in.seenSet[key]; ok {
		return
	}
	in.seenSet[key] = struct{}{}
	in.seen = append(in.seen, key)
	in.keyJSON[key] = wire.AppendString(nil, key)
}

// StageResult says what Stage did with a message.
type StageResult struct {
	// Duplicate: the message was stored before; acknowledge it again but
	// do not show it again.
	Duplicate bool
	// Conflict: the sender reused a message id with another payload; answer
	// message_rejected CONFLICTING_MESSAGE_ID.
	Conflict bool
	Message  *InboundMessage
}

// Stage adds an inbound message in memory. It must be made durable with
// Flush before the delivery is acknowledged.
func (in *Inbox) Stage(fromRaw []byte, from wire.SessionInfo, msg *wire.MessageInfo, receivedAt float64) StageResult {
	in.mu.Lock()
	defer in.mu.Unlock()
	key := from.ID + "\x00" + msg.ID
	fp := hashedFingerprint(msg)
	if _, seen := in.seenSet[key]; seen {
		prev, known := in.fps[key]
		switch {
		case !known:
			in.fps[key] = fp
			in.j.compact = true
			in.w.changed()
		case strings.HasPrefix(prev, hashedFPPrefix) && prev != fp,
			!strings.HasPrefix(prev, hashedFPPrefix) && prev != msg.PiFingerprint():
			return StageResult{Conflict: true}
		}
		for _, e := range in.entries {
			if e.Key == key {
				return StageResult{Duplicate: true, Message: e}
			}
		}
		return StageResult{Duplicate: true}
	}
	m := &InboundMessage{Key: key, From: from, FromRaw: append(json.RawMessage(nil), fromRaw...),
		Message: msg, ReceivedAt: receivedAt, Sequence: in.next}
	in.next++
	in.entries = append(in.entries, m)
	if msg.ExpectsReply {
		in.asks = append(in.asks, m)
	}
	in.remember(key)
	in.fps[key] = fp
	in.trimSeen(MaxSeenKeys + seenSlack)
	in.j.pending = appendStageRecord(in.j.pending, m, fp)
	in.w.changed()
	return StageResult{Message: m}
}

// trimSeen cuts the remembered keys back to MaxSeenKeys once there are
// more than limit, always keeping those of unread entries and pending
// asks.
func (in *Inbox) trimSeen(limit int) {
	if len(in.seen) <= limit {
		return
	}
	keep := map[string]bool{}
	for _, e := range in.entries {
		keep[e.Key] = true
	}
	for _, a := range in.asks {
		keep[a.Key] = true
	}
	budget := max(0, MaxSeenKeys-len(keep))
	var recent []string
	for i := len(in.seen) - 1; i >= 0 && len(recent) < budget; i-- {
		if !keep[in.seen[i]] {
			recent = append(recent, in.seen[i])
		}
	}
	slices.Reverse(recent)
	seen := make([]string, 0, len(keep)+len(recent))
	for _, k := range in.seen {
		if keep[k] {
			seen = append(seen, k)
		}
	}
	seen = append(seen, recent...)
	in.seen = seen
	in.seenSet = make(map[string]struct{}, len(seen))
	for _, k := range seen {
		in.seenSet[k] = struct{}{}
	}
	for k := range in.fps {
		if _, ok := in.seenSet[k]; !ok {
			delete(in.fps, k)
		}
	}
	for k := range in.keyJSON {
		if _, ok := in.seenSet[k]; !ok {
			delete(in.keyJSON, k)
		}
	}
}

// Flush returns once every change so far is on disk; it writes the inbox
// if anything changed since the last write.
func (in *Inbox) Flush() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.w.sync(in.w.changes)
}

// Close writes what is not written yet into the inbox file and removes the
// journal.
func (in *Inbox) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.j.close()
}

// changedSoon records a change that need not wait for the disk. Called
// with mu held.
func (in *Inbox) changedSoon() {
	in.w.changed()
	in.w.soon()
}

// appendStoredFields adds the fields of m's stored form (storedMessage,
// without braces) to dst, in the Pi file's order.
func appendStoredFields(dst []byte, m *InboundMessage) []byte {
	dst = append(dst, `"key":`...)
	dst = wire.AppendString(dst, m.Key)
	dst = append(dst, `,"from":`...)
	dst = append(dst, m.FromRaw...)
	dst = append(dst, `,"message":`...)
	dst = append(dst, m.Message.Raw...)
	dst = append(dst, `,"receivedAt":`...)
	dst = wire.AppendNumber(dst, m.ReceivedAt)
	dst = append(dst, `,"sequence":`...)
	dst = wire.AppendNumber(dst, float64(m.Sequence))
	if m.DeferredAt != 0 {
		dst = append(dst, `,"deferredAt":`...)
		dst = wire.AppendNumber(dst, m.DeferredAt)
	}
	return dst
}

func (in *Inbox) encode(dst []byte) []byte {
	in.trimSeen(MaxSeenKeys)
	b := bytes.NewBuffer(dst)
	b.WriteString(`{"version":3,"nextSequence":`)
	b.Write(wire.AppendNumber(nil, float64(in.next)))
	writeList := func(name string, list []*InboundMessage) {
		b.WriteString(`,"` + name + `":[`)
		for i, m := range list {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('{')
			b.Write(appendStoredFields(nil, m))
			b.WriteByte('}')
		}
		b.WriteByte(']')
	}
	writeList("entries", in.entries)
	writeList("pendingAsks", in.asks)
	b.WriteString(`,"seen":[`)
	for i, k := range in.seen {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(in.keyJSON[k])
	}
	b.WriteString(`],"fingerprints":{`)
	first := true
	var scratch []byte
	for _, k := range in.seen {
		fp, ok := in.fps[k]
		if !ok {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(in.keyJSON[k])
		b.WriteByte(':')
		scratch = wire.AppendString(scratch[:0], fp)
		b.Write(scratch)
	}
	b.WriteString("}}")
	return b.Bytes()
}

// Unread returns the stored messages not yet consumed, oldest first. The
// inbox never changes a message it has handed out: callers read them
// without its mutex.
func (in *Inbox) Unread() []*InboundMessage {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.entries)
}

// PendingAsks returns the asks not yet answered, oldest first.
func (in *Inbox) PendingAsks() []*InboundMessage {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.asks)
}

// Len is the number of unread messages.
func (in *Inbox) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.entries)
}

// Consume marks messages read; the inbox is written soon (see Inbox). The
// error is always nil: a failed write is retried by the next Flush.
func (in *Inbox) Consume(keys ...string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	drop := map[string]bool{}
	for _, k := range keys {
		drop[k] = true
	}
	n := len(in.entries)
	in.entries = slices.DeleteFunc(in.entries, func(m *InboundMessage) bool { return drop[m.Key] })
	if len(in.entries) != n {
		in.j.pending = appendConsumeRecord(in.j.pending, keys)
		in.changedSoon()
	}
	return nil
}

// DismissAsk removes a pending ask (answered or cancelled); the inbox is
// written soon. fromID "" matches any sender.
func (in *Inbox) DismissAsk(messageID, fromID string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := len(in.asks)
	in.asks = slices.DeleteFunc(in.asks, func(m *InboundMessage) bool {
		return m.Message.ID == messageID && (fromID == "" || m.From.ID == fromID)
	})
	if len(in.asks) != n {
		in.j.compact = true
		in.changedSoon()
	}
	return nil
}

// MarkDeferred records that the asker stopped waiting for an ask; the inbox
// is written soon.
func (in *Inbox) MarkDeferred(messageID, fromID string, at float64) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, a := range in.asks {
		if a.Message.ID == messageID && a.From.ID == fromID && a.DeferredAt == 0 {
			// A copy: callers read the messages PendingAsks and Unread
			// returned without the mutex.
			d := *a
			d.DeferredAt = at
			in.asks[i] = &d
			if j := slices.Index(in.entries, a); j >= 0 {
				in.entries[j] = &d
			}
			in.j.compact = true
			in.changedSoon()
		}
	}
	return nil
}

// PruneAsks drops pending asks received more than ttlMs ago (their broker
// edge has expired, so a reply would be refused); the inbox is written soon.
func (in *Inbox) PruneAsks(ttlMs, nowMs float64) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := len(in.asks)
	in.asks = slices.DeleteFunc(in.asks, func(m *InboundMessage) bool { return nowMs-m.ReceivedAt > ttlMs })
	if len(in.asks) != n {
		in.j.compact = true
		in.changedSoon()
	}
	return nil
}
