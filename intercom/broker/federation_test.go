package broker_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Two brokers in one process joined through an in-memory Federation: each
// call a broker makes (under its lock) is queued on a one-way link and run
// in order on the link's goroutine against the other broker, as the NATS
// bridge carries them.

const testClusterKey = "0123456789abcdef0123456789abcdef"

// testScoper is the bridge's token: HMAC-SHA256 of the scope under the
// cluster key (docs/federation.md).
func testScoper(scope string) string {
	if scope == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(testClusterKey))
	m.Write([]byte("agent-fleet scope\x00" + scope))
	return hex.EncodeToString(m.Sum(nil))
}

// fedLink runs queued calls in order, one at a time; push never blocks.
type fedLink struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []func()
	paused bool
	done   bool
}

func newFedLink(t *testing.T) *fedLink {
	l := &fedLink{}
	l.cond = sync.NewCond(&l.mu)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			l.mu.Lock()
			for (len(l.queue) == 0 || l.paused) && !l.done {
				l.cond.Wait()
			}
			if l.done {
				l.mu.Unlock()
				return
			}
			f := l.queue[0]
			l.queue = l.queue[1:]
			l.mu.Unlock()
			f()
		}
	}()
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
		l.cond.Broadcast()
		<-finished
	})
	return l
}

func (l *fedLink) push(f func()) {
	l.mu.Lock()
	l.queue = append(l.queue, f)
	l.mu.Unlock()
	l.cond.Signal()
}

// pause holds what is queued from now on until resume.
func (l *fedLink) pause() {
	l.mu.Lock()
	l.paused = true
	l.mu.Unlock()
}

func (l *fedLink) resume() {
	l.mu.Lock()
	l.paused = false
	l.mu.Unlock()
	l.cond.Broadcast()
}

// fedHost is one broker of a pair and its Federation.
type fedHost struct {
	name string
	h    *intercomtest.Broker
	out  *fedLink // calls for the peer
	peer *fedHost

	mu         sync.Mutex
	calls      []string // every Federation call, rendered
	forwards   []broker.Forward
	outcomes   []broker.Outcome
	attachErrs map[string]error // AttachProxy errors of the peer's sessions here, by id
}

func (f *fedHost) record(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fedHost) LocalJoined(s broker.LocalSession) {
	f.record("joined %s %s %s %d", s.ID, s.Info, s.ScopeToken, s.PID)
	info, err := wire.DecodeSessionInfo(s.Info)
	if err != nil {
		panic(err)
	}
	f.out.push(func() {
		err := f.peer.h.B.AttachProxy(f.name, info, s.ScopeToken)
		f.peer.mu.Lock()
		f.peer.attachErrs[info.ID] = err
		f.peer.mu.Unlock()
	})
}

func (f *fedHost) LocalPresence(s broker.LocalSession) {
	f.record("presence %s %s %s", s.ID, s.Info, s.ScopeToken)
	info, err := wire.DecodeSessionInfo(s.Info)
	if err != nil {
		panic(err)
	}
	f.out.push(func() { f.peer.h.B.UpdateProxy(f.name, info) })
}

func (f *fedHost) LocalLeft(id string, unregistered bool) {
	f.record("left %s %v", id, unregistered)
	f.out.push(func() { f.peer.h.B.DetachProxy(f.name, id, unregistered) })
}

func (f *fedHost) Forward(fw broker.Forward) {
	f.record("forward %+v %s %s", fw, fw.FromInfo, fw.Message)
	f.mu.Lock()
	f.forwards = append(f.forwards, fw)
	f.mu.Unlock()
	f.out.push(func() { f.peer.h.B.ProxySend(f.name, fw.From, fw.To, fw.Message, fw.DeliveryID) })
}

func (f *fedHost) Outcome(o broker.Outcome) {
	f.record("outcome %+v", o)
	f.mu.Lock()
	f.outcomes = append(f.outcomes, o)
	f.mu.Unlock()
	f.out.push(func() {
		b := f.peer.h.B
		switch o.Kind {
		case broker.OutcomeAccepted:
			b.ForwardAccepted(o.RemoteDeliveryID)
		case broker.OutcomeDelivered:
			b.ForwardDelivered(o.RemoteDeliveryID)
		case broker.OutcomeFailed:
			b.ForwardFailed(o.RemoteDeliveryID, o.Accepted, o.Code, o.Reason)
		}
	})
}

