package broker_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// The v4 scope acceptance classes (spec §4.6): validation, list,
// audiences, resolution, exact-id edges, replacement and late frames, with
// fixture ids in the style of the core vectors.
const (
	scopeA = "Scope_AAAAAAAAAA"
	scopeB = "Scope_BBBBBBBBBB"
	idA1   = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaa1"
	idA2   = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaa2"
	idB1   = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbb1"
	idU1   = "cccccccc-cccc-4ccc-8ccc-ccccccccccc1"
)

// world registers alpha and alpha2 in A, beta in B and uncle unscoped.
func world(t *testing.T, h *intercomtest.Broker) (a1, a2, b1, u1 *intercomtest.Client) {
	a1 = h.Register(idA1, intercomtest.RegisterOptions{Name: "alpha", Scope: scopeA})
	a2 = h.Register(idA2, intercomtest.RegisterOptions{Name: "alpha2", Scope: scopeA})
	b1 = h.Register(idB1, intercomtest.RegisterOptions{Name: "beta", Scope: scopeB})
	u1 = h.Register(idU1, intercomtest.RegisterOptions{Name: "uncle"})
	require.Equal(t, idA2, a1.Expect(wire.TypeSessionJoined).Session.ID)
	return
}

func TestScopeValidationAtRegistration(t *testing.T) {
	h := startBroker(t)
	for _, bad := range []string{"short", "Scope_AAAAAAAAAA ", "Scope.AAAAAAAAAAA", "Scopé_AAAAAAAAAAA", strings.Repeat("s", 129)} {
		c := h.Dial()
		c.Write(intercomtest.RegisterFrame("x", intercomtest.RegisterOptions{Scope: bad}))
		c.ExpectError(wire.CodeInvalidRequest, "Registration metadata is invalid")
		c.ExpectClosed()
	}
	for _, raw := range []string{`12345678901234567890`, `null`, `["Scope_AAAAAAAAAA"]`} {
		c := h.Dial()
		c.WriteJSON(`{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/","model":"m","pid":1,"startedAt":1,"lastActivity":1},"scopeId":` + raw + `}`)
		c.ExpectError(wire.CodeInvalidRequest, "Registration metadata is invalid")
	}
	c := h.Register("edge16", intercomtest.RegisterOptions{Scope: "0123456789ABCDEF"})
	c.List()
	c = h.Register("edge128", intercomtest.RegisterOptions{Scope: strings.Repeat("Z", 128)})
	c.List()
	require.NotContains(t, h.Frames.String(), "Scope_AAAAAAAAAA ")
	require.NotContains(t, h.Logs.String(), "Scope.AAA")
}

func TestScopeListPartition(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	require.Equal(t, []string{idA1, idA2}, a1.List())
	require.Equal(t, []string{idA1, idA2}, a2.List())
	require.Equal(t, []string{idB1}, b1.List())
	require.Equal(t, []string{idU1}, u1.List())
}

func TestScopeAudiences(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	everyone := []*intercomtest.Client{a1, a2, b1, u1}

	// joined: only the subject's scope hears it, the subject does not.
	for _, tc := range []struct {
		id, scope string
		hears     []*intercomtest.Client
	}{
		{"newA", scopeA, []*intercomtest.Client{a1, a2}},
		{"newB", scopeB, []*intercomtest.Client{b1}},
		{"newU", "", []*intercomtest.Client{u1}},
	} {
		n := h.Register(tc.id, intercomtest.RegisterOptions{Scope: tc.scope})
		for _, c := range everyone {
			if slices.Contains(tc.hears, c) {
				require.Equal(t, tc.id, c.Expect(wire.TypeSessionJoined).Session.ID)
			}
		}
		// presence
		n.Write(wire.AppendPresenceFrame(nil, &wire.Presence{Status: "busy", HasStatus: true}))
		for _, c := range tc.hears {
			require.Equal(t, tc.id, c.Expect(wire.TypePresenceUpdate).Session.ID)
		}
		n.Quiet(20 * time.Millisecond)
		// left
		n.Write(wire.AppendUnregisterFrame(nil, false))
		for _, c := range tc.hears {
			require.Equal(t, tc.id, c.Expect(wire.TypeSessionLeft).SessionID)
		}
		for _, c := range everyone {
			c.Quiet(20 * time.Millisecond)
		}
	}
}

