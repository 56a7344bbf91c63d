package federation

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// LocalBroker is what the bridge needs of this host's v4 broker
// (*broker.Broker). The bridge calls it from its own goroutine, never
// under the broker's lock.
type LocalBroker interface {
	LocalSessions() []broker.LocalSession
	AttachProxy(host string, info wire.SessionInfo, scopeToken string) error
	UpdateProxy(host string, info wire.SessionInfo)
	DetachProxy(host, id string, unregistered bool)
	DetachHost(host string)
	ProxySend(host, from, to string, message []byte, remoteDeliveryID string)
	ForwardAccepted(deliveryID string)
	ForwardDelivered(deliveryID string)
	ForwardFailed(deliveryID string, accepted bool, code wire.FailureCode, reason string)
	ProxyAskControl(host, from, action, messageID string)
}

// Timing of the bridge's acked requests: resent every retryInterval
// while the peer host is live, given up after retryMaxAge (the broker
// times the delivery out on its own well before).
const (
	retryInterval = time.Second
	retryMaxAge   = 5 * time.Minute
	dedupTTL      = 10 * time.Minute
)

// Bodies on the wire (docs/federation.md "Subjects").
type (
	sessionsMsg struct {
		Version      uint64          `json:"version"`
		Kind         string          `json:"kind"` // joined, presence, left
		ID           string          `json:"id"`
		Info         json.RawMessage `json:"info,omitempty"`
		ScopeToken   string          `json:"scopeToken,omitempty"`
		Unregistered bool            `json:"unregistered,omitempty"`
	}
	snapshotSession struct {
		ID         string          `json:"id"`
		Info       json.RawMessage `json:"info"`
		ScopeToken string          `json:"scopeToken,omitempty"`
	}
	snapshotMsg struct {
		Version  uint64            `json:"version"`
		Sessions []snapshotSession `json:"sessions"`
	}
	deliverMsg struct {
		FromHost   string          `json:"fromHost"`
		DeliveryID string          `json:"deliveryId"`
		From       string          `json:"from"`
		FromInfo   json.RawMessage `json:"fromInfo"`
		// FromScopeToken and SessionsVersion let the recipient's host
		// attach the sender's proxy before its announcement arrives.
		FromScopeToken  string `json:"fromScopeToken,omitempty"`
		SessionsVersion uint64 `json:"sessionsVersion"`
		To              string `json:"to"`
		// Message is the sender's message object, byte for byte.
		Message []byte `json:"message"`
	}
	outcomeMsg struct {
		FromHost         string `json:"fromHost"`
		RemoteDeliveryID string `json:"remoteDeliveryId"`
		From             string `json:"from"`
		MessageID        string `json:"messageId"`
		Kind             string `json:"kind"` // accepted, delivered, failed
		Accepted         bool   `json:"accepted,omitempty"`
		Code             string `json:"code,omitempty"`
		Reason           string `json:"reason,omitempty"`
	}
	askMsg struct {
		FromHost  string `json:"fromHost"`
		Action    string `json:"action"`
		From      string `json:"from"`
		To        string `json:"to"`
		MessageID string `json:"messageId"`
	}
)

var ackBody = []byte(`{"ok":true}`)

// Bridge joins the local broker to the other hosts over a Link: it
// implements broker.Federation. Its Federation methods only queue; one
// goroutine does all the NATS work and calls the broker.
type Bridge struct {
	// TeamScope, set before Start, is the scope of the named team of
	// share.teams (the node reads named-teams.json through teams); nil
	// shares no team, as a team that does not exist.
	TeamScope func(team string) (scope string, err error)

	link *Link
	b    LocalBroker
	cfg  *Config
	log  *slog.Logger

	qmu    sync.Mutex
	queue  []func()
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed bool

	// Owned by the goroutine; mu guards them for Status.
	mu        sync.Mutex
	version   uint64
	shared    map[string]broker.LocalSession // announced local sessions
	explicit  map[string]bool                // Share(id)
	talkers   map[string]bool                // sent to another host: announced so replies find them
	remote    map[string]*remoteHost
	hidden    map[string]string // id → host of remote sessions a local one hides
	pending   map[string]*outgoing
	seq       uint64
	inbox     string
	seen      map[string]time.Time // dedup of received deliver, outcome, ask
	scopeToks map[string]bool      // tokens of share.scopes
	subs      []*nats.Subscription
}

