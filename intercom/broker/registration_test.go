package broker

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func TestHealthBeforeAndAfterRegister(t *testing.T) {
	h := startBroker(t)
	c := h.dial()
	c.writeJSON(`{"type":"health","requestId":"h1"}`)
	raw := c.nextRaw()
	require.Equal(t, `{"type":"health_ok","requestId":"h1","protocol":"pi-intercom","version":4,"endpoint":"local","remoteAccess":{"feature":"remote-access-v1","policySemanticsVersion":2,"policySemanticsHash":"f3b00e503631bc91123aedfbcf1df72cc9913e1893c09728b2c598f3dcdfdfe0"}}`, string(raw))
	c.writeJSON(`{"type":"health","requestId":"h2"}`)
	require.Equal(t, "h2", c.expect(wire.TypeHealthOK).RequestID, "health may repeat and does not register")
	c.write(registerFrame("a", regOpts{}))
	require.Equal(t, `{"type":"registered","sessionId":"a","protocol":"pi-intercom","version":4}`, string(c.nextRaw()))
	c.writeJSON(`{"type":"health","requestId":"h3"}`)
	c.expect(wire.TypeHealthOK)
}

func TestFragmentedAndCoalescedFramesFromClient(t *testing.T) {
	h := startBroker(t)
	c := h.dial()
	frames := append(wire.AppendHealthRequest(nil, "h1"), registerFrame("frag", regOpts{})...)
	frames = append(frames, wire.AppendListRequest(nil, "l1")...)
	for _, b := range frames { // one byte at a time
		c.write([]byte{b})
	}
	c.expect(wire.TypeHealthOK)
	c.expect(wire.TypeRegistered)
	c.expect(wire.TypeSessions)
	c.write(bytes.Repeat(wire.AppendHealthRequest(nil, "x"), 3)) // three frames, one write
	for i := 0; i < 3; i++ {
		c.expect(wire.TypeHealthOK)
	}
}

func TestMalformedAndOversizedFramesCloseSilently(t *testing.T) {
	h := startBroker(t)
	c := h.dial()
	c.write(wire.AppendFrame(nil, []byte(`{"type":"health",`)))
	c.expectClosed()

	c = h.register("big", regOpts{})
	c.write([]byte{0x00, 0x10, 0x00, 0x01}) // declares 1 MiB + 1
	c.expectClosed()

	c = h.dial()
	c.write(append([]byte{0x00, 0x10, 0x00, 0x01}, bytes.Repeat([]byte("{"), 4096)...))
	c.expectClosed()

	// Exactly 1 MiB is accepted (here: a list padded with spaces).
	c = h.register("max", regOpts{})
	payload := []byte(`{"type":"list","requestId":"r"}`)
	payload = append(payload, bytes.Repeat([]byte(" "), wire.MaxFrameBytes-len(payload))...)
	c.write(wire.AppendFrame(nil, payload))
	c.expect(wire.TypeSessions)
}

func TestInvalidEnvelopes(t *testing.T) {
	h := startBroker(t)
	for _, p := range []string{`[]`, `"x"`, `{}`, `{"type":7}`, `null`} {
		c := h.dial()
		c.writeJSON(p)
		c.expectError(wire.CodeInvalidRequest, "Invalid client message")
		c.expectClosed()
	}
}

func TestFramesBeforeRegister(t *testing.T) {
	h := startBroker(t)
	for _, typ := range []string{"list", "send", "presence", "unregister", "message_received", "defer_ask", "bogus"} {
		c := h.dial()
		c.writeJSON(`{"type":"` + typ + `"}`)
		c.expectError(wire.CodeInvalidRequest, "Received "+typ+" before register")
		c.expectClosed()
	}
}

func TestRegisterRefusals(t *testing.T) {
	h := startBroker(t)
	session := `{"cwd":"/r","model":"m","pid":1,"startedAt":1,"lastActivity":1}`
	cases := []struct {
		frame string
		code  wire.ErrorCode
		text  string
	}{
		{`{"type":"register","protocol":"pi-intercom","version":4,"session":` + session + `,"bogus":1}`, wire.CodeInvalidRequest, "Invalid register message"},
		{`{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/r","model":"m","pid":1,"startedAt":1,"lastActivity":1,"groups":["g"]}}`, wire.CodeInvalidRequest, "Invalid register message"},
		{`{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/r","model":"m","pid":1,"startedAt":1,"lastActivity":1,"peerUid":0}}`, wire.CodeInvalidRequest, "Invalid register message"},
		{`{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/r","model":"m","pid":1,"startedAt":1,"lastActivity":1,"trustedLocal":true}}`, wire.CodeInvalidRequest, "Invalid register message"},
		{`{"type":"register","protocol":"pi-intercom","version":3,"session":` + session + `}`, wire.CodeProtocolMismatch, "Unsupported intercom protocol; expected pi-intercom v4"},
		{`{"type":"register","protocol":"pi-intercom","version":3,"session":` + session + `,"scopeId":"bad scope!"}`, wire.CodeProtocolMismatch, "Unsupported intercom protocol; expected pi-intercom v4"},
		{`{"type":"register","protocol":"pi-intercom","version":4,"session":` + session + `,"scopeId":"bad scope!"}`, wire.CodeInvalidRequest, "Registration metadata is invalid"},
		{`{"type":"register","protocol":"pi-intercom","version":4,"session":` + session + `,"sessionId":"  "}`, wire.CodeInvalidRequest, "Invalid register sessionId"},
		{`{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/r","model":"m","pid":1,"startedAt":1,"lastActivity":1,"boss":{"role":"worker"}}}`, wire.CodeBossFeatureUnavailable, ""},
	}
	for _, cs := range cases {
		c := h.dial()
		c.writeJSON(cs.frame)
		c.expectError(cs.code, cs.text)
		c.expectClosed()
	}

	c := h.register("dup", regOpts{})
	c.write(registerFrame("dup2", regOpts{}))
	c.expectError(wire.CodeInvalidRequest, "Received duplicate register message")
	c.expectClosed()

	c = h.register("unknown", regOpts{})
	c.writeJSON(`{"type":"shutdown"}`)
	c.expectError(wire.CodeInvalidRequest, "Unknown client message type: shutdown")
	c.expectClosed()

	c = h.dial()
	c.writeJSON(`{"type":"register","protocol":"pi-intercom","version":4,"session":` + session + `}`)
	id := c.expect(wire.TypeRegistered).SessionID
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id, "no sessionId: a UUID is assigned")
}

