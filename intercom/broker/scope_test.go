package broker

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
func world(t *testing.T, h *harness) (a1, a2, b1, u1 *client) {
	a1 = h.register(idA1, regOpts{name: "alpha", scope: scopeA})
	a2 = h.register(idA2, regOpts{name: "alpha2", scope: scopeA})
	b1 = h.register(idB1, regOpts{name: "beta", scope: scopeB})
	u1 = h.register(idU1, regOpts{name: "uncle"})
	require.Equal(t, idA2, a1.expect(wire.TypeSessionJoined).Session.ID)
	return
}

func TestScopeValidationAtRegistration(t *testing.T) {
	h := startBroker(t)
	for _, bad := range []string{"short", "Scope_AAAAAAAAAA ", "Scope.AAAAAAAAAAA", "Scopé_AAAAAAAAAAA", strings.Repeat("s", 129)} {
		c := h.dial()
		c.write(registerFrame("x", regOpts{scope: bad}))
		c.expectError(wire.CodeInvalidRequest, "Registration metadata is invalid")
		c.expectClosed()
	}
	for _, raw := range []string{`12345678901234567890`, `null`, `["Scope_AAAAAAAAAA"]`} {
		c := h.dial()
		c.writeJSON(`{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/","model":"m","pid":1,"startedAt":1,"lastActivity":1},"scopeId":` + raw + `}`)
		c.expectError(wire.CodeInvalidRequest, "Registration metadata is invalid")
	}
	c := h.register("edge16", regOpts{scope: "0123456789ABCDEF"})
	c.list()
	c = h.register("edge128", regOpts{scope: strings.Repeat("Z", 128)})
	c.list()
	require.NotContains(t, h.frames.String(), "Scope_AAAAAAAAAA ")
	require.NotContains(t, h.logs.String(), "Scope.AAA")
}

func TestScopeListPartition(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	require.Equal(t, []string{idA1, idA2}, a1.list())
	require.Equal(t, []string{idA1, idA2}, a2.list())
	require.Equal(t, []string{idB1}, b1.list())
	require.Equal(t, []string{idU1}, u1.list())
}

func TestScopeAudiences(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	everyone := []*client{a1, a2, b1, u1}

	// joined: only the subject's scope hears it, the subject does not.
	for _, tc := range []struct {
		id, scope string
		hears     []*client
	}{
		{"newA", scopeA, []*client{a1, a2}},
		{"newB", scopeB, []*client{b1}},
		{"newU", "", []*client{u1}},
	} {
		n := h.register(tc.id, regOpts{scope: tc.scope})
		for _, c := range everyone {
			if slices.Contains(tc.hears, c) {
				require.Equal(t, tc.id, c.expect(wire.TypeSessionJoined).Session.ID)
			}
		}
		// presence
		n.write(wire.AppendPresenceFrame(nil, &wire.Presence{Status: "busy", HasStatus: true}))
		for _, c := range tc.hears {
			require.Equal(t, tc.id, c.expect(wire.TypePresenceUpdate).Session.ID)
		}
		n.quiet(20 * time.Millisecond)
		// left
		n.write(wire.AppendUnregisterFrame(nil, false))
		for _, c := range tc.hears {
			require.Equal(t, tc.id, c.expect(wire.TypeSessionLeft).SessionID)
		}
		for _, c := range everyone {
			c.quiet(20 * time.Millisecond)
		}
	}
}

func TestScopeResolution(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	p1 := h.register("prefix-target-1", regOpts{scope: scopeA, name: "p"})
	a1.expect(wire.TypeSessionJoined)
	a2.expect(wire.TypeSessionJoined)
	cases := []struct {
		name string
		from *client
		to   string
		want *client // nil = SESSION_NOT_FOUND
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
		tc.from.send(tc.to, message(id, tc.name))
		if tc.want == nil {
			tc.from.expectFailed(id, false, wire.FailSessionNotFound)
			continue
		}
		tc.from.expect(wire.TypeDeliveryAccepted)
		m := tc.want.expect(wire.TypeMessage)
		tc.want.ack(m.DeliveryID)
		tc.from.expect(wire.TypeDelivered)
	}
	// Same-scope prefix over two ids is ambiguous.
	b2 := h.register("bbbbbbbb-0000", regOpts{scope: scopeB, name: "b2"})
	b1.expect(wire.TypeSessionJoined)
	b1.send("bbbbbbbb", message("amb", "x"))
	b1.expectFailed("amb", false, wire.FailAmbiguousTarget)
	_ = b2

	// A full id wins over a same-scope session named like that id.
	h.register("squatter", regOpts{scope: scopeB, name: idA1})
	b1.expect(wire.TypeSessionJoined)
	b1.send(idA1, message("idwins", "x"))
	b1.expect(wire.TypeDeliveryAccepted)
	require.Equal(t, "idwins", a1.expect(wire.TypeMessage).MessageID)
}

func TestScopeExactEdgeOperations(t *testing.T) {
	h := startBroker(t)
	a1, _, b1, _ := world(t, h)
	// ask, defer, late reply, cancel and a plain send, all across scopes by exact id.
	a1.deliver(idB1, b1, message("x-send", "hi"))
	a1.deliver(idB1, b1, message("x-ask", "?", asAsk))
	require.True(t, a1.askControl(wire.TypeDeferAsk, "x-ask"))
	require.Equal(t, idA1, b1.expect(wire.TypeAskDeferred).FromID)
	b1.deliver(idA1, a1, message("x-reply", "!", replyTo("x-ask")))
	a1.deliver(idB1, b1, message("x-ask2", "?", asAsk))
	require.True(t, a1.askControl(wire.TypeCancelAsk, "x-ask2"))
	require.Equal(t, string(wire.AskCancelled), b1.expect(wire.TypeAskCancelled).Reason)
}

