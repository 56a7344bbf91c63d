package broker

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Proxy sessions (docs/federation.md "A message across hosts"): a session
// of another host is a session of this broker bound to a stand-in
// connection with no socket. It is listed, resolved and broadcast like a
// local one; what the broker would write to it is dropped, since its home
// host tells the real session itself, and what concerns the other host
// (sends to it, outcomes of its sends, ask controls) goes to the
// Federation.

// forwardAllowance extends the delivery timeout of a delivery to a proxy
// session, so that the recipient host's verdict (within its own
// DeliveryTimeout) normally arrives before this broker gives up.
const forwardAllowance = 5 * time.Second

// ErrNoFederation means a federation call reached a broker that has none
// (SetFederation was not given one).
var ErrNoFederation = errors.New("broker has no federation")

// ErrTooManyProxies means the broker already holds Config.MaxSessions
// proxy sessions.
var ErrTooManyProxies = errors.New("too many remote sessions")

// proxyOrigin is the sender host's side of a send injected by ProxySend.
type proxyOrigin struct {
	host       string
	deliveryID string // the sender host's deliveryId (Forward.DeliveryID there)
}

// SetFederation joins the broker to other hosts through f; nil f leaves it
// a broker of one host. scoper maps scopes to the tokens announced for
// them; with f set and scoper nil, scoped sessions get tokens under a
// random key, so they share their scope with no other host. Call it before
// Run, or at least before the first session registers: sessions are
// grouped by token from then on.
func (b *Broker) SetFederation(f Federation, scoper Scoper) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fed = f
	b.scoper = nil
	if f == nil {
		return
	}
	if scoper == nil {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		scoper = func(scope string) string {
			if scope == "" {
				return ""
			}
			m := hmac.New(sha256.New, key)
			m.Write([]byte(scope))
			return hex.EncodeToString(m.Sum(nil))
		}
	}
	b.scoper = scoper
}

// scopeKey is the group key of a local session's scope (session.scope).
func (b *Broker) scopeKey(scope string) string {
	if b.scoper == nil || scope == "" {
		return scope
	}
	return b.scoper(scope)
}

// localSession describes a local session for other hosts. Called with mu
// held.
func (b *Broker) localSession(s *session) LocalSession {
	ls := LocalSession{ID: s.info.ID, Info: slices.Clone(s.infoRaw), PID: s.conn.peerPID}
	if b.scoper != nil {
		ls.ScopeToken = s.scope
	}
	return ls
}

// LocalSessions returns every local session (no proxies), in list order.
func (b *Broker) LocalSessions() []LocalSession {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := make([]*session, 0, len(b.sessions)-b.proxyCount)
	for _, s := range b.sessions {
		if s.proxyHost == "" {
			ss = append(ss, s)
		}
	}
	slices.SortFunc(ss, func(x, y *session) int { return cmp.Compare(x.order, y.order) })
	out := make([]LocalSession, len(ss))
	for i, s := range ss {
		out[i] = b.localSession(s)
	}
	return out
}

// proxyOf returns the proxy session id of host, or nil. Called with mu
// held.
func (b *Broker) proxyOf(host, id string) *session {
	if s := b.sessions[id]; s != nil && s.proxyHost == host && host != "" {
		return s
	}
	return nil
}

func (b *Broker) unindexProxy(s *session) {
	m := b.proxies[s.proxyHost]
	if m[s.info.ID] != s {
		return
	}
	delete(m, s.info.ID)
	if len(m) == 0 {
		delete(b.proxies, s.proxyHost)
	}
	b.proxyCount--
}