func TestAccessControlIsRefused(t *testing.T) {
	h := startBroker(t)
	c := h.dial()
	c.writeJSON(`{"type":"access_control","requestId":"r","adminToken":"x","action":"inspect_tree"}`)
	c.expectError(wire.CodeAccessDenied, "")
	c.expectClosed()
	c = h.register("ac", regOpts{})
	c.writeJSON(`{"type":"access_control","requestId":"r"}`)
	c.expectError(wire.CodeAccessDenied, "Remote access control requires a short-lived control connection")
}

func TestRegistrationTimeout(t *testing.T) {
	h := startBroker(t, func(c *Config) { c.RegistrationTimeout = 150 * time.Millisecond })
	c := h.dial()
	c.writeJSON(`{"type":"health","requestId":"h"}`)
	c.expect(wire.TypeHealthOK)
	c.expectClosed()

	// unregister re-arms the timer: the socket is reaped after going idle.
	c = h.register("u", regOpts{})
	c.write(wire.AppendUnregisterFrame(nil, false))
	c.expectClosed()
}

// Spec §9 item 11: 140 idle raw connections do not block a registration,
// and 40 sockets that unregister and then idle are reaped.
func TestIdleConnectionFloodDoesNotBlockRegistration(t *testing.T) {
	h := startBroker(t, func(c *Config) { c.RegistrationTimeout = 300 * time.Millisecond })
	idle := make([]*client, 140)
	for i := range idle {
		idle[i] = h.dial()
	}
	waitFor(t, "the unregistered cap", func() bool {
		h.b.mu.Lock()
		defer h.b.mu.Unlock()
		return h.b.unregistered.Len() <= DefaultMaxUnregistered
	})
	c := h.register("legit", regOpts{})
	require.Equal(t, []string{"legit"}, c.list())
	for _, ic := range idle {
		ic.expectClosed()
	}
	left := make([]*client, 40)
	for i := range left {
		left[i] = h.register(fmt.Sprintf("leaver-%d", i), regOpts{scope: "Scope_LEAVERS_0000"})
		left[i].write(wire.AppendUnregisterFrame(nil, true))
	}
	for _, lc := range left {
		lc.drainUntilClosed()
	}
	require.Equal(t, []string{"legit"}, c.list())
}

func TestSessionInfoIsBrokerBuilt(t *testing.T) {
	h := startBroker(t)
	a := h.register("a", regOpts{name: "Alpha", status: "idle", pid: 77, startedAt: 1760000000123.5})
	b := h.register("b", regOpts{noName: true})
	j := a.expect(wire.TypeSessionJoined)
	require.Equal(t, "b", j.Session.ID)
	require.False(t, j.Session.HasName)
	require.True(t, j.Session.TrustedLocal)
	require.Equal(t, "local", j.Session.Origin)
	b.write(wire.AppendListRequest(nil, "r"))
	raw := b.nextRaw()
	require.Contains(t, string(raw), `{"id":"a","name":"Alpha","cwd":"/work/a","model":"test-model","pid":77,"startedAt":1760000000123.5,"lastActivity":1760000000000,"status":"idle","trustedLocal":true,"origin":"local"}`)
	require.NotContains(t, string(raw), "rt-a", "runtimeInstanceId is never emitted")
}

func TestTooManySessions(t *testing.T) {
	h := startBroker(t, func(c *Config) { c.MaxSessions = 3 })
	var cs []*client
	for i := 0; i < 3; i++ {
		cs = append(cs, h.register(fmt.Sprintf("s%d", i), regOpts{scope: fmt.Sprintf("Scope_CAP_%08d", i)}))
	}
	c := h.dial()
	c.write(registerFrame("s3", regOpts{}))
	c.expectError(wire.CodeTooManySessions, "Too many registered intercom sessions")
	c.expectClosed()
	// A replacement of a live id is not a new session.
	r := h.dial()
	r.write(registerFrame("s0", regOpts{scope: "Scope_CAP_00000000"}))
	r.expect(wire.TypeRegistered)
	cs[0].expectClosed()
}