func TestScopeReplacementOrdering(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)

	// A → B: the old scope hears left before the new scope hears joined.
	a2b := h.dial()
	a2b.write(registerFrame(idA1, regOpts{name: "alpha", scope: scopeB, runtime: "rt-" + idA1}))
	require.Equal(t, idA1, a2.expect(wire.TypeSessionLeft).SessionID)
	a2b.expect(wire.TypeRegistered)
	require.Equal(t, idA1, b1.expect(wire.TypeSessionJoined).Session.ID)
	a1.expectClosed()
	u1.quiet(20 * time.Millisecond)
	require.Equal(t, []string{idA1, idB1}, b1.list(), "a replacement keeps its list slot")
	require.Equal(t, []string{idA2}, a2.list())

	// Same scope: left then joined to the same audience.
	again := h.dial()
	again.write(registerFrame(idA1, regOpts{name: "alpha", scope: scopeB, runtime: "rt-" + idA1}))
	require.Equal(t, idA1, b1.expect(wire.TypeSessionLeft).SessionID)
	require.Equal(t, idA1, b1.expect(wire.TypeSessionJoined).Session.ID)
	again.expect(wire.TypeRegistered)
	a2b.expectClosed()

	// An invalid scope on a replacement attempt leaves the incumbent.
	bad := h.dial()
	bad.write(registerFrame(idA1, regOpts{scope: "nope", runtime: "rt-" + idA1}))
	bad.expectError(wire.CodeInvalidRequest, "Registration metadata is invalid")
	b1.quiet(30 * time.Millisecond)
	again.list()

	// Another runtime claiming the live id is refused; incumbent intact.
	other := h.dial()
	other.write(registerFrame(idA1, regOpts{scope: scopeB, runtime: "rt-other"}))
	other.expectError(wire.CodeSessionIDInUse, `Session ID "`+idA1+`" is already active in another local runtime; close the existing session or use a different session ID`)
	other.expectClosed()
	b1.deliver(idA1, again, message("still-there", "x"))
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
	first := h.dial()
	first.writeJSON(legacy(100, 5))
	first.expect(wire.TypeRegistered)
	other := h.dial()
	other.writeJSON(legacy(101, 5))
	other.expectError(wire.CodeSessionIDInUse, "")
	same := h.dial()
	same.writeJSON(legacy(100, 5))
	same.expect(wire.TypeRegistered)
	first.expectClosed()
	// A runtime id on one side only is never the same runtime.
	withID := h.dial()
	withID.write(registerFrame("legacy", regOpts{pid: 100, startedAt: 5, runtime: "rt"}))
	withID.expectError(wire.CodeSessionIDInUse, "")
}

func TestLateFramesOnReplacedSocketAreDiscarded(t *testing.T) {
	for _, late := range []struct {
		name  string
		frame []byte
	}{
		{"presence", wire.AppendPresenceFrame(nil, &wire.Presence{Status: "ghost", HasStatus: true})},
		{"list", wire.AppendListRequest(nil, "l")},
		{"send", wire.AppendSendFrame(nil, "watcher", message("ghost", "boo"))},
		{"defer", wire.AppendAskControl(nil, wire.TypeDeferAsk, "r", "q")},
	} {
		t.Run(late.name, func(t *testing.T) {
			// The discarded socket is closed because of the frame, not
			// because a half-closed socket's peer never ended its side.
			saved := drainWait
			t.Cleanup(func() { drainWait = saved }) // after the broker stops
			drainWait = time.Hour
			h := startBroker(t)
			watcher := h.register("watcher", regOpts{scope: scopeA})
			old := h.dial()
			old.write(registerFrame("dup", regOpts{scope: scopeA, runtime: "rt"}))
			old.expect(wire.TypeRegistered)
			watcher.expect(wire.TypeSessionJoined)
			// Hold the old socket open, as a stalled peer would, by
			// replacing the session from a new connection.
			replacement := h.dial()
			replacement.write(registerFrame("dup", regOpts{scope: scopeA, runtime: "rt"}))
			replacement.expect(wire.TypeRegistered)
			watcher.expect(wire.TypeSessionLeft)
			watcher.expect(wire.TypeSessionJoined)
			_, _ = old.nc.Write(late.frame) // may fail if already closed: fine
			old.expectClosed()
			require.Eventually(t, func() bool {
				_, err := old.nc.Write(wire.AppendHealthRequest(nil, "h"))
				return err != nil
			}, 5*time.Second, 10*time.Millisecond, "the broker closed its end, not only its write side")
			watcher.quiet(50 * time.Millisecond)
			require.Equal(t, []string{"watcher", "dup"}, watcher.list())
		})
	}
}

func TestScopeNeverLeaks(t *testing.T) {
	h := startBroker(t)
	a1, a2, b1, u1 := world(t, h)
	a1.deliver(idB1, b1, message("q", "?", asAsk))
	a1.write(wire.AppendPresenceFrame(nil, &wire.Presence{Status: "s", HasStatus: true}))
	a2.expect(wire.TypePresenceUpdate)
	a1.list()
	b1.list()
	u1.list()
	h.readAskStateEventually(1)
	bad := h.dial()
	bad.write(registerFrame("bad", regOpts{scope: "Scope_BAD!!!!!!!!!!"}))
	bad.expectError(wire.CodeInvalidRequest, "")
	h.stop()
	for where, text := range map[string]string{"frames": h.frames.String(), "logs": h.logs.String(), "files": h.allFiles()} {
		for _, s := range []string{scopeA, scopeB, "Scope_BAD"} {
			require.NotContains(t, text, s, "scope in %s", where)
		}
	}
}