// AttachProxy adds the session info.ID of host, in the scope of
// scopeToken (a Scoper token; "" is unscoped), or refreshes the proxy host
// already has of it: in place, its audience hearing presence_update if its
// info changed, or session_left and session_joined if its scope did. The
// broker sets origin "remote", trustedLocal false and remoteHostId host.
// A proxy of another host with that id leaves as a closed socket first.
// Errors: ErrSessionIDTaken when a local session holds the id (the local
// one wins), ErrTooManyProxies, ErrNoFederation, or an empty host or id.
func (b *Broker) AttachProxy(host string, info wire.SessionInfo, scopeToken string) error {
	if host == "" || !validSessionID(info.ID) {
		return errors.New("attach proxy: empty host or session id")
	}
	info.TrustedLocal, info.Origin, info.RemoteHostID = false, "remote", host
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fed == nil {
		return ErrNoFederation
	}
	prev := b.sessions[info.ID]
	switch {
	case prev == nil:
	case prev.proxyHost == "":
		return ErrSessionIDTaken
	case prev.proxyHost == host:
		old := slices.Clone(prev.infoRaw)
		prev.info = info
		prev.refreshInfo()
		if prev.scope != scopeToken {
			b.broadcast(prev, wire.AppendSessionLeft(b.scratch[:0], info.ID))
			b.leaveScope(prev)
			prev.scope = scopeToken
			b.joinScope(prev)
			b.broadcast(prev, wire.AppendSessionJoined(b.scratch[:0], prev.infoRaw))
		} else if !bytes.Equal(old, prev.infoRaw) {
			b.broadcast(prev, wire.AppendPresenceUpdate(b.scratch[:0], prev.infoRaw))
		}
		return nil
	default:
		// The session moved to host: the old host's proxy is gone.
		b.removeSession(prev, true)
	}
	if b.proxyCount >= b.cfg.MaxSessions {
		return ErrTooManyProxies
	}
	s := &session{
		info:      info,
		scope:     scopeToken,
		proxyHost: host,
		conn:      &conn{b: b, proxy: true, sessionID: info.ID, deliveries: make(map[*delivery]struct{})},
	}
	s.refreshInfo()
	b.nextOrder++
	s.order = b.nextOrder
	b.sessions[info.ID] = s
	b.sessionDigests[b.keys.session(info.ID)]++
	m := b.proxies[host]
	if m == nil {
		m = make(map[string]*session)
		b.proxies[host] = m
	}
	m[info.ID] = s
	b.proxyCount++
	b.joinScope(s)
	b.broadcast(s, wire.AppendSessionJoined(b.scratch[:0], s.infoRaw))
	return nil
}

// UpdateProxy applies a presence change of host's session info.ID: its
// name, status, model and lastActivity. The audience hears presence_update
// when that changed the session's info. Unknown sessions are ignored.
func (b *Broker) UpdateProxy(host string, info wire.SessionInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.proxyOf(host, info.ID)
	if s == nil {
		return
	}
	old := slices.Clone(s.infoRaw)
	if info.HasName {
		if !s.info.HasName {
			s.info.Trailing = append(s.info.Trailing, "name")
		}
		s.info.Name, s.info.HasName = info.Name, true
	}
	if info.HasStatus {
		if !s.info.HasStatus {
			s.info.Trailing = append(s.info.Trailing, "status")
		}
		s.info.Status, s.info.HasStatus = info.Status, true
	}
	s.info.Model, s.info.LastActivity = info.Model, info.LastActivity
	s.refreshInfo()
	if !bytes.Equal(old, s.infoRaw) {
		b.broadcast(s, wire.AppendPresenceUpdate(b.scratch[:0], s.infoRaw))
	}
}

// DetachProxy removes host's session id as its home broker removed it:
// unregistered (an unregister without preserveAsks) cancels its ask edges,
// the local parties hearing ask_cancelled session_disconnected; otherwise
// its edges defer, as for a closed socket. Either way its audience hears
// session_left and deliveries to and from it fail RECIPIENT_DISCONNECTED
// and SENDER_DISCONNECTED.
func (b *Broker) DetachProxy(host, id string, unregistered bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.proxyOf(host, id); s != nil {
		b.removeSession(s, !unregistered)
	}
}

// DetachHost removes every proxy session of host as closed sockets
// (DetachProxy with unregistered false), in list order: the host is gone.
func (b *Broker) DetachHost(host string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := make([]*session, 0, len(b.proxies[host]))
	for _, s := range b.proxies[host] {
		ss = append(ss, s)
	}
	slices.SortFunc(ss, func(x, y *session) int { return cmp.Compare(x.order, y.order) })
	for _, s := range ss {
		b.removeSession(s, true)
	}
}

// ProxySend handles a send by host's session from as a send frame of its
// proxy session: {to, message}, message being the sender's message object
// byte for byte. What the sender would hear is reported through
// Federation.Outcome, with remoteDeliveryID: accepted once routed to a
// local session, delivered once it acknowledged, or failed. A target that
// is itself a proxy fails SESSION_NOT_FOUND: hosts route only to their own
// sessions.
func (b *Broker) ProxySend(host, from, to string, message []byte, remoteDeliveryID string) {
	frame := make([]byte, 0, len(`{"type":"send","to":,"message":}`)+len(to)+8+len(message))
	frame = append(frame, `{"type":"send","to":`...)
	frame = wire.AppendString(frame, to)
	frame = append(frame, `,"message":`...)
	frame = append(frame, message...)
	frame = append(frame, '}')
	env, err := wire.ParseEnvelope(frame)

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fed == nil || b.closing {
		return
	}
	origin := &proxyOrigin{host: host, deliveryID: remoteDeliveryID}
	if err != nil {
		b.stats.refused.Add(1)
		b.outcome(origin, from, "unknown", OutcomeFailed, false, wire.FailInvalidMessage, "Invalid message format")
		return
	}
	send := env.DecodeSend()
	s := b.proxyOf(host, from)
	if s == nil {
		// Its announcement has not arrived, or a local session holds the id.
		b.stats.refused.Add(1)
		b.outcome(origin, from, send.MessageID, OutcomeFailed, false, wire.FailSessionNotFound, "Sender is not a session of its host on the recipient's host")
		return
	}
	b.routeSend(s.conn, s, send, origin)
}

