package broker_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func TestHealthBeforeAndAfterRegister(t *testing.T) {
	h := startBroker(t)
	c := h.Dial()
	c.WriteJSON(`{"type":"health","requestId":"h1"}`)
	raw := c.NextRaw()
	require.Equal(t, `{"type":"health_ok","requestId":"h1","protocol":"pi-intercom","version":4,"endpoint":"local","remoteAccess":{"feature":"remote-access-v1","policySemanticsVersion":2,"policySemanticsHash":"f3b00e503631bc91123aedfbcf1df72cc9913e1893c09728b2c598f3dcdfdfe0"}}`, string(raw))
	c.WriteJSON(`{"type":"health","requestId":"h2"}`)
	require.Equal(t, "h2", c.Expect(wire.TypeHealthOK).RequestID, "health may repeat and does not register")
	c.Write(intercomtest.RegisterFrame("a", intercomtest.RegisterOptions{}))
	require.Equal(t, `{"type":"registered","sessionId":"a","protocol":"pi-intercom","version":4}`, string(c.NextRaw()))
	c.WriteJSON(`{"type":"health","requestId":"h3"}`)
	c.Expect(wire.TypeHealthOK)
}

func TestFragmentedAndCoalescedFramesFromClient(t *testing.T) {
	h := startBroker(t)
	c := h.Dial()
	frames := append(wire.AppendHealthRequest(nil, "h1"), intercomtest.RegisterFrame("frag", intercomtest.RegisterOptions{})...)
	frames = append(frames, wire.AppendListRequest(nil, "l1")...)
	for _, b := range frames { // one byte at a time
		c.Write([]byte{b})
	}
	c.Expect(wire.TypeHealthOK)
	c.Expect(wire.TypeRegistered)
	c.Expect(wire.TypeSessions)
	c.Write(bytes.Repeat(wire.AppendHealthRequest(nil, "x"), 3)) // three frames, one write
	for i := 0; i < 3; i++ {
		c.Expect(wire.TypeHealthOK)
	}
}

func TestMalformedAndOversizedFramesCloseSilently(t *testing.T) {
	h := startBroker(t)
	c := h.Dial()
	c.Write(wire.AppendFrame(nil, []byte(`{"type":"health",`)))
	c.ExpectClosed()

	c = h.Register("big", intercomtest.RegisterOptions{})
	c.Write([]byte{0x00, 0x10, 0x00, 0x01}) // declares 1 MiB + 1
	c.ExpectClosed()

	c = h.Dial()
	c.Write(append([]byte{0x00, 0x10, 0x00, 0x01}, bytes.Repeat([]byte("{"), 4096)...))
	c.ExpectClosed()

	// Exactly 1 MiB is accepted (here: a list padded with spaces).
	c = h.Register("max", intercomtest.RegisterOptions{})
	payload := []byte(`{"type":"list","requestId":"r"}`)
	payload = append(payload, bytes.Repeat([]byte(" "), wire.MaxFrameBytes-len(payload))...)
	c.Write(wire.AppendFrame(nil, payload))
	c.Expect(wire.TypeSessions)
}

func TestInvalidEnvelopes(t *testing.T) {
	h := startBroker(t)
	for _, p := range []string{`[]`, `"x"`, `{}`, `{"type":7}`, `null`} {
		c := h.Dial()
		c.WriteJSON(p)
		c.ExpectError(wire.CodeInvalidRequest, "Invalid client message")
		c.ExpectClosed()
	}
}

func TestFramesBeforeRegister(t *testing.T) {
	h := startBroker(t)
	for _, typ := range []string{"list", "send", "presence", "unregister", "message_received", "defer_ask", "bogus"} {
		c := h.Dial()
		c.WriteJSON(`{"type":"` + typ + `"}`)
		c.ExpectError(wire.CodeInvalidRequest, "Received "+typ+" before register")
		c.ExpectClosed()
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
		c := h.Dial()
		c.WriteJSON(cs.frame)
		c.ExpectError(cs.code, cs.text)
		c.ExpectClosed()
	}

	c := h.Register("dup", intercomtest.RegisterOptions{})
	c.Write(intercomtest.RegisterFrame("dup2", intercomtest.RegisterOptions{}))
	c.ExpectError(wire.CodeInvalidRequest, "Received duplicate register message")
	c.ExpectClosed()

	c = h.Register("unknown", intercomtest.RegisterOptions{})
	c.WriteJSON(`{"type":"shutdown"}`)
	c.ExpectError(wire.CodeInvalidRequest, "Unknown client message type: shutdown")
	c.ExpectClosed()

	c = h.Dial()
	c.WriteJSON(`{"type":"register","protocol":"pi-intercom","version":4,"session":` + session + `}`)
	id := c.Expect(wire.TypeRegistered).SessionID
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id, "no sessionId: a UUID is assigned")
}

