package federation_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// fakeBroker stands in for *broker.Broker where the bridge alone is under
// test. It keeps what the real one keeps for these calls — local
// sessions, proxy sessions by host, forwarded deliveries, dedup of
// injected sends by sender and message id — and reports to the
// Federation as the real one does; a local recipient acknowledges at
// once.
type fakeBroker struct {
	mu      sync.Mutex
	cond    *sync.Cond
	fed     broker.Federation
	scoper  func(string) string
	local   map[string]broker.LocalSession
	proxies map[string]fakeProxy
	// forwards are deliveries to proxies, by deliveryId, with what the
	// sender heard.
	forwards map[string]*fakeForward
	inbox    map[string][]string // local id → message objects received
	seenMsg  map[string]bool     // from/messageId of injected sends
	log      []string
	nextID   int
}

type fakeProxy struct {
	host  string
	info  wire.SessionInfo
	token string
}

type fakeForward struct {
	to    string
	heard []string // "accepted", "delivered", "failed CODE"
}

func newFakeBroker(scoper func(string) string) *fakeBroker {
	f := &fakeBroker{scoper: scoper, local: map[string]broker.LocalSession{}, proxies: map[string]fakeProxy{},
		forwards: map[string]*fakeForward{}, inbox: map[string][]string{}, seenMsg: map[string]bool{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *fakeBroker) record(format string, args ...any) {
	f.log = append(f.log, fmt.Sprintf(format, args...))
	f.cond.Broadcast()
}

// register is a local client registering (id, name, scope).
func (f *fakeBroker) register(id, name, scope string) {
	info := wire.SessionInfo{ID: id, Name: name, HasName: name != "", Cwd: "/w", Model: "cli", PID: 42,
		StartedAt: 1, LastActivity: 2, TrustedLocal: true, Origin: "local"}
	s := broker.LocalSession{ID: id, Info: info.AppendJSON(nil), ScopeToken: f.scoper(scope), PID: 42}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local[id] = s
	f.fed.LocalJoined(s)
}

func (f *fakeBroker) leave(id string, unregistered bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.local, id)
	f.fed.LocalLeft(id, unregistered)
}

// send is a local client's send to a proxy session; it returns the
// deliveryId.
func (f *fakeBroker) send(from, to, messageID, text string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.proxies[to]
	if !ok {
		panic("send to a session that is not a proxy: " + to)
	}
	f.nextID++
	id := fmt.Sprintf("d%d", f.nextID)
	f.forwards[id] = &fakeForward{to: to}
	msg := fmt.Sprintf(`{"id":%q,"text":%q,"expectsReply":false}`, messageID, text)
	f.fed.Forward(broker.Forward{Host: p.host, DeliveryID: id, From: from, To: to, FromInfo: f.local[from].Info, Message: []byte(msg)})
	return id
}

func (f *fakeBroker) LocalSessions() []broker.LocalSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []broker.LocalSession
	for _, s := range f.local {
		out = append(out, s)
	}
	return out
}

func (f *fakeBroker) AttachProxy(host string, info wire.SessionInfo, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.local[info.ID]; ok {
		f.record("taken %s %s", host, info.ID)
		return broker.ErrSessionIDTaken
	}
	if info.Origin != "remote" || info.TrustedLocal || info.RemoteHostID != host {
		return fmt.Errorf("proxy info origin %q trustedLocal %v remoteHostId %q", info.Origin, info.TrustedLocal, info.RemoteHostID)
	}
	f.proxies[info.ID] = fakeProxy{host: host, info: info, token: token}
	f.record("attach %s %s", host, info.ID)
	return nil
}

func (f *fakeBroker) UpdateProxy(host string, info wire.SessionInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.proxies[info.ID]; ok && p.host == host {
		p.info = info
		f.proxies[info.ID] = p
		f.record("update %s %s %s", host, info.ID, info.Status)
	}
}

func (f *fakeBroker) detachLocked(host, id string, unregistered bool) {
	if p, ok := f.proxies[id]; !ok || p.host != host {
		return
	}
	delete(f.proxies, id)
	f.record("detach %s %s %v", host, id, unregistered)
	for did, fw := range f.forwards {
		if fw.to == id && !fw.done() {
			fw.heard = append(fw.heard, "failed "+string(wire.FailRecipientDisconnected))
			f.record("failed %s", did)
		}
	}
}

func (f *fakeBroker) DetachProxy(host, id string, unregistered bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detachLocked(host, id, unregistered)
}

func (f *fakeBroker) DetachHost(host string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("detach host %s", host)
	for id := range f.proxies {
		f.detachLocked(host, id, false)
	}
}

func (f *fakeBroker) ProxySend(host, from, to string, message []byte, remoteDeliveryID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var m struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(message, &m)
	o := broker.Outcome{Host: host, From: from, MessageID: m.ID, RemoteDeliveryID: remoteDeliveryID}
	if p, ok := f.proxies[from]; !ok || p.host != host {
		o.Kind, o.Code = broker.OutcomeFailed, wire.FailSessionNotFound
		f.fed.Outcome(o)
		return
	}
	if _, ok := f.local[to]; !ok {
		o.Kind, o.Code = broker.OutcomeFailed, wire.FailSessionNotFound
		f.fed.Outcome(o)
		return
	}
	if f.seenMsg[from+"/"+m.ID] {
		return // a duplicate by message id: the first delivery reports
	}
	f.seenMsg[from+"/"+m.ID] = true
	f.inbox[to] = append(f.inbox[to], string(message))
	f.record("inbox %s %s", to, m.ID)
	o.Kind = broker.OutcomeAccepted
	f.fed.Outcome(o)
	o.Kind = broker.OutcomeDelivered
	f.fed.Outcome(o)
}

func (fw *fakeForward) done() bool {
	for _, h := range fw.heard {
		if h == "delivered" || strings.HasPrefix(h, "failed") {
			return true
		}
	}
	return false
}

func (f *fakeBroker) hear(deliveryID, what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fw := f.forwards[deliveryID]; fw != nil && !fw.done() {
		fw.heard = append(fw.heard, what)
		f.record("%s %s", what, deliveryID)
	}
}

func (f *fakeBroker) ForwardAccepted(id string)  { f.hear(id, "accepted") }
func (f *fakeBroker) ForwardDelivered(id string) { f.hear(id, "delivered") }
func (f *fakeBroker) ForwardFailed(id string, accepted bool, code wire.FailureCode, reason string) {
	f.hear(id, "failed "+string(code))
}

func (f *fakeBroker) ProxyAskControl(host, from, action, messageID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("ask %s %s %s %s", host, from, action, messageID)
}

// waitFor waits until cond holds (checked under the fake's lock).
func (f *fakeBroker) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timer := time.AfterFunc(hangGuard, func() { f.mu.Lock(); f.record("hang guard"); f.mu.Unlock() })
	defer timer.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for !cond() {
		if len(f.log) > 0 && f.log[len(f.log)-1] == "hang guard" {
			t.Fatalf("waited for %s; calls: %v", what, f.log)
		}
		f.cond.Wait()
	}
}

func (f *fakeBroker) has(entry string) bool {
	for _, e := range f.log {
		if e == entry {
			return true
		}
	}
	return false
}

func (f *fakeBroker) count(entry string) int {
	n := 0
	for _, e := range f.log {
		if e == entry {
			n++
		}
	}
	return n
}
