package broker

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// askEdge is an unresolved ask: from (the asker) waits for a reply from to
// to message messageID (spec §5.7). A blocking edge becomes deferred when the
// asker stops waiting or either party's connection goes away.
type askEdge struct {
	seq       uint64
	messageID string
	from, to  string
	createdAt float64 // epoch ms
	expiresAt float64 // epoch ms
	deferred  bool
	timer     *time.Timer
}

func askKey(from, messageID string) string { return from + "\x00" + messageID }

// askTable indexes ask edges by key and by session, so admission and
// disconnect handling look only at the edges of the sessions involved.
type askTable struct {
	byKey     map[string]*askEdge
	bySession map[string]map[*askEdge]struct{} // edges where the session is either party
	fromCount map[string]int
	seq       uint64
}

func (t *askTable) init() {
	t.byKey = make(map[string]*askEdge)
	t.bySession = make(map[string]map[*askEdge]struct{})
	t.fromCount = make(map[string]int)
}

func (t *askTable) index(e *askEdge) {
	t.seq++
	e.seq = t.seq
	t.byKey[askKey(e.from, e.messageID)] = e
	t.fromCount[e.from]++
	for _, id := range []string{e.from, e.to} {
		m := t.bySession[id]
		if m == nil {
			m = make(map[*askEdge]struct{})
			t.bySession[id] = m
		}
		m[e] = struct{}{}
	}
}

func (t *askTable) unindex(e *askEdge) {
	if e.timer != nil {
		e.timer.Stop()
	}
	delete(t.byKey, askKey(e.from, e.messageID))
	if n := t.fromCount[e.from] - 1; n > 0 {
		t.fromCount[e.from] = n
	} else {
		delete(t.fromCount, e.from)
	}
	for _, id := range []string{e.from, e.to} {
		if m := t.bySession[id]; m != nil {
			delete(m, e)
			if len(m) == 0 {
				delete(t.bySession, id)
			}
		}
	}
}

// edgesOf returns the edges involving id, oldest first.
func (t *askTable) edgesOf(id string) []*askEdge {
	m := t.bySession[id]
	out := make([]*askEdge, 0, len(m))
	for e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *askEdge) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