func TestScopeResolution(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	p1 := h.Register("prefix-target-1", intercomtest.RegisterOptions{Scope: scopeA, Name: "p"})
	a1.Expect(wire.TypeSessionJoined)
	a2.Expect(wire.TypeSessionJoined)
	cases := []struct {
		name string
		from *intercomtest.Client
		to   string
		want *intercomtest.Client // nil = SESSION_NOT_FOUND
	}{
		{"exact id same scope", a1, idA2, a2},
		{"exact id A→B", a1, idB1, b1},
		{"exact id B→A", b1, idA1, a1},
		{"exact id unscoped→A", u1, idA1, a1},
		{"exact id A→unscoped", a1, idU1, u1},
		{"name same scope", a1, "ALPHA2", a2},
		{"name cross scope", a1, "beta", nil},
		{"name unscoped→scoped", u1, "alpha", nil},
		{"name scoped→unscoped", b1, "uncle", nil},
		{"prefix same scope", a2, "prefix-t", p1},
		{"prefix cross scope", a1, "bbbbbbbb", nil},
		{"prefix unscoped→scoped", u1, "aaaaaaaa", nil},
	}
	for i, tc := range cases {
		id := "m" + string(rune('a'+i))
		tc.from.Send(tc.to, intercomtest.Message(id, tc.name))
		if tc.want == nil {
			tc.from.ExpectFailed(id, false, wire.FailSessionNotFound)
			continue
		}
		tc.from.Expect(wire.TypeDeliveryAccepted)
		m := tc.want.Expect(wire.TypeMessage)
		tc.want.Ack(m.DeliveryID)
		tc.from.Expect(wire.TypeDelivered)
	}
	// Same-scope prefix over two ids is ambiguous.
	b2 := h.Register("bbbbbbbb-0000", intercomtest.RegisterOptions{Scope: scopeB, Name: "b2"})
	b1.Expect(wire.TypeSessionJoined)
	b1.Send("bbbbbbbb", intercomtest.Message("amb", "x"))
	b1.ExpectFailed("amb", false, wire.FailAmbiguousTarget)
	_ = b2

	// A full id wins over a same-scope session named like that id.
	h.Register("squatter", intercomtest.RegisterOptions{Scope: scopeB, Name: idA1})
	b1.Expect(wire.TypeSessionJoined)
	b1.Send(idA1, intercomtest.Message("idwins", "x"))
	b1.Expect(wire.TypeDeliveryAccepted)
	require.Equal(t, "idwins", a1.Expect(wire.TypeMessage).MessageID)
}

func TestScopeExactEdgeOperations(t *testing.T) {
	h := startBroker(t)
	a1, _, b1, _ := world(t, h)
	// ask, defer, late reply, cancel and a plain send, all across scopes by exact id.
	a1.Deliver(idB1, b1, intercomtest.Message("x-send", "hi"))
	a1.Deliver(idB1, b1, intercomtest.Message("x-ask", "?", intercomtest.AsAsk))
	require.True(t, a1.AskControl(wire.TypeDeferAsk, "x-ask"))
	require.Equal(t, idA1, b1.Expect(wire.TypeAskDeferred).FromID)
	b1.Deliver(idA1, a1, intercomtest.Message("x-reply", "!", intercomtest.ReplyTo("x-ask")))
	a1.Deliver(idB1, b1, intercomtest.Message("x-ask2", "?", intercomtest.AsAsk))
	require.True(t, a1.AskControl(wire.TypeCancelAsk, "x-ask2"))
	require.Equal(t, string(wire.AskCancelled), b1.Expect(wire.TypeAskCancelled).Reason)
}

func TestScopeReplacementOrdering(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)

	// A → B: the old scope hears left before the new scope hears joined.
	a2b := h.Dial()
	a2b.Write(intercomtest.RegisterFrame(idA1, intercomtest.RegisterOptions{Name: "alpha", Scope: scopeB, Runtime: "rt-" + idA1}))
	require.Equal(t, idA1, a2.Expect(wire.TypeSessionLeft).SessionID)
	a2b.Expect(wire.TypeRegistered)
	require.Equal(t, idA1, b1.Expect(wire.TypeSessionJoined).Session.ID)
	a1.ExpectClosed()
	u1.Quiet(20 * time.Millisecond)
	require.Equal(t, []string{idA1, idB1}, b1.List(), "a replacement keeps its list slot")
	require.Equal(t, []string{idA2}, a2.List())

	// Same scope: left then joined to the same audience.
	again := h.Dial()
	again.Write(intercomtest.RegisterFrame(idA1, intercomtest.RegisterOptions{Name: "alpha", Scope: scopeB, Runtime: "rt-" + idA1}))
	require.Equal(t, idA1, b1.Expect(wire.TypeSessionLeft).SessionID)
	require.Equal(t, idA1, b1.Expect(wire.TypeSessionJoined).Session.ID)
	again.Expect(wire.TypeRegistered)
	a2b.ExpectClosed()

	// An invalid scope on a replacement attempt leaves the incumbent.
	bad := h.Dial()
	bad.Write(intercomtest.RegisterFrame(idA1, intercomtest.RegisterOptions{Scope: "nope", Runtime: "rt-" + idA1}))
	bad.ExpectError(wire.CodeInvalidRequest, "Registration metadata is invalid")
	b1.Quiet(30 * time.Millisecond)
	again.List()

	// Another runtime claiming the live id is refused; incumbent intact.
	other := h.Dial()
	other.Write(intercomtest.RegisterFrame(idA1, intercomtest.RegisterOptions{Scope: scopeB, Runtime: "rt-other"}))
	other.ExpectError(wire.CodeSessionIDInUse, `Session ID "`+idA1+`" is already active in another local runtime; close the existing session or use a different session ID`)
	other.ExpectClosed()
	b1.Deliver(idA1, again, intercomtest.Message("still-there", "x"))
}