type remoteHost struct {
	version    uint64
	synced     bool // a snapshot was applied
	snapshotAt time.Time
	sessions   map[string]bool
}

// outgoing is an acked request (deliver, outcome, ask) or a snapshot
// request, resent until answered.
type outgoing struct {
	host     string
	subject  string
	body     []byte
	first    time.Time
	sent     time.Time
	snapshot bool
}

// NewBridge builds the bridge of link and the local broker b. Hand it to
// the broker with b.SetFederation(bridge, cfg.Scoper()) before the broker
// runs, then call Start. logger nil discards; no scope or scope token is
// logged.
func NewBridge(link *Link, b LocalBroker, cfg *Config, logger *slog.Logger) *Bridge {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	br := &Bridge{
		link: link, b: b, cfg: cfg, log: logger.With("node", cfg.Name),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		shared: map[string]broker.LocalSession{}, explicit: map[string]bool{}, talkers: map[string]bool{},
		remote: map[string]*remoteHost{}, hidden: map[string]string{}, pending: map[string]*outgoing{},
		seen: map[string]time.Time{}, scopeToks: map[string]bool{},
	}
	for _, s := range cfg.Share.Scopes {
		br.scopeToks[ScopeToken(cfg.ClusterKey, s)] = true
	}
	return br
}