func (f *fedHost) AskControl(a broker.AskControl) {
	f.record("ask %+v", a)
	f.out.push(func() { f.peer.h.B.ProxyAskControl(f.name, a.From, a.Action, a.MessageID) })
}

func (f *fedHost) attachErr(id string) (error, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	err, ok := f.attachErrs[id]
	return err, ok
}

func (f *fedHost) outcomesFor(remoteDeliveryID string) []broker.OutcomeKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	var kinds []broker.OutcomeKind
	for _, o := range f.outcomes {
		if o.RemoteDeliveryID == remoteDeliveryID {
			kinds = append(kinds, o.Kind)
		}
	}
	return kinds
}

func (f *fedHost) allCalls() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, "\n")
}

// federatedPair starts hosts "alpha" and "beta", joined; tweak changes
// both brokers' Config.
func federatedPair(t *testing.T, tweak ...func(*broker.Config)) (a, b *fedHost) {
	t.Helper()
	both := func(c *broker.Config) {
		for _, f := range tweak {
			f(c)
		}
	}
	return federatedPairWith(t, both, both)
}

// federatedPairWith starts "alpha" with tweakA and "beta" with tweakB.
func federatedPairWith(t *testing.T, tweakA, tweakB func(*broker.Config)) (a, b *fedHost) {
	t.Helper()
	if tweakA == nil {
		tweakA = func(*broker.Config) {}
	}
	if tweakB == nil {
		tweakB = func(*broker.Config) {}
	}
	a = &fedHost{name: "alpha", attachErrs: map[string]error{}}
	b = &fedHost{name: "beta", attachErrs: map[string]error{}}
	a.h = startBroker(t, tweakA)
	b.h = startBroker(t, tweakB)
	a.peer, b.peer = b, a
	a.out, b.out = newFedLink(t), newFedLink(t)
	a.h.B.SetFederation(a, testScoper)
	b.h.B.SetFederation(b, testScoper)
	return a, b
}

// remoteSessions waits until h holds n proxy sessions.
func remoteSessions(t *testing.T, h *intercomtest.Broker, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d remote sessions", n), func() bool { return h.B.Stats().RemoteSessions == n })
}

func requireRemote(t *testing.T, s wire.SessionInfo, id, host string) {
	t.Helper()
	require.Equal(t, id, s.ID)
	require.Equal(t, "remote", s.Origin)
	require.False(t, s.TrustedLocal)
	require.Equal(t, host, s.RemoteHostID)
}

func TestFederationPresenceAcrossHosts(t *testing.T) {
	a, b := federatedPair(t)
	lena := a.h.Register("lena-0001", intercomtest.RegisterOptions{Name: "lena"})
	remoteSessions(t, b.h, 1)
	rita := b.h.Register("rita-0001", intercomtest.RegisterOptions{Name: "rita"})
	j := lena.Expect(wire.TypeSessionJoined)
	requireRemote(t, j.Session, "rita-0001", "beta")
	require.Equal(t, "rita", j.Session.Name)
	require.Equal(t, "/work/rita-0001", j.Session.Cwd)
	rita.Write(wire.AppendListRequest(nil, "r1"))
	ritaList := rita.Expect(wire.TypeSessions).Sessions
	require.Len(t, ritaList, 2)
	requireRemote(t, ritaList[0], "lena-0001", "alpha")
	require.Equal(t, "lena", ritaList[0].Name)

	rid := "l1"
	lena.Write(wire.AppendListRequest(nil, rid))
	list := lena.Expect(wire.TypeSessions).Sessions
	require.Len(t, list, 2)
	require.Equal(t, "lena-0001", list[0].ID)
	require.Equal(t, "local", list[0].Origin)
	require.Empty(t, list[0].RemoteHostID)
	requireRemote(t, list[1], "rita-0001", "beta")
	st := a.h.B.Stats()
	require.Equal(t, 2, st.Sessions)
	require.Equal(t, 1, st.RemoteSessions)
	require.Equal(t, 1, st.Connections, "a proxy has no connection")
	require.False(t, a.h.B.Peer("rita-0001").Connected, "no local connection holds a remote session")
	require.Equal(t, "beta", a.h.B.Peer("rita-0001").RemoteHost, "a remote session is reported with its host")
	require.Equal(t, []string{"lena-0001"}, localIDs(a.h.B))

	rita.Write(wire.AppendPresenceFrame(nil, &wire.Presence{Status: "reviewing", HasStatus: true}))
	p := lena.Expect(wire.TypePresenceUpdate)
	requireRemote(t, p.Session, "rita-0001", "beta")
	require.True(t, p.Session.HasStatus)
	require.Equal(t, "reviewing", p.Session.Status)

	rita.Write(wire.AppendUnregisterFrame(nil, false))
	require.Equal(t, "rita-0001", lena.Expect(wire.TypeSessionLeft).SessionID)
	remoteSessions(t, a.h, 0)
	require.Equal(t, []string{"lena-0001"}, lena.List())
	lena.Quiet(20 * time.Millisecond)
	rita.Quiet(20 * time.Millisecond)
}