func (t *askTable) all() []*askEdge {
	out := make([]*askEdge, 0, len(t.byKey))
	for _, e := range t.byKey {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *askEdge) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

func (t *askTable) stopTimers() {
	for _, e := range t.byKey {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
}

// admit checks a new ask from → to (spec §5.7): one unresolved ask per
// pair, no ask against a blocking reverse ask unless it replies to it, and at
// most MaxAsksPerSender edges per asker.
func (t *askTable) admit(from, to, replyTo string) (wire.FailureCode, string) {
	for e := range t.bySession[from] {
		if e.from == from && e.to == to {
			return wire.FailAskAlreadyPending, "Another ask to this session is still unresolved. Wait for its reply or use intercom_send for a non-blocking follow-up."
		}
	}
	for e := range t.bySession[from] {
		if !e.deferred && e.from == to && e.to == from && replyTo != e.messageID {
			return wire.FailMutualAsk, "Mutual ask refused: target session is already waiting for a reply from this session."
		}
	}
	if t.fromCount[from] >= MaxAsksPerSender {
		return wire.FailTooManyPendingAsks, "Too many asks are already waiting for replies"
	}
	return "", ""
}

func nowMs() float64 { return float64(time.Now().UnixMilli()) }

// addAskEdge creates a blocking edge at acceptance time. Called with mu held.
func (b *Broker) addAskEdge(messageID, from, to string) {
	if prev := b.asks.byKey[askKey(from, messageID)]; prev != nil {
		b.asks.unindex(prev)
	}
	now := nowMs()
	e := &askEdge{messageID: messageID, from: from, to: to, createdAt: now,
		expiresAt: now + float64(b.cfg.AskTTL.Milliseconds())}
	b.asks.index(e)
	b.armAskExpiry(e)
	b.persister.mark()
}

func (b *Broker) armAskExpiry(e *askEdge) {
	delay := time.Duration(e.expiresAt-nowMs()) * time.Millisecond
	delay = min(max(delay, time.Millisecond), time.Duration(math.MaxInt32)*time.Millisecond)
	e.timer = time.AfterFunc(delay, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.asks.byKey[askKey(e.from, e.messageID)] != e {
			return
		}
		if e.expiresAt > nowMs() {
			b.armAskExpiry(e) // fired early, or the delay was clamped
			return
		}
		b.removeAskEdge(askKey(e.from, e.messageID), wire.AskExpired)
	})
}

// removeAskEdge deletes an edge; with a reason, the recipient of the ask
// hears ask_cancelled (the asker hears nothing, spec §5.7).
func (b *Broker) removeAskEdge(key string, reason wire.AskCancelReason) {
	e := b.asks.byKey[key]
	if e == nil {
		return
	}
	b.asks.unindex(e)
	b.persister.mark()
	if reason != "" {
		b.notify(e.to, wire.AppendAskCancelled(b.scratch[:0], e.messageID, e.from, reason))
	}
}

func (b *Broker) notify(sessionID string, frame []byte) {
	if s := b.sessions[sessionID]; s != nil {
		s.conn.send(frame)
	}
}

// deferAsksOf turns the blocking edges of a session that went away into
// deferred ones; when it was the asker, the recipient hears ask_deferred.
func (b *Broker) deferAsksOf(id string) {
	changed := false
	for _, e := range b.asks.edgesOf(id) {
		if e.deferred {
			continue
		}
		e.deferred = true
		changed = true
		if e.from == id {
			b.notify(e.to, wire.AppendAskDeferred(b.scratch[:0], e.messageID, e.from))
		}
	}
	if changed {
		b.persister.mark()
	}
}

// cancelAsksOf removes every edge of a session that unregistered for good;
// the other party hears ask_cancelled naming the session that left.
func (b *Broker) cancelAsksOf(id string, reason wire.AskCancelReason) {
	edges := b.asks.edgesOf(id)
	for _, e := range edges {
		b.asks.unindex(e)
		if e.from == id {
			b.notify(e.to, wire.AppendAskCancelled(b.scratch[:0], e.messageID, e.from, reason))
		} else {
			b.notify(e.from, wire.AppendAskCancelled(b.scratch[:0], e.messageID, e.to, reason))
		}
	}
	if len(edges) > 0 {
		b.persister.mark()
	}
}

func (b *Broker) handleDeferAsk(c *conn, s *session, env *wire.Envelope) {
	ac, err := env.DecodeAskControl()
	if err != nil {
		b.refuse(c, err)
		return
	}
	e := b.asks.byKey[askKey(s.info.ID, ac.MessageID)]
	applied := e != nil
	if applied && !e.deferred {
		e.deferred = true
		b.persister.mark()
		b.notify(e.to, wire.AppendAskDeferred(b.scratch[:0], e.messageID, e.from))
		b.askControlToHost(e, "defer")
	}
	b.scratch = wire.AppendAskControlResult(b.scratch[:0], ac.RequestID, "defer", ac.MessageID, applied)
	c.send(b.scratch)
}

func (b *Broker) handleCancelAsk(c *conn, s *session, env *wire.Envelope) {
	ac, err := env.DecodeAskControl()
	if err != nil {
		b.refuse(c, err)
		return
	}
	key := askKey(s.info.ID, ac.MessageID)
	e := b.asks.byKey[key]
	applied := e != nil
	if applied {
		b.removeAskEdge(key, wire.AskCancelled)
		b.askControlToHost(e, "cancel")
	}
	b.scratch = wire.AppendAskControlResult(b.scratch[:0], ac.RequestID, "cancel", ac.MessageID, applied)
	c.send(b.scratch)
}

// encodeAskState renders broker-asks.json (spec §5.7). No scope is in it.
func encodeAskState(edges []*askEdge) []byte {
	out := []byte(`{"version":1,"edges":[`)
	for i, e := range edges {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"messageId":`...)
		out = wire.AppendString(out, e.messageID)
		out = append(out, `,"from":`...)
		out = wire.AppendString(out, e.from)
		out = append(out, `,"to":`...)
		out = wire.AppendString(out, e.to)
		out = append(out, `,"createdAt":`...)
		out = wire.AppendNumber(out, e.createdAt)
		out = append(out, `,"expiresAt":`...)
		out = wire.AppendNumber(out, e.expiresAt)
		if e.deferred {
			out = append(out, `,"state":"deferred"}`...)
		} else {
			out = append(out, `,"state":"blocking"}`...)
		}
	}
	return append(out, "]}"...)
}

type persistedEdge struct {
	MessageID json.RawMessage `json:"messageId"`
	From      json.RawMessage `json:"from"`
	To        json.RawMessage `json:"to"`
	CreatedAt json.RawMessage `json:"createdAt"`
	ExpiresAt json.RawMessage `json:"expiresAt"`
	State     json.RawMessage `json:"state"`
}

// loadAskEdges restores unexpired edges as deferred: the late reply stays
// authorised, nobody blocks on it any more (spec §5.7).
func (b *Broker) loadAskEdges() error {
	path := b.cfg.Paths.AskState()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read ask state: %w", err)
	}
	var state struct {
		Version json.RawMessage   `json:"version"`
		Edges   []json.RawMessage `json:"edges"`
	}
	if err := json.Unmarshal(data, &state); err != nil || string(state.Version) != "1" || state.Edges == nil {
		aside := path + ".corrupt-" + strconv.FormatInt(time.Now().UnixMilli(), 10)
		if rerr := os.Rename(path, aside); rerr == nil {
			_ = os.Chmod(aside, intercom.FileMode)
		}
		b.log.Warn("ask state unreadable; kept aside and starting with no ask edges", "file", aside)
		return nil
	}
	now := nowMs()
	for _, raw := range state.Edges {
		var pe persistedEdge
		if json.Unmarshal(raw, &pe) != nil {
			continue
		}
		e, ok := validPersistedEdge(&pe, now)
		if !ok {
			continue
		}
		if prev := b.asks.byKey[askKey(e.from, e.messageID)]; prev != nil {
			b.asks.unindex(prev)
		}
		b.asks.index(e)
		b.armAskExpiry(e)
	}
	b.persister.mark()
	return nil
}

func validPersistedEdge(pe *persistedEdge, now float64) (*askEdge, bool) {
	var e askEdge
	var state string
	str := func(raw json.RawMessage, dst *string) bool {
		return json.Unmarshal(raw, dst) == nil && len(raw) > 0 && raw[0] == '"'
	}
	num := func(raw json.RawMessage, dst *float64) bool {
		return json.Unmarshal(raw, dst) == nil && len(raw) > 0 && raw[0] != 'n'
	}
	if !str(pe.MessageID, &e.messageID) || e.messageID == "" || len(e.messageID) > 4*wire.MaxMessageIDChars ||
		!str(pe.From, &e.from) || !validSessionID(e.from) ||
		!str(pe.To, &e.to) || !validSessionID(e.to) ||
		!num(pe.CreatedAt, &e.createdAt) || !num(pe.ExpiresAt, &e.expiresAt) || e.expiresAt <= now ||
		!str(pe.State, &state) || (state != "blocking" && state != "deferred") {
		return nil, false
	}
	e.deferred = true
	return &e, true
}

func validSessionID(id string) bool {
	for _, r := range id {
		if r != ' ' && r != '\t' && r != '\n' && r != '\r' {
			return true
		}
	}
	return false
}

// askPersister writes broker-asks.json after changes. Writes are coalesced:
// a burst of changes costs one atomic write of the latest state, off the
// routing path, and close writes the final state synchronously.
type askPersister struct {
	b     *Broker
	path  string
	wake  chan struct{}
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	dirty bool
}

func newAskPersister(b *Broker, path string) *askPersister {
	return &askPersister{b: b, path: path, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// mark records a change. Called with the broker's mu held.
func (p *askPersister) mark() {
	p.mu.Lock()
	p.dirty = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *askPersister) run() {
	for {
		select {
		case <-p.wake:
			p.flush()
		case <-p.done:
			p.flush()
			return
		}
	}
}

func (p *askPersister) flush() {
	p.mu.Lock()
	dirty := p.dirty
	p.dirty = false
	p.mu.Unlock()
	if !dirty {
		return
	}
	p.b.mu.Lock()
	data := encodeAskState(p.b.asks.all())
	p.b.mu.Unlock()
	if err := intercom.WriteFileAtomic(p.path, data); err != nil {
		p.b.log.Error("persist ask edges", "err", err)
	}
}

func (p *askPersister) close() { p.once.Do(func() { close(p.done) }) }