// outcome reports to a sender's host what became of its send. Called with
// mu held.
func (b *Broker) outcome(o *proxyOrigin, from, messageID string, kind OutcomeKind, accepted bool, code wire.FailureCode, reason string) {
	if b.fed == nil {
		return
	}
	b.fed.Outcome(Outcome{Host: o.host, From: from, MessageID: messageID, RemoteDeliveryID: o.deliveryID,
		Kind: kind, Accepted: accepted, Code: code, Reason: reason})
}

// forwarded returns the pending delivery deliveryID that went to a proxy
// session, or nil. Called with mu held.
func (b *Broker) forwarded(deliveryID string) *delivery {
	if d := b.deliveries.byID[deliveryID]; d != nil && d.forwarded {
		return d
	}
	return nil
}

// sayAccepted tells the sender of a forwarded delivery it was accepted,
// once. Called with mu held.
func (b *Broker) sayAccepted(d *delivery) {
	if d.accepted {
		return
	}
	d.accepted = true
	b.stats.accepted.Add(1)
	if sender := b.sessions[d.from]; sender != nil && sender.conn == d.sender {
		b.scratch = wire.AppendDeliveryAccepted(b.scratch[:0], d.messageID, d.id)
		sender.conn.send(b.scratch)
	}
}

// ForwardAccepted reports that the recipient's host routed the forwarded
// delivery deliveryID to the live recipient: its sender hears
// delivery_accepted (if its socket is the one that sent it).
func (b *Broker) ForwardAccepted(deliveryID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := b.forwarded(deliveryID); d != nil {
		b.sayAccepted(d)
	}
}

// ForwardDelivered reports that the recipient's inbox holds the forwarded
// delivery deliveryID: it completes as an acknowledgement does (the sender
// hears delivered, after delivery_accepted if that was not said yet; a
// reply answers its ask).
func (b *Broker) ForwardDelivered(deliveryID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := b.forwarded(deliveryID); d != nil {
		b.sayAccepted(d)
		b.completeDelivery(d)
	}
}

// ForwardFailed reports that the forwarded delivery deliveryID failed on
// the recipient's host with code and reason. accepted false (a refusal
// before routing) ends it as a refused send if its sender heard nothing
// yet: no ask edge stays, and a retry is a fresh send. Otherwise it fails
// as an accepted delivery does (delivery_failed accepted:true).
func (b *Broker) ForwardFailed(deliveryID string, accepted bool, code wire.FailureCode, reason string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.forwarded(deliveryID)
	if d == nil {
		return
	}
	if accepted || d.accepted {
		b.failDelivery(d, code, reason)
		return
	}
	b.deliveries.remove(d)
	if d.expectsReply {
		b.removeAskEdge(askKey(d.from, d.messageID), "")
	}
	b.recent.put(recentRecord{key: d.key, fp: fpPrefix(&d.fingerprint), to: b.keys.session(d.to), meta: recentRetryable}, time.Now())
	b.stats.refused.Add(1)
	if sender := b.sessions[d.from]; sender != nil && sender.conn == d.sender {
		b.scratch = wire.AppendDeliveryFailed(b.scratch[:0], d.messageID, false, code, reason)
		sender.conn.send(b.scratch)
	}
}

// askControlToHost tells the recipient's host of a defer or cancel by the
// local asker of e, when the recipient is a proxy session. Called with mu
// held.
func (b *Broker) askControlToHost(e *askEdge, action string) {
	if r := b.sessions[e.to]; r != nil && r.proxyHost != "" && b.fed != nil {
		b.fed.AskControl(AskControl{Host: r.proxyHost, Action: action, From: e.from, To: e.to, MessageID: e.messageID})
	}
}

// ProxyAskControl applies a defer_ask or cancel_ask (action "defer" or
// "cancel") by host's session from to its edge of messageID here: the
// local recipient hears ask_deferred, or ask_cancelled with reason
// cancelled. Unknown edges, and ids a local session holds, are ignored.
func (b *Broker) ProxyAskControl(host, from, action, messageID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[from]; s != nil && s.proxyHost != host {
		return
	}
	key := askKey(from, messageID)
	e := b.asks.byKey[key]
	if e == nil {
		return
	}
	switch action {
	case "defer":
		if !e.deferred {
			e.deferred = true
			b.persister.mark()
			b.notify(e.to, wire.AppendAskDeferred(b.scratch[:0], e.messageID, e.from))
		}
	case "cancel":
		b.removeAskEdge(key, wire.AskCancelled)
	}
}