func TestLegacyRuntimeIdentity(t *testing.T) {
	h := startBroker(t)
	// Clients without runtimeInstanceId are the same runtime iff pid and
	// startedAt match (spec §4.5). registerFrame always sets one, so build
	// these frames by hand.
	legacy := func(pid int, started int) string {
		return `{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/","model":"claude","pid":` +
			strconv.Itoa(pid) + `,"startedAt":` + strconv.Itoa(started) + `,"lastActivity":1},"sessionId":"legacy"}`
	}
	first := h.Dial()
	first.WriteJSON(legacy(100, 5))
	first.Expect(wire.TypeRegistered)
	other := h.Dial()
	other.WriteJSON(legacy(101, 5))
	other.ExpectError(wire.CodeSessionIDInUse, "")
	same := h.Dial()
	same.WriteJSON(legacy(100, 5))
	same.Expect(wire.TypeRegistered)
	first.ExpectClosed()
	// A runtime id on one side only is never the same runtime.
	withID := h.Dial()
	withID.Write(intercomtest.RegisterFrame("legacy", intercomtest.RegisterOptions{PID: 100, StartedAt: 5, Runtime: "rt"}))
	withID.ExpectError(wire.CodeSessionIDInUse, "")
}

func TestLateFramesOnReplacedSocketAreDiscarded(t *testing.T) {
	for _, late := range []struct {
		name  string
		frame []byte
	}{
		{"presence", wire.AppendPresenceFrame(nil, &wire.Presence{Status: "ghost", HasStatus: true})},
		{"list", wire.AppendListRequest(nil, "l")},
		{"send", wire.AppendSendFrame(nil, "watcher", intercomtest.Message("ghost", "boo"))},
		{"defer", wire.AppendAskControl(nil, wire.TypeDeferAsk, "r", "q")},
	} {
		t.Run(late.name, func(t *testing.T) {
			// The discarded socket is closed because of the frame, not
			// because a half-closed socket's peer never ended its side.
			t.Cleanup(broker.SetDrainWait(time.Hour)) // restored after the broker stops
			h := startBroker(t)
			watcher := h.Register("watcher", intercomtest.RegisterOptions{Scope: scopeA})
			old := h.Dial()
			old.Write(intercomtest.RegisterFrame("dup", intercomtest.RegisterOptions{Scope: scopeA, Runtime: "rt"}))
			old.Expect(wire.TypeRegistered)
			watcher.Expect(wire.TypeSessionJoined)
			// Hold the old socket open, as a stalled peer would, by
			// replacing the session from a new connection.
			replacement := h.Dial()
			replacement.Write(intercomtest.RegisterFrame("dup", intercomtest.RegisterOptions{Scope: scopeA, Runtime: "rt"}))
			replacement.Expect(wire.TypeRegistered)
			watcher.Expect(wire.TypeSessionLeft)
			watcher.Expect(wire.TypeSessionJoined)
			_, _ = old.Conn.Write(late.frame) // may fail if already closed: fine
			old.ExpectClosed()
			require.Eventually(t, func() bool {
				_, err := old.Conn.Write(wire.AppendHealthRequest(nil, "h"))
				return err != nil
			}, 5*time.Second, 10*time.Millisecond, "the broker closed its end, not only its write side")
			watcher.Quiet(50 * time.Millisecond)
			require.Equal(t, []string{"watcher", "dup"}, watcher.List())
		})
	}
}

func TestScopeNeverLeaks(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	a1.Deliver(idB1, b1, intercomtest.Message("q", "?", intercomtest.AsAsk))
	a1.Write(wire.AppendPresenceFrame(nil, &wire.Presence{Status: "s", HasStatus: true}))
	a2.Expect(wire.TypePresenceUpdate)
	a1.List()
	b1.List()
	u1.List()
	readAskStateEventually(t, h, 1)
	bad := h.Dial()
	bad.Write(intercomtest.RegisterFrame("bad", intercomtest.RegisterOptions{Scope: "Scope_BAD!!!!!!!!!!"}))
	bad.ExpectError(wire.CodeInvalidRequest, "")
	h.Stop()
	for where, text := range map[string]string{"frames": h.Frames.String(), "logs": h.Logs.String(), "files": h.AllFiles()} {
		for _, s := range []string{scopeA, scopeB, "Scope_BAD"} {
			require.NotContains(t, text, s, "scope in %s", where)
		}
	}
}