// Start subscribes to this host's subjects and the other hosts'
// announcements, hooks the link's host events and announces the local
// sessions already shared. Call it once, after the link joined.
func (br *Bridge) Start() error {
	nc := br.link.Conn()
	br.inbox = nc.NewRespInbox()
	push := func(f func(m *nats.Msg)) nats.MsgHandler {
		return func(m *nats.Msg) { br.enqueue(func() { f(m) }) }
	}
	subs := []struct {
		subj string
		h    func(*nats.Msg)
	}{
		{br.inbox + ".*", br.onReply},
		// One subscription for this host's subjects keeps a sender's
		// deliver, outcome and ask in the order sent.
		{br.link.Subject(br.link.Self(), "*"), br.onHostSubject},
		{br.link.Prefix() + ".host.*.sessions", br.onSessions},
	}
	for _, s := range subs {
		sub, err := nc.Subscribe(s.subj, push(s.h))
		if err != nil {
			br.unsubscribe()
			return fmt.Errorf("subscribe %s: %w", s.subj, err)
		}
		br.subs = append(br.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		br.unsubscribe()
		return ErrLinkDown
	}
	br.link.Watch(HostWatcher{
		OnHostUp:   func(h HostInfo) { br.enqueue(func() { br.hostUp(h) }) },
		OnHostDown: func(h HostInfo) { br.enqueue(func() { br.hostDown(h) }) },
		OnHostBeat: func(h HostInfo) { br.enqueue(func() { br.hostBeat(h) }) },
	})
	go br.run()
	br.enqueue(br.reshare)
	for _, h := range br.link.LiveHosts() {
		br.enqueue(func() { br.hostUp(h) })
	}
	return nil
}

func (br *Bridge) unsubscribe() {
	for _, s := range br.subs {
		_ = s.Unsubscribe()
	}
	br.subs = nil
}

// Close stops the bridge (the link stays open: close it after).
func (br *Bridge) Close() {
	br.qmu.Lock()
	if br.closed {
		br.qmu.Unlock()
		return
	}
	br.closed = true
	close(br.stop)
	br.qmu.Unlock()
	<-br.done
	br.unsubscribe()
}

func (br *Bridge) enqueue(f func()) {
	br.qmu.Lock()
	if !br.closed {
		br.queue = append(br.queue, f)
	}
	br.qmu.Unlock()
	select {
	case br.wake <- struct{}{}:
	default:
	}
}

func (br *Bridge) run() {
	defer close(br.done)
	tick := time.NewTicker(retryInterval / 4)
	defer tick.Stop()
	for {
		select {
		case <-br.stop:
			return
		case <-br.wake:
		case <-tick.C:
			br.mu.Lock()
			br.retry()
			br.mu.Unlock()
		}
		for {
			br.qmu.Lock()
			q := br.queue
			br.queue = nil
			br.qmu.Unlock()
			if len(q) == 0 {
				break
			}
			br.mu.Lock()
			for _, f := range q {
				f()
			}
			br.mu.Unlock()
		}
	}
}

// ---- broker.Federation: called under the broker's lock, queue only.

// LocalJoined implements broker.Federation.
func (br *Bridge) LocalJoined(s broker.LocalSession) {
	s.Info = append([]byte(nil), s.Info...)
	br.enqueue(func() { br.localJoined(s) })
}

// LocalPresence implements broker.Federation.
func (br *Bridge) LocalPresence(s broker.LocalSession) {
	s.Info = append([]byte(nil), s.Info...)
	br.enqueue(func() { br.localPresence(s) })
}

// LocalLeft implements broker.Federation.
func (br *Bridge) LocalLeft(id string, unregistered bool) {
	br.enqueue(func() { br.localLeft(id, unregistered) })
}

// Forward implements broker.Federation.
func (br *Bridge) Forward(f broker.Forward) { br.enqueue(func() { br.forward(f) }) }

// Outcome implements broker.Federation.
func (br *Bridge) Outcome(o broker.Outcome) { br.enqueue(func() { br.outcome(o) }) }

// AskControl implements broker.Federation.
func (br *Bridge) AskControl(a broker.AskControl) { br.enqueue(func() { br.askControl(a) }) }

// Share announces the local session id to the other hosts from now on
// (the local API op "share"), until Unshare or its unregistering.
func (br *Bridge) Share(id string) {
	br.enqueue(func() { br.explicit[id] = true; br.reshare() })
}

// Unshare stops announcing id unless node.toml shares it.
func (br *Bridge) Unshare(id string) {
	br.enqueue(func() { delete(br.explicit, id); delete(br.talkers, id); br.reshare() })
}

var _ broker.Federation = (*Bridge)(nil)

// ---- local sessions

// isShared decides whether a local session is announced.
func (br *Bridge) isShared(s broker.LocalSession) bool {
	if br.explicit[s.ID] || br.talkers[s.ID] {
		return true
	}
	name := infoName(s.Info)
	for _, g := range br.cfg.Share.Sessions {
		if ok, _ := path.Match(g, s.ID); ok {
			return true
		}
		if ok, _ := path.Match(g, name); ok && name != "" {
			return true
		}
	}
	if s.ScopeToken == "" {
		return false
	}
	if br.scopeToks[s.ScopeToken] {
		return true
	}
	if br.TeamScope != nil {
		for _, t := range br.cfg.Share.Teams {
			if scope, err := br.TeamScope(t); err == nil && ScopeToken(br.cfg.ClusterKey, scope) == s.ScopeToken {
				return true
			}
		}
	}
	return false
}

func infoName(info []byte) string {
	var v struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(info, &v)
	return v.Name
}

// reshare decides every local session again (after Share, Unshare or at
// start).
func (br *Bridge) reshare() {
	live := map[string]bool{}
	for _, s := range br.b.LocalSessions() {
		live[s.ID] = true
		br.localJoined(s)
	}
	for id := range br.shared {
		if !live[id] {
			br.localLeft(id, false)
		}
	}
}

func (br *Bridge) localJoined(s broker.LocalSession) {
	for host, r := range br.remote {
		if r.sessions[s.ID] {
			// The broker replaced that host's proxy with this local
			// session (a local id wins): hidden until the local one
			// leaves (localLeft).
			delete(r.sessions, s.ID)
			br.hide(host, s.ID)
		}
	}
	old, was := br.shared[s.ID]
	if !br.isShared(s) {
		if was {
			delete(br.shared, s.ID)
			br.announce(sessionsMsg{Kind: "left", ID: s.ID})
		}
		return
	}
	if was && string(old.Info) == string(s.Info) && old.ScopeToken == s.ScopeToken {
		return
	}
	br.shared[s.ID] = s
	br.announce(sessionsMsg{Kind: "joined", ID: s.ID, Info: s.Info, ScopeToken: s.ScopeToken})
}

func (br *Bridge) localPresence(s broker.LocalSession) {
	old, ok := br.shared[s.ID]
	if !ok {
		return
	}
	s.ScopeToken = old.ScopeToken
	br.shared[s.ID] = s
	br.announce(sessionsMsg{Kind: "presence", ID: s.ID, Info: s.Info})
}

func (br *Bridge) localLeft(id string, unregistered bool) {
	if unregistered {
		delete(br.explicit, id)
		delete(br.talkers, id)
	}
	if host, ok := br.hidden[id]; ok && br.remote[host] != nil {
		// The remote session it hid is shown again: its host's snapshot
		// has its info (attach).
		br.requestSnapshot(host)
	}
	if _, ok := br.shared[id]; !ok {
		return
	}
	delete(br.shared, id)
	br.announce(sessionsMsg{Kind: "left", ID: id, Unregistered: unregistered})
}

func (br *Bridge) announce(m sessionsMsg) {
	br.version++
	m.Version = br.version
	br.link.SetSessionsVersion(br.version)
	body, _ := json.Marshal(m)
	if err := br.link.Conn().Publish(br.link.Subject(br.link.Self(), "sessions"), body); err != nil {
		br.log.Warn("announce a session", "session", m.ID, "kind", m.Kind, "err", err)
	}
}

func (br *Bridge) snapshotBody() []byte {
	snap := snapshotMsg{Version: br.version, Sessions: []snapshotSession{}}
	for _, s := range br.shared {
		snap.Sessions = append(snap.Sessions, snapshotSession{ID: s.ID, Info: s.Info, ScopeToken: s.ScopeToken})
	}
	sort.Slice(snap.Sessions, func(i, j int) bool { return snap.Sessions[i].ID < snap.Sessions[j].ID })
	body, _ := json.Marshal(snap)
	return body
}

// ---- other hosts' sessions

func (br *Bridge) hostOf(subject, suffix string) string {
	rest := strings.TrimPrefix(subject, br.link.Prefix()+".host.")
	return strings.TrimSuffix(rest, "."+suffix)
}

func (br *Bridge) hostUp(h HostInfo) {
	if !br.link.IsLive(h.Host) {
		return
	}
	if br.remote[h.Host] == nil {
		br.remote[h.Host] = &remoteHost{sessions: map[string]bool{}}
	}
	br.requestSnapshot(h.Host)
}

func (br *Bridge) hostDown(h HostInfo) {
	r := br.remote[h.Host]
	delete(br.remote, h.Host)
	for id, host := range br.hidden {
		if host == h.Host {
			delete(br.hidden, id)
		}
	}
	for k, o := range br.pending {
		if o.host == h.Host {
			delete(br.pending, k)
		}
	}
	if r != nil {
		br.b.DetachHost(h.Host)
	}
}

func (br *Bridge) hostBeat(h HostInfo) {
	r := br.remote[h.Host]
	if r == nil {
		br.hostUp(h)
		return
	}
	if r.synced && h.SessionsVersion != r.version && !br.snapshotPending(h.Host) {
		br.requestSnapshot(h.Host)
	}
}

func (br *Bridge) snapshotPending(host string) bool {
	for _, o := range br.pending {
		if o.snapshot && o.host == host {
			return true
		}
	}
	return false
}

func (br *Bridge) requestSnapshot(host string) {
	if br.snapshotPending(host) {
		return
	}
	br.send(&outgoing{host: host, subject: br.link.Subject(host, "snapshot"), body: []byte(`{}`), snapshot: true})
}

func (br *Bridge) onSessions(m *nats.Msg) {
	host := br.hostOf(m.Subject, "sessions")
	r := br.remote[host]
	if host == br.link.Self() || r == nil {
		return // not live yet: its snapshot comes on host up
	}
	var s sessionsMsg
	if err := json.Unmarshal(m.Data, &s); err != nil {
		br.log.Warn("bad sessions announcement", "host", host, "err", err)
		return
	}
	switch {
	case !r.synced:
		br.requestSnapshot(host)
		return
	case s.Version <= r.version:
		return // the snapshot had it
	case s.Version != r.version+1:
		br.requestSnapshot(host) // a gap: apply this one, the snapshot settles the rest
	}
	r.version = s.Version
	switch s.Kind {
	case "joined":
		br.attach(host, r, s.ID, s.Info, s.ScopeToken)
	case "presence":
		if r.sessions[s.ID] {
			if info, err := decodeInfo(s.Info); err == nil {
				br.b.UpdateProxy(host, info)
			}
		}
	case "left":
		br.detach(host, r, s.ID, s.Unregistered)
	}
}

func decodeInfo(raw []byte) (wire.SessionInfo, error) {
	info, err := wire.DecodeSessionInfo(raw)
	info.Origin, info.TrustedLocal, info.Trailing = "remote", false, nil
	return info, err
}

func (br *Bridge) attach(host string, r *remoteHost, id string, raw json.RawMessage, token string) {
	info, err := decodeInfo(raw)
	if err != nil || info.ID != id {
		br.log.Warn("bad session info", "host", host, "session", id, "err", err)
		return
	}
	info.RemoteHostID = host
	err = br.b.AttachProxy(host, info, token)
	switch {
	case errors.Is(err, broker.ErrSessionIDTaken):
		br.hide(host, id)
		delete(r.sessions, id)
	case err != nil:
		br.log.Warn("attach a session of another host", "host", host, "session", id, "err", err)
	default:
		delete(br.hidden, id)
		r.sessions[id] = true
	}
}

// hide notes that a local session holds id, which host announced: the
// remote session is not shown (Status says so).
func (br *Bridge) hide(host, id string) {
	if br.hidden[id] != host {
		br.log.Warn("a local session holds the id of another host's session: the remote one is not shown", "host", host, "session", id)
	}
	br.hidden[id] = host
}

func (br *Bridge) detach(host string, r *remoteHost, id string, unregistered bool) {
	if br.hidden[id] == host {
		delete(br.hidden, id)
	}
	if r.sessions[id] {
		delete(r.sessions, id)
		br.b.DetachProxy(host, id, unregistered)
	}
}

func (br *Bridge) applySnapshot(host string, data []byte) {
	r := br.remote[host]
	if r == nil {
		return
	}
	var snap snapshotMsg
	if err := json.Unmarshal(data, &snap); err != nil {
		br.log.Warn("bad snapshot", "host", host, "err", err)
		return
	}
	in := map[string]bool{}
	for _, s := range snap.Sessions {
		in[s.ID] = true
		br.attach(host, r, s.ID, s.Info, s.ScopeToken)
	}
	for id := range r.sessions {
		if !in[id] {
			br.detach(host, r, id, false)
		}
	}
	for id, h := range br.hidden {
		if h == host && !in[id] {
			delete(br.hidden, id)
		}
	}
	stale := r.synced && snap.Version < r.version
	r.version, r.synced, r.snapshotAt = snap.Version, true, time.Now()
	if stale {
		// Announcements newer than the snapshot were applied before it
		// arrived: ask again rather than keep the older state.
		br.requestSnapshot(host)
	}
}

// ---- requests to other hosts

func (br *Bridge) send(o *outgoing) {
	br.seq++
	key := strconv.FormatUint(br.seq, 36)
	o.first = time.Now()
	br.pending[key] = o
	br.publish(key, o)
}

func (br *Bridge) publish(key string, o *outgoing) {
	o.sent = time.Now()
	if err := br.link.Conn().PublishRequest(o.subject, br.inbox+"."+key, o.body); err != nil && !errors.Is(err, nats.ErrReconnectBufExceeded) {
		br.log.Debug("send to host", "host", o.host, "err", err)
	}
}

// retry resends what is unanswered while its host is live.
func (br *Bridge) retry() {
	now := time.Now()
	for k, o := range br.pending {
		switch {
		case !br.link.IsLive(o.host) || now.Sub(o.first) > retryMaxAge:
			delete(br.pending, k)
		case now.Sub(o.sent) >= retryInterval:
			br.publish(k, o)
		}
	}
	for k, t := range br.seen {
		if now.Sub(t) > dedupTTL {
			delete(br.seen, k)
		}
	}
}

func (br *Bridge) onReply(m *nats.Msg) {
	key := strings.TrimPrefix(m.Subject, br.inbox+".")
	o := br.pending[key]
	if o == nil {
		return
	}
	if m.Header.Get("Status") == "503" {
		return // no responder (the host's bridge not subscribed yet): retried
	}
	delete(br.pending, key)
	if o.snapshot {
		br.applySnapshot(o.host, m.Data)
	}
}

func (br *Bridge) localInfo(id string) (broker.LocalSession, bool) {
	if s, ok := br.shared[id]; ok {
		return s, true
	}
	for _, s := range br.b.LocalSessions() {
		if s.ID == id {
			return s, true
		}
	}
	return broker.LocalSession{}, false
}

func (br *Bridge) forward(f broker.Forward) {
	// The sender becomes known to the recipient's host so the reply and
	// the outcomes find it.
	if _, ok := br.shared[f.From]; !ok {
		br.talkers[f.From] = true
		if s, ok := br.localInfo(f.From); ok {
			br.localJoined(s)
		}
	}
	token := ""
	if s, ok := br.shared[f.From]; ok {
		token = s.ScopeToken
	}
	body, _ := json.Marshal(deliverMsg{
		FromHost: br.link.Self(), DeliveryID: f.DeliveryID, From: f.From, FromInfo: f.FromInfo,
		FromScopeToken: token, SessionsVersion: br.version, To: f.To, Message: f.Message,
	})
	br.send(&outgoing{host: f.Host, subject: br.link.Subject(f.Host, "deliver"), body: body})
}

var outcomeKinds = map[broker.OutcomeKind]string{
	broker.OutcomeAccepted: "accepted", broker.OutcomeDelivered: "delivered", broker.OutcomeFailed: "failed",
}

func (br *Bridge) outcome(o broker.Outcome) {
	body, _ := json.Marshal(outcomeMsg{
		FromHost: br.link.Self(), RemoteDeliveryID: o.RemoteDeliveryID, From: o.From, MessageID: o.MessageID,
		Kind: outcomeKinds[o.Kind], Accepted: o.Accepted, Code: string(o.Code), Reason: o.Reason,
	})
	br.send(&outgoing{host: o.Host, subject: br.link.Subject(o.Host, "outcome"), body: body})
}

func (br *Bridge) askControl(a broker.AskControl) {
	body, _ := json.Marshal(askMsg{FromHost: br.link.Self(), Action: a.Action, From: a.From, To: a.To, MessageID: a.MessageID})
	br.send(&outgoing{host: a.Host, subject: br.link.Subject(a.Host, "ask"), body: body})
}

// ---- requests from other hosts

func (br *Bridge) onHostSubject(m *nats.Msg) {
	switch m.Subject[strings.LastIndexByte(m.Subject, '.')+1:] {
	case "snapshot":
		_ = m.Respond(br.snapshotBody())
	case "deliver":
		br.onDeliver(m)
	case "outcome":
		br.onOutcome(m)
	case "ask":
		br.onAsk(m)
	}
}

// firstTime records key and reports whether it is new (dedup of retried
// requests).
func (br *Bridge) firstTime(key string) bool {
	if _, dup := br.seen[key]; dup {
		return false
	}
	br.seen[key] = time.Now()
	return true
}

func (br *Bridge) onDeliver(m *nats.Msg) {
	var d deliverMsg
	if err := json.Unmarshal(m.Data, &d); err != nil || !br.link.IsLive(d.FromHost) {
		return // unanswered: a host not live here retries until it is
	}
	if br.firstTime("d\x00" + d.FromHost + "\x00" + d.DeliveryID) {
		r := br.remote[d.FromHost]
		if r != nil && !r.sessions[d.From] && (!r.synced || r.version <= d.SessionsVersion) {
			br.attach(d.FromHost, r, d.From, d.FromInfo, d.FromScopeToken)
		}
		br.b.ProxySend(d.FromHost, d.From, d.To, d.Message, d.DeliveryID)
	}
	_ = m.Respond(ackBody)
}

func (br *Bridge) onOutcome(m *nats.Msg) {
	var o outcomeMsg
	if err := json.Unmarshal(m.Data, &o); err != nil {
		return
	}
	if br.firstTime("o\x00" + o.FromHost + "\x00" + o.RemoteDeliveryID + "\x00" + o.Kind) {
		switch o.Kind {
		case "accepted":
			br.b.ForwardAccepted(o.RemoteDeliveryID)
		case "delivered":
			br.b.ForwardDelivered(o.RemoteDeliveryID)
		case "failed":
			br.b.ForwardFailed(o.RemoteDeliveryID, o.Accepted, wire.FailureCode(o.Code), o.Reason)
		}
	}
	_ = m.Respond(ackBody)
}

func (br *Bridge) onAsk(m *nats.Msg) {
	var a askMsg
	if err := json.Unmarshal(m.Data, &a); err != nil || (a.Action != "defer" && a.Action != "cancel") {
		return
	}
	if br.firstTime("a\x00" + a.FromHost + "\x00" + a.From + "\x00" + a.MessageID + "\x00" + a.Action) {
		br.b.ProxyAskControl(a.FromHost, a.From, a.Action, a.MessageID)
	}
	_ = m.Respond(ackBody)
}

// ---- status

// Status is what `intercom status` and doctor say about routing across
// hosts.
type Status struct {
	On     bool   `json:"on"`
	Reason string `json:"reason,omitempty"` // why it is off
	Prefix string `json:"prefix,omitempty"`
	Node   string `json:"node,omitempty"`
	// Link is the NATS link: "connected", "reconnecting" or "closed".
	Link      string   `json:"link,omitempty"`
	LiveHosts []string `json:"liveHosts"`
	// SharedSessions counts local sessions announced to other hosts,
	// RemoteSessions other hosts' sessions shown here.
	SharedSessions int `json:"sharedSessions"`
	RemoteSessions int `json:"remoteSessions"`
	// HiddenCollisions are ids of remote sessions not shown because a
	// local session holds the id.
	HiddenCollisions []string `json:"hiddenCollisions"`
}

// Status reports the bridge now.
func (br *Bridge) Status() Status {
	br.mu.Lock()
	defer br.mu.Unlock()
	st := Status{On: true, Prefix: br.link.Prefix(), Node: br.link.Self(), Link: br.link.State(),
		LiveHosts: []string{}, SharedSessions: len(br.shared), HiddenCollisions: []string{}}
	for _, h := range br.link.LiveHosts() {
		st.LiveHosts = append(st.LiveHosts, h.Host)
	}
	for _, r := range br.remote {
		st.RemoteSessions += len(r.sessions)
	}
	for id := range br.hidden {
		st.HiddenCollisions = append(st.HiddenCollisions, id)
	}
	sort.Strings(st.HiddenCollisions)
	if st.Link != "connected" {
		st.On, st.Reason = false, "NATS link "+st.Link
	}
	return st
}

// StatusLine renders s as `intercom status` prints it:
// "Multi-node routing: on (nats, prefix P), N other hosts live" or
// "Multi-node routing: off (why)"; hidden collisions follow on the same
// line.
func StatusLine(s Status) string {
	if !s.On {
		why := s.Reason
		if why == "" {
			why = "not configured"
		}
		return "Multi-node routing: off (" + why + ")"
	}
	n := len(s.LiveHosts)
	hosts := "hosts"
	if n == 1 {
		hosts = "host"
	}
	line := fmt.Sprintf("Multi-node routing: on (nats, prefix %s), %d other %s live", s.Prefix, n, hosts)
	if len(s.HiddenCollisions) > 0 {
		line += fmt.Sprintf("; %d remote session(s) hidden by local ids: %s", len(s.HiddenCollisions), strings.Join(s.HiddenCollisions, ", "))
	}
	return line
}