// lenaAndRita registers lena on alpha and then rita on beta, each once
// the other host knows the sessions before it; lena hears rita join.
func lenaAndRita(t *testing.T, a, b *fedHost) (lena, rita *intercomtest.Client) {
	t.Helper()
	lena = a.h.Register("lena-0001", intercomtest.RegisterOptions{Name: "lena"})
	remoteSessions(t, b.h, 1)
	rita = b.h.Register("rita-0001", intercomtest.RegisterOptions{Name: "rita"})
	requireRemote(t, lena.Expect(wire.TypeSessionJoined).Session, "rita-0001", "beta")
	return lena, rita
}

// deliverAcross sends msg from c to `to` on another host and drives it to
// delivered through the recipient r: c hears accepted, then delivered,
// with its own host's deliveryId. It returns the message frame r saw.
func deliverAcross(t *testing.T, c *intercomtest.Client, to string, r *intercomtest.Client, msg []byte) *wire.BrokerFrame {
	t.Helper()
	c.Send(to, msg)
	m := r.Expect(wire.TypeMessage)
	require.Equal(t, string(msg), string(m.Message))
	r.Ack(m.DeliveryID)
	acc := c.Expect(wire.TypeDeliveryAccepted)
	d := c.Expect(wire.TypeDelivered)
	require.Equal(t, acc.DeliveryID, d.DeliveryID)
	require.Equal(t, acc.MessageID, d.MessageID)
	require.Equal(t, m.MessageID, d.MessageID)
	return m
}

func localIDs(b *broker.Broker) []string {
	var ids []string
	for _, s := range b.LocalSessions() {
		ids = append(ids, s.ID)
	}
	return ids
}