func TestAccessControlIsRefused(t *testing.T) {
	h := startBroker(t)
	c := h.Dial()
	c.WriteJSON(`{"type":"access_control","requestId":"r","adminToken":"x","action":"inspect_tree"}`)
	c.ExpectError(wire.CodeAccessDenied, "")
	c.ExpectClosed()
	c = h.Register("ac", intercomtest.RegisterOptions{})
	c.WriteJSON(`{"type":"access_control","requestId":"r"}`)
	c.ExpectError(wire.CodeAccessDenied, "Remote access control requires a short-lived control connection")
}

func TestRegistrationTimeout(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.RegistrationTimeout = time.Second })
	c := h.Dial()
	c.WriteJSON(`{"type":"health","requestId":"h"}`)
	c.Expect(wire.TypeHealthOK)
	c.ExpectClosed()

	// unregister re-arms the timer: the socket is reaped after going idle.
	c = h.Register("u", intercomtest.RegisterOptions{})
	c.Write(wire.AppendUnregisterFrame(nil, false))
	c.ExpectClosed()
}

// Spec §2.0, §6.7: 140 idle raw connections do not block a registration,
// and 40 sockets that unregister and then idle are reaped.
func TestIdleConnectionFloodDoesNotBlockRegistration(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.RegistrationTimeout = time.Second })
	idle := make([]*intercomtest.Client, 140)
	for i := range idle {
		idle[i] = h.Dial()
	}
	// Every idle connection is accepted (held, or closed by the cap)
	// before legit dials: one still in the listen backlog, accepted after
	// legit, would push legit out as the oldest unregistered connection.
	waitFor(t, "every idle connection accepted, within the unregistered cap", func() bool {
		closed := 0
		for _, ic := range idle {
			select {
			case <-ic.Closed:
				closed++
			default:
			}
		}
		held := broker.Unregistered(h.B)
		return held <= broker.DefaultMaxUnregistered && closed+held == len(idle)
	})
	c := h.Register("legit", intercomtest.RegisterOptions{})
	require.Equal(t, []string{"legit"}, c.List())
	for _, ic := range idle {
		ic.ExpectClosed()
	}
	left := make([]*intercomtest.Client, 40)
	for i := range left {
		left[i] = h.Register(fmt.Sprintf("leaver-%d", i), intercomtest.RegisterOptions{Scope: "Scope_LEAVERS_0000"})
		left[i].Write(wire.AppendUnregisterFrame(nil, true))
	}
	for _, lc := range left {
		lc.DrainUntilClosed()
	}
	require.Equal(t, []string{"legit"}, c.List())
}

func TestSessionInfoIsBrokerBuilt(t *testing.T) {
	h := startBroker(t)
	a := h.Register("a", intercomtest.RegisterOptions{Name: "Alpha", Status: "idle", PID: 77, StartedAt: 1760000000123.5})
	b := h.Register("b", intercomtest.RegisterOptions{NoName: true})
	j := a.Expect(wire.TypeSessionJoined)
	require.Equal(t, "b", j.Session.ID)
	require.False(t, j.Session.HasName)
	require.True(t, j.Session.TrustedLocal)
	require.Equal(t, "local", j.Session.Origin)
	b.Write(wire.AppendListRequest(nil, "r"))
	raw := b.NextRaw()
	require.Contains(t, string(raw), `{"id":"a","name":"Alpha","cwd":"/work/a","model":"test-model","pid":77,"startedAt":1760000000123.5,"lastActivity":1760000000000,"status":"idle","trustedLocal":true,"origin":"local"}`)
	require.NotContains(t, string(raw), "rt-a", "runtimeInstanceId is never emitted")
}

func TestTooManySessions(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.MaxSessions = 3 })
	var cs []*intercomtest.Client
	for i := 0; i < 3; i++ {
		cs = append(cs, h.Register(fmt.Sprintf("s%d", i), intercomtest.RegisterOptions{Scope: fmt.Sprintf("Scope_CAP_%08d", i)}))
	}
	c := h.Dial()
	c.Write(intercomtest.RegisterFrame("s3", intercomtest.RegisterOptions{}))
	c.ExpectError(wire.CodeTooManySessions, "Too many registered intercom sessions")
	c.ExpectClosed()
	// A replacement of a live id is not a new session.
	r := h.Dial()
	r.Write(intercomtest.RegisterFrame("s0", intercomtest.RegisterOptions{Scope: "Scope_CAP_00000000"}))
	r.Expect(wire.TypeRegistered)
	cs[0].ExpectClosed()
}