// A broker whose only sessions are proxies is idle: they keep no broker
// alive.
func TestFederationProxiesDoNotHoldOffIdleExit(t *testing.T) {
	a, b := federatedPair(t, func(c *broker.Config) { c.IdleExit = 100 * time.Millisecond })
	b.h.Register("rita-0001", intercomtest.RegisterOptions{})
	remoteSessions(t, a.h, 1)
	lena := a.h.Register("lena-0001", intercomtest.RegisterOptions{})
	lena.Write(wire.AppendUnregisterFrame(nil, false))
	waitFor(t, "alpha to idle out", func() bool {
		c, err := net.Dial("unix", a.h.Paths.BrokerSocket())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

func TestFederationScopesByToken(t *testing.T) {
	a, b := federatedPair(t)
	a1 := a.h.Register(idA1, intercomtest.RegisterOptions{Name: "alpha", Scope: scopeA})
	u1 := a.h.Register(idU1, intercomtest.RegisterOptions{Name: "uncle"})
	remoteSessions(t, b.h, 2)
	a2 := b.h.Register(idA2, intercomtest.RegisterOptions{Name: "alpha2", Scope: scopeA})
	b1 := b.h.Register(idB1, intercomtest.RegisterOptions{Name: "beta", Scope: scopeB})
	u2 := b.h.Register("cccccccc-cccc-4ccc-8ccc-ccccccccccc2", intercomtest.RegisterOptions{Name: "uncle2"})
	remoteSessions(t, a.h, 3)

	require.Equal(t, idA2, a1.Expect(wire.TypeSessionJoined).Session.ID)
	require.Equal(t, "cccccccc-cccc-4ccc-8ccc-ccccccccccc2", u1.Expect(wire.TypeSessionJoined).Session.ID)
	require.Equal(t, []string{idA1, idA2}, a1.List())
	require.Equal(t, []string{idA1, idA2}, a2.List())
	require.Equal(t, []string{idB1}, b1.List())
	require.Equal(t, []string{idU1, "cccccccc-cccc-4ccc-8ccc-ccccccccccc2"}, u1.List())
	require.Equal(t, []string{idU1, "cccccccc-cccc-4ccc-8ccc-ccccccccccc2"}, u2.List())
	b1.Quiet(20 * time.Millisecond)

	// Names resolve in the scope across hosts; exact ids in any scope.
	a1.Send("ALPHA2", intercomtest.Message("m1", "same scope by name"))
	m := a2.Expect(wire.TypeMessage)
	requireRemote(t, m.From, idA1, "alpha")
	a2.Ack(m.DeliveryID)
	a1.Expect(wire.TypeDeliveryAccepted)
	a1.Expect(wire.TypeDelivered)
	a1.Send("beta", intercomtest.Message("m2", "other scope by name"))
	a1.ExpectFailed("m2", false, wire.FailSessionNotFound)
	u1.Send("alpha2", intercomtest.Message("m3", "unscoped to scoped by name"))
	u1.ExpectFailed("m3", false, wire.FailSessionNotFound)
	u1.Send("bbbbbbbb", intercomtest.Message("m4", "prefix across scopes"))
	u1.ExpectFailed("m4", false, wire.FailSessionNotFound)
	deliverAcross(t, u1, idB1, b1, intercomtest.Message("m5", "exact id across hosts and scopes"))

	// Neither the scope nor its token reaches any client or log; only the
	// token goes to the federation.
	for _, h := range []*intercomtest.Broker{a.h, b.h} {
		for _, secret := range []string{scopeA, scopeB, testScoper(scopeA), testScoper(scopeB)} {
			require.NotContains(t, h.Frames.String(), secret)
			require.NotContains(t, h.Logs.String(), secret)
		}
	}
	for _, f := range []*fedHost{a, b} {
		calls := f.allCalls()
		require.NotContains(t, calls, scopeA)
		require.NotContains(t, calls, scopeB)
	}
	require.Contains(t, a.allCalls(), testScoper(scopeA))
	require.Contains(t, b.allCalls(), testScoper(scopeB))
}

func TestFederationSendAcrossHosts(t *testing.T) {
	a, b := federatedPair(t)
	lena, rita := lenaAndRita(t, a, b)

	// Accepted only once beta routed it, delivered only once rita acked.
	b.out.pause()
	msg := []byte(`{"id":"m1","timestamp":1760000000001,"content":{"text":"across <hosts>"},"zeta":1,"alpha":[2]}`)
	lena.Send("RITA", msg)
	m := rita.Expect(wire.TypeMessage)
	require.Equal(t, string(msg), string(m.Message), "the message crosses byte for byte")
	requireRemote(t, m.From, "lena-0001", "alpha")
	lena.Quiet(50 * time.Millisecond)
	b.out.resume()
	acc := lena.Expect(wire.TypeDeliveryAccepted)
	require.Equal(t, "m1", acc.MessageID)
	b.out.pause()
	rita.Ack(m.DeliveryID)
	lena.Quiet(50 * time.Millisecond)
	b.out.resume()
	del := lena.Expect(wire.TypeDelivered)
	require.Equal(t, acc.DeliveryID, del.DeliveryID)
	require.Equal(t, "m1", del.MessageID)
	a.mu.Lock()
	forwards := a.forwards
	a.mu.Unlock()
	require.Len(t, forwards, 1)
	require.Equal(t, acc.DeliveryID, forwards[0].DeliveryID)
	require.Equal(t, "rita-0001", forwards[0].To)
	require.Equal(t, "lena-0001", forwards[0].From)
	require.Equal(t, "beta", forwards[0].Host)
	require.Equal(t, string(msg), string(forwards[0].Message))

	// An identical retry of a delivered send is answered on alpha.
	lena.Send("RITA", msg)
	require.Equal(t, acc.DeliveryID, lena.Expect(wire.TypeDeliveryAccepted).DeliveryID)
	require.Equal(t, acc.DeliveryID, lena.Expect(wire.TypeDelivered).DeliveryID)
	// One that reaches beta again (its sender's host lost track) is
	// answered from beta's dedup cache.
	b.h.B.ProxySend("alpha", "lena-0001", "rita-0001", msg, "again-1")
	waitFor(t, "outcomes of the replay", func() bool { return len(b.outcomesFor("again-1")) == 2 })
	require.Equal(t, []broker.OutcomeKind{broker.OutcomeAccepted, broker.OutcomeDelivered}, b.outcomesFor("again-1"))

	// A retry while the first attempt is pending on beta.
	b.out.pause()
	msg2 := intercomtest.Message("m2", "pending retry")
	lena.Send("rita-0001", msg2)
	m2 := rita.Expect(wire.TypeMessage)
	lena.Send("rita-0001", msg2)
	lena.Quiet(50 * time.Millisecond)
	b.out.resume()
	acc2 := lena.Expect(wire.TypeDeliveryAccepted)
	rita.Ack(m2.DeliveryID)
	require.Equal(t, acc2.DeliveryID, lena.Expect(wire.TypeDelivered).DeliveryID)
	rita.Quiet(50 * time.Millisecond) // each message reached rita once
	lena.Quiet(20 * time.Millisecond)

	// A host routes only to its own sessions: no transit.
	third := "thea-0001"
	require.NoError(t, b.h.B.AttachProxy("gamma", wire.SessionInfo{ID: third, Cwd: "/", Model: "m"}, ""))
	rita.Expect(wire.TypeSessionJoined)
	b.h.B.ProxySend("alpha", "lena-0001", third, intercomtest.Message("m3", "transit"), "transit-1")
	waitFor(t, "the transit refusal", func() bool { return len(b.outcomesFor("transit-1")) == 1 })
	b.mu.Lock()
	last := b.outcomes[len(b.outcomes)-1]
	b.mu.Unlock()
	require.Equal(t, broker.OutcomeFailed, last.Kind)
	require.False(t, last.Accepted)
	require.Equal(t, wire.FailSessionNotFound, last.Code)
	require.Equal(t, "m3", last.MessageID)

	for _, h := range []*intercomtest.Broker{a.h, b.h} {
		waitFor(t, "no pending deliveries", func() bool { return h.B.Stats().PendingDeliveries == 0 })
	}
}

func TestFederationAskReplyAcrossHosts(t *testing.T) {
	a, b := federatedPair(t)
	lena, rita := lenaAndRita(t, a, b)

	lena.Send("rita", intercomtest.Message("q1", "which branch?", intercomtest.AsAsk))
	q := rita.Expect(wire.TypeMessage)
	require.Contains(t, string(q.Message), `"expectsReply":true`)
	rita.Ack(q.DeliveryID)
	lena.Expect(wire.TypeDeliveryAccepted)
	lena.Expect(wire.TypeDelivered)
	require.Equal(t, 1, a.h.B.Stats().AskEdges)
	waitFor(t, "beta's edge", func() bool { return b.h.B.Stats().AskEdges == 1 })

	rita.Send("lena", intercomtest.Message("r1", "main", intercomtest.ReplyTo("q1")))
	r := lena.Expect(wire.TypeMessage)
	requireRemote(t, r.From, "rita-0001", "beta")
	require.Contains(t, string(r.Message), `"replyTo":"q1"`)
	lena.Ack(r.DeliveryID)
	rita.Expect(wire.TypeDeliveryAccepted)
	rita.Expect(wire.TypeDelivered)
	require.Equal(t, 0, a.h.B.Stats().AskEdges, "the reply answered alpha's edge")
	require.Equal(t, 0, b.h.B.Stats().AskEdges, "and beta's")

	// A second reply finds no edge on either side.
	rita.Send("lena", intercomtest.Message("r2", "again", intercomtest.ReplyTo("q1")))
	rita.ExpectFailed("r2", false, wire.FailInvalidReplyTarget)
}

func TestFederationAskControlsReachTheRecipient(t *testing.T) {
	a, b := federatedPair(t)
	lena, rita := lenaAndRita(t, a, b)
	deliverAcross(t, lena, "rita", rita, intercomtest.Message("q1", "slow question", intercomtest.AsAsk))

	require.True(t, lena.AskControl(wire.TypeDeferAsk, "q1"))
	d := rita.Expect(wire.TypeAskDeferred)
	require.Equal(t, "q1", d.MessageID)
	require.Equal(t, "lena-0001", d.FromID)
	edges := readAskStateEventually(t, b.h, 1)
	waitFor(t, "beta's edge deferred", func() bool { return b.h.ReadAskState()[0]["state"] == "deferred" })
	require.Equal(t, "lena-0001", edges[0]["from"])

	require.True(t, lena.AskControl(wire.TypeCancelAsk, "q1"))
	c := rita.Expect(wire.TypeAskCancelled)
	require.Equal(t, "q1", c.MessageID)
	require.Equal(t, "lena-0001", c.FromID)
	require.Equal(t, string(wire.AskCancelled), c.Reason)
	require.Equal(t, 0, a.h.B.Stats().AskEdges)
	waitFor(t, "beta's edge gone", func() bool { return b.h.B.Stats().AskEdges == 0 })
	rita.Quiet(20 * time.Millisecond)
}

func TestFederationHostGone(t *testing.T) {
	a, b := federatedPair(t)
	lena, rita := lenaAndRita(t, a, b)
	theo := a.h.Register("theo-0001", intercomtest.RegisterOptions{Name: "theo"})
	lena.Expect(wire.TypeSessionJoined)
	rita.Expect(wire.TypeSessionJoined)
	deliverAcross(t, lena, "rita", rita, intercomtest.Message("q1", "lena asks", intercomtest.AsAsk))
	deliverAcross(t, rita, "theo", theo, intercomtest.Message("q2", "rita asks", intercomtest.AsAsk))
	// Pending both ways: lena → rita accepted, rita → lena unacked.
	lena.Send("rita", intercomtest.Message("m3", "pending to rita"))
	rita.Expect(wire.TypeMessage)
	lena.Expect(wire.TypeDeliveryAccepted)
	rita.Send("lena", intercomtest.Message("m4", "pending to lena"))
	lena.Expect(wire.TypeMessage)
	rita.Expect(wire.TypeDeliveryAccepted)

	a.h.B.DetachHost("beta")
	require.Equal(t, "rita-0001", lena.Expect(wire.TypeSessionLeft).SessionID)
	f := lena.ExpectFailed("m3", true, wire.FailRecipientDisconnected)
	require.Equal(t, "Recipient disconnected before acknowledging the message", f.Reason)
	require.Equal(t, "rita-0001", theo.Expect(wire.TypeSessionLeft).SessionID)
	d := theo.Expect(wire.TypeAskDeferred)
	require.Equal(t, "q2", d.MessageID)
	require.Equal(t, "rita-0001", d.FromID)
	f = rita.ExpectFailed("m4", true, wire.FailSenderDisconnected)
	require.Equal(t, "Sender disconnected before delivery was acknowledged", f.Reason)
	require.Equal(t, []string{"lena-0001", "theo-0001"}, lena.List())
	waitFor(t, "both edges deferred on alpha", func() bool {
		edges := a.h.ReadAskState()
		return len(edges) == 2 && edges[0]["state"] == "deferred" && edges[1]["state"] == "deferred"
	})
	require.Equal(t, 0, a.h.B.Stats().PendingDeliveries)
	lena.Quiet(20 * time.Millisecond)

	// Back: a late reply on the deferred edge is still authorised.
	require.NoError(t, a.h.B.AttachProxy("beta", wire.SessionInfo{ID: "rita-0001", Name: "rita", HasName: true, Cwd: "/w", Model: "m"}, ""))
	requireRemote(t, lena.Expect(wire.TypeSessionJoined).Session, "rita-0001", "beta")
	requireRemote(t, theo.Expect(wire.TypeSessionJoined).Session, "rita-0001", "beta")
	deliverAcross(t, theo, "rita", rita, intercomtest.Message("r2", "late answer", intercomtest.ReplyTo("q2")))
	waitFor(t, "beta's q2 edge answered", func() bool { return b.h.B.Stats().AskEdges == 1 }) // q1 stays
}

func TestFederationUnregisterCancelsEdges(t *testing.T) {
	a, b := federatedPair(t)
	lena, rita := lenaAndRita(t, a, b)
	deliverAcross(t, lena, "rita", rita, intercomtest.Message("q1", "lena asks", intercomtest.AsAsk))

	rita.Write(wire.AppendUnregisterFrame(nil, false))
	require.Equal(t, "rita-0001", lena.Expect(wire.TypeSessionLeft).SessionID)
	c := lena.Expect(wire.TypeAskCancelled)
	require.Equal(t, "q1", c.MessageID)
	require.Equal(t, "rita-0001", c.FromID)
	require.Equal(t, string(wire.AskSessionDisconnected), c.Reason)
	require.Equal(t, 0, a.h.B.Stats().AskEdges)
}

func TestFederationSessionIDCollision(t *testing.T) {
	a, b := federatedPair(t)
	lena := a.h.Register("lena-0001", intercomtest.RegisterOptions{Name: "lena"})
	dup := a.h.Register("dup-0001", intercomtest.RegisterOptions{Name: "dup-alpha"})
	lena.Expect(wire.TypeSessionJoined)
	remoteSessions(t, b.h, 2)

	// beta's new session of an id alpha's local session holds: beta's
	// proxy of alpha's gives way to it, and alpha does not show it.
	dupB := b.h.Register("dup-0001", intercomtest.RegisterOptions{Name: "dup-beta"})
	waitFor(t, "the refused attach", func() bool { _, ok := a.attachErr("dup-0001"); return ok })
	err, _ := a.attachErr("dup-0001")
	require.ErrorIs(t, err, broker.ErrSessionIDTaken)
	require.Equal(t, 1, b.h.B.Stats().RemoteSessions)
	dupB.Write(wire.AppendListRequest(nil, "l1"))
	list := dupB.Expect(wire.TypeSessions).Sessions
	require.Len(t, list, 2)
	requireRemote(t, list[0], "lena-0001", "alpha")
	require.Equal(t, "dup-0001", list[1].ID)
	require.Equal(t, "local", list[1].Origin)
	lena.Write(wire.AppendListRequest(nil, "l2"))
	list = lena.Expect(wire.TypeSessions).Sessions
	require.Len(t, list, 2)
	require.Equal(t, "dup-alpha", list[1].Name)
	require.Equal(t, "local", list[1].Origin)
	lena.Deliver("dup-0001", dup, intercomtest.Message("m1", "to the local one"))
	dupB.Quiet(20 * time.Millisecond)

	// A local session taking the id of a remote one replaces it.
	b.h.Register("rita-0001", intercomtest.RegisterOptions{Name: "rita"})
	requireRemote(t, lena.Expect(wire.TypeSessionJoined).Session, "rita-0001", "beta")
	requireRemote(t, dup.Expect(wire.TypeSessionJoined).Session, "rita-0001", "beta")
	a.h.Register("rita-0001", intercomtest.RegisterOptions{Name: "rita-here"})
	require.Equal(t, "rita-0001", lena.Expect(wire.TypeSessionLeft).SessionID)
	j := lena.Expect(wire.TypeSessionJoined)
	require.Equal(t, "rita-0001", j.Session.ID)
	require.Equal(t, "local", j.Session.Origin)
	require.Equal(t, "rita-here", j.Session.Name)
	require.Equal(t, 0, a.h.B.Stats().RemoteSessions)
	waitFor(t, "beta's refusal of alpha's rita", func() bool { _, ok := b.attachErr("rita-0001"); return ok })
	err, _ = b.attachErr("rita-0001")
	require.ErrorIs(t, err, broker.ErrSessionIDTaken)
}

// Each side expires its own edge; when beta still holds one alpha let go,
// beta refuses the next ask before routing it, and alpha keeps no edge.
func TestFederationRefusedForwardLeavesNoEdge(t *testing.T) {
	a, b := federatedPairWith(t, func(c *broker.Config) { c.AskTTL = 300 * time.Millisecond }, nil)
	lena, rita := lenaAndRita(t, a, b)

	deliverAcross(t, lena, "rita", rita, intercomtest.Message("q1", "first", intercomtest.AsAsk))
	waitFor(t, "alpha's edge to expire", func() bool { return a.h.B.Stats().AskEdges == 0 })
	require.Equal(t, 1, b.h.B.Stats().AskEdges)

	lena.Send("rita", intercomtest.Message("q2", "second", intercomtest.AsAsk))
	f := lena.ExpectFailed("q2", false, wire.FailAskAlreadyPending)
	require.Contains(t, f.Reason, "Another ask to this session is still unresolved")
	require.Equal(t, 0, a.h.B.Stats().AskEdges)
	require.Equal(t, 0, a.h.B.Stats().PendingDeliveries)
	rita.Quiet(20 * time.Millisecond)
}

// A host announcing a session again refreshes its proxy in place.
func TestFederationProxyRefresh(t *testing.T) {
	a, _ := federatedPair(t)
	lena := a.h.Register("lena-0001", intercomtest.RegisterOptions{Name: "lena", Scope: scopeA})
	info := wire.SessionInfo{ID: "rita-0001", Name: "rita", HasName: true, Cwd: "/w", Model: "m", PID: 7}
	require.NoError(t, a.h.B.AttachProxy("beta", info, testScoper(scopeA)))
	requireRemote(t, lena.Expect(wire.TypeSessionJoined).Session, "rita-0001", "beta")

	require.NoError(t, a.h.B.AttachProxy("beta", info, testScoper(scopeA)))
	lena.Quiet(20 * time.Millisecond) // nothing changed: nothing said

	info.Model = "other-model"
	require.NoError(t, a.h.B.AttachProxy("beta", info, testScoper(scopeA)))
	p := lena.Expect(wire.TypePresenceUpdate)
	requireRemote(t, p.Session, "rita-0001", "beta")
	require.Equal(t, "other-model", p.Session.Model)

	require.NoError(t, a.h.B.AttachProxy("beta", info, testScoper(scopeB)))
	require.Equal(t, "rita-0001", lena.Expect(wire.TypeSessionLeft).SessionID)
	require.Equal(t, []string{"lena-0001"}, lena.List())
	require.Equal(t, 1, a.h.B.Stats().RemoteSessions)

	// The same id from another host: the session moved there.
	require.NoError(t, a.h.B.AttachProxy("gamma", info, testScoper(scopeA)))
	requireRemote(t, lena.Expect(wire.TypeSessionJoined).Session, "rita-0001", "gamma")
	require.Equal(t, 1, a.h.B.Stats().RemoteSessions)
	a.h.B.DetachProxy("beta", "rita-0001", true) // not beta's any more
	lena.Quiet(20 * time.Millisecond)
	a.h.B.UpdateProxy("gamma", wire.SessionInfo{ID: "rita-0001", Status: "busy", HasStatus: true, Model: "other-model", LastActivity: 5})
	p = lena.Expect(wire.TypePresenceUpdate)
	require.Equal(t, "busy", p.Session.Status)
	require.Equal(t, "rita", p.Session.Name, "presence keeps what it does not carry")
	a.h.B.DetachHost("gamma")
	require.Equal(t, "rita-0001", lena.Expect(wire.TypeSessionLeft).SessionID)
	require.Equal(t, 0, a.h.B.Stats().RemoteSessions)

	ls := a.h.B.LocalSessions()
	require.Len(t, ls, 1)
	require.Equal(t, testScoper(scopeA), ls[0].ScopeToken)
	require.Equal(t, os.Getpid(), ls[0].PID)
	require.NotContains(t, string(ls[0].Info), scopeA)
	si, err := wire.DecodeSessionInfo(ls[0].Info)
	require.NoError(t, err)
	require.Equal(t, "local", si.Origin)
	require.True(t, si.TrustedLocal)
}
