package broker

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func TestSendDeliveredAfterAck(t *testing.T) {
	h := startBroker(t)
	a := h.register("aaaa-1111", regOpts{name: "alpha"})
	b := h.register("bbbb-2222", regOpts{name: "beta"})
	a.expect(wire.TypeSessionJoined)

	msg := []byte(`{"id":"m1","timestamp":1760000000001,"content":{"text":"<hi & \u00e9>"},"custom":{"z":1,"a":[2]}}`)
	a.send("BETA", msg)
	acc := a.expect(wire.TypeDeliveryAccepted)
	require.Equal(t, "m1", acc.MessageID)
	raw := b.nextRaw()
	m, err := wire.DecodeBrokerFrame(raw)
	require.NoError(t, err)
	require.Equal(t, acc.DeliveryID, m.DeliveryID)
	require.Equal(t, string(msg), string(m.Message), "message forwarded byte for byte")
	require.Equal(t, "aaaa-1111", m.From.ID)
	require.Equal(t, "alpha", m.From.Name)
	a.quiet(50 * time.Millisecond) // not delivered until acknowledged
	b.ack(m.DeliveryID)
	d := a.expect(wire.TypeDelivered)
	require.Equal(t, acc.DeliveryID, d.DeliveryID)

	// An identical retry is deduplicated: accepted + delivered again with
	// the original deliveryId, and no second message.
	a.send("BETA", msg)
	require.Equal(t, acc.DeliveryID, a.expect(wire.TypeDeliveryAccepted).DeliveryID)
	require.Equal(t, acc.DeliveryID, a.expect(wire.TypeDelivered).DeliveryID)
	b.quiet(50 * time.Millisecond)

	// Same id, different payload: refused.
	a.send("BETA", []byte(`{"id":"m1","timestamp":1,"content":{"text":"changed"}}`))
	a.expectFailed("m1", false, wire.FailDuplicateMessageID)
	// Same id and content, other selector: a different fingerprint.
	a.send("bbbb-2222", msg)
	a.expectFailed("m1", false, wire.FailDuplicateMessageID)

	// Self-send is not refused by the broker.
	a.send("aaaa-1111", message("self", "me"))
	a.expect(wire.TypeDeliveryAccepted)
	self := a.expect(wire.TypeMessage)
	a.ack(self.DeliveryID)
	a.expect(wire.TypeDelivered)
}

func TestRetryWhilePendingReemitsAccepted(t *testing.T) {
	h := startBroker(t)
	a := h.register("a", regOpts{})
	b := h.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)
	msg := message("p1", "x")
	a.send("b", msg)
	acc := a.expect(wire.TypeDeliveryAccepted)
	m := b.expect(wire.TypeMessage)
	a.send("b", msg)
	require.Equal(t, acc.DeliveryID, a.expect(wire.TypeDeliveryAccepted).DeliveryID)
	b.quiet(50 * time.Millisecond)
	a.send("b", message("p1", "different"))
	a.expectFailed("p1", false, wire.FailDuplicateMessageID)
	b.ack(m.DeliveryID)
	a.expect(wire.TypeDelivered)
}

func TestDeliveryFailures(t *testing.T) {
	h := startBroker(t, func(c *Config) { c.DeliveryTimeout = 200 * time.Millisecond })
	a := h.register("a", regOpts{})
	b := h.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)

	a.send("nobody", message("n1", "x"))
	f := a.expectFailed("n1", false, wire.FailSessionNotFound)
	require.Equal(t, "Session not found", f.Reason)

	// Receiver rejection fails at once, accepted:true.
	a.send("b", message("r1", "x"))
	a.expect(wire.TypeDeliveryAccepted)
	m := b.expect(wire.TypeMessage)
	b.write(wire.AppendMessageRejected(nil, m.DeliveryID, "conflicting content"))
	f = a.expectFailed("r1", true, wire.FailConflictingMessageID)
	require.Equal(t, "conflicting content", f.Reason)

	// No ack: DELIVERY_TIMEOUT, then a retry of the same message is fresh.
	msg := message("t1", "x")
	a.send("b", msg)
	a.expect(wire.TypeDeliveryAccepted)
	first := b.expect(wire.TypeMessage)
	a.expectFailed("t1", true, wire.FailDeliveryTimeout)
	b.ack(first.DeliveryID) // too late: ignored
	a.quiet(50 * time.Millisecond)
	a.send("b", msg)
	acc := a.expect(wire.TypeDeliveryAccepted)
	require.NotEqual(t, first.DeliveryID, acc.DeliveryID)
	second := b.expect(wire.TypeMessage)
	b.ack(second.DeliveryID)
	a.expect(wire.TypeDelivered)

	// An ack from someone other than the recipient is ignored.
	a.send("b", message("w1", "x"))
	a.expect(wire.TypeDeliveryAccepted)
	m = b.expect(wire.TypeMessage)
	a.ack(m.DeliveryID)
	a.quiet(50 * time.Millisecond)
	b.ack(m.DeliveryID)
	a.expect(wire.TypeDelivered)

	// Recipient disconnects before acknowledging.
	a.send("b", message("d1", "x"))
	a.expect(wire.TypeDeliveryAccepted)
	b.expect(wire.TypeMessage)
	b.nc.Close()
	// The audience hears session_left before the pending delivery fails, as
	// the reference broker orders it.
	require.Equal(t, "b", a.expect(wire.TypeSessionLeft).SessionID)
	a.expectFailed("d1", true, wire.FailRecipientDisconnected)
}

func TestSenderDisconnectedAndReplacement(t *testing.T) {
	h := startBroker(t)
	a := h.register("a", regOpts{runtime: "rtA"})
	b := h.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)
	a.send("b", message("s1", "x"))
	a.expect(wire.TypeDeliveryAccepted)
	m := b.expect(wire.TypeMessage)

	// Same runtime registers again: the old socket's pending send fails
	// SENDER_DISCONNECTED on the old socket, then it is ended.
	a2 := h.dial()
	a2.write(registerFrame("a", regOpts{runtime: "rtA"}))
	a.expectFailed("s1", true, wire.FailSenderDisconnected)
	a.expectClosed()
	a2.expect(wire.TypeRegistered)
	require.Equal(t, "a", b.expect(wire.TypeSessionLeft).SessionID)
	require.Equal(t, "a", b.expect(wire.TypeSessionJoined).Session.ID)
	b.ack(m.DeliveryID) // the delivery is gone
	a2.quiet(50 * time.Millisecond)
}

func TestInvalidMessages(t *testing.T) {
	h := startBroker(t)
	a := h.register("a", regOpts{})
	h.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)

	big := strings.Repeat("x", wire.MaxTextBytes+1)
	a.send("b", message("big", big))
	a.expectFailed("big", false, wire.FailInvalidMessage)
	a.send("b", []byte(`{"timestamp":1,"content":{"text":""}}`))
	a.expectFailed("unknown", false, wire.FailInvalidMessage)
	a.writeJSON(`{"type":"send","message":{"id":"nt","timestamp":1,"content":{"text":""}}}`)
	a.expectFailed("nt", false, wire.FailInvalidMessage)
	a.send("b", []byte(`{"id":"c1","timestamp":1,"replyTo":"q","content":{"text":"","control":{"type":"x","version":1}}}`))
	a.expectFailed("c1", false, wire.FailInvalidMessage)
	a.send("b", []byte(`{"id":"boss0","timestamp":1,"content":{"text":"","control":{"type":"boss.assign","version":1}}}`))
	a.expectFailed("boss0", false, wire.FailInvalidMessage)
	a.send("b", []byte(`{"id":"boss1","timestamp":1,"content":{"text":"","control":{"type":"boss.worker.health","version":1,"messageId":"boss1","bossRunId":"r","participantId":"p","bindingEpoch":2,"idempotencyKey":"k","payload":null}}}`))
	a.expectFailed("boss1", false, wire.FailControlDispatchUnavailable)
	a.send("b", []byte(`{"id":"boss2","timestamp":1,"content":{"text":""},"control":{"type":"assign"}}`))
	a.expectFailed("boss2", false, wire.FailControlDispatchUnavailable)
	a.send("b", message("exact", strings.Repeat("é", wire.MaxTextBytes/2)))
	a.expect(wire.TypeDeliveryAccepted)
}

func TestPerSenderPendingBound(t *testing.T) {
	h := startBroker(t, func(c *Config) { c.RateCapacity = 10000 })
	a := h.register("a", regOpts{})
	b := h.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)
	for i := 0; i < MaxPendingPerSender; i++ {
		a.send("b", message(fmt.Sprintf("p%d", i), "x"))
		a.expect(wire.TypeDeliveryAccepted)
		b.expect(wire.TypeMessage)
	}
	a.send("b", message("over", "x"))
	a.expectFailed("over", false, wire.FailTooManyPendingDeliveries)
}

func TestTargetResolution(t *testing.T) {
	h := startBroker(t)
	s := h.register("sender", regOpts{})
	h.register("abcd-1", regOpts{name: "Worker"})
	h.register("abcd-2", regOpts{name: "worker"})
	h.register("squat", regOpts{name: "zzzz"})  // named like another's id prefix
	h.register("zzzz-42", regOpts{name: "zed"}) // id starts with "zzzz"
	h.register("uniq-99", regOpts{name: "solo"})
	for i := 0; i < 5; i++ {
		s.expect(wire.TypeSessionJoined)
	}
	s.send("WORKER", message("amb", "x"))
	f := s.expectFailed("amb", false, wire.FailAmbiguousTarget)
	require.Equal(t, `Multiple sessions named "WORKER" are connected. Use the session ID instead.`, f.Reason)
	s.send("abcd", message("amb2", "x"))
	s.expectFailed("amb2", false, wire.FailAmbiguousTarget)
	s.send("abcd-2", message("exact", "x"))
	s.expect(wire.TypeDeliveryAccepted)
	s.send("uniq", message("prefix", "x"))
	s.expect(wire.TypeDeliveryAccepted)
	// An exact name beats a session whose id merely starts with it.
	s.send("zzzz", message("name-wins", "x"))
	s.expect(wire.TypeDeliveryAccepted)
	s.send("UNIQ", message("prefix-is-case-sensitive", "x"))
	s.expectFailed("prefix-is-case-sensitive", false, wire.FailSessionNotFound)
}

func TestPresenceCoalescing(t *testing.T) {
	h := startBroker(t)
	a := h.register("a", regOpts{})
	b := h.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)
	frame := wire.AppendPresenceFrame(nil, &wire.Presence{Status: "thinking", HasStatus: true})
	for i := 0; i < 21; i++ {
		b.write(frame)
	}
	p := a.expect(wire.TypePresenceUpdate)
	require.Equal(t, "thinking", p.Session.Status)
	require.Greater(t, p.Session.LastActivity, float64(1760000000000), "lastActivity is broker time")
	a.quiet(200 * time.Millisecond)
	b.quiet(10 * time.Millisecond) // the subject hears nothing of itself
	b.write(wire.AppendPresenceFrame(nil, &wire.Presence{Name: "renamed", HasName: true}))
	require.Equal(t, "renamed", a.expect(wire.TypePresenceUpdate).Session.Name)
	time.Sleep(1100 * time.Millisecond)
	b.write(wire.AppendPresenceFrame(nil, &wire.Presence{Name: "renamed", HasName: true}))
	a.expect(wire.TypePresenceUpdate) // heartbeat after a second
	a.send("RENAMED", message("byname", "x"))
	a.expect(wire.TypeDeliveryAccepted)
	b.expect(wire.TypeMessage)

	b.writeJSON(`{"type":"presence","status":7}`)
	b.expectError(wire.CodeInvalidRequest, "Invalid presence status")
	b.expectClosed()
}

func TestRateLimit(t *testing.T) {
	frozen := time.Now()
	h := startBroker(t, func(c *Config) { c.RateClock = func() time.Time { return frozen } })
	a := h.register("a", regOpts{})
	h.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)
	// ~200 KiB sends cost 26 tokens: nine pass the 240-token bucket (after
	// the register's 1), the tenth is limited (spec §6.6).
	text := strings.Repeat("y", 200*1024)
	var burst []byte
	for i := 0; i < 10; i++ {
		burst = wire.AppendSendFrame(burst, "b", message(fmt.Sprintf("r%d", i), text))
	}
	a.write(burst)
	for i := 0; i < 9; i++ {
		a.expect(wire.TypeDeliveryAccepted)
	}
	a.expectError(wire.CodeRateLimited, "Intercom broker rate limit exceeded")
	a.expectClosed()

	c := h.dial()
	var healths []byte
	for i := 0; i < 300; i++ {
		healths = wire.AppendHealthRequest(healths, "h")
	}
	_, _ = c.nc.Write(healths) // the broker may cut us off mid-write
	for i := 0; i < 240; i++ {
		c.expect(wire.TypeHealthOK)
	}
	c.expectError(wire.CodeRateLimited, "Intercom broker rate limit exceeded")
	c.expectClosed()
}

func TestSlowReaderIsDroppedWithoutHurtingOthers(t *testing.T) {
	h := startBroker(t, func(c *Config) {
		c.MaxQueueBytes = 2 << 20
		c.RateCapacity = 1e9
		c.RateRefill = 1e9
	})
	slow, err := net.Dial("unix", h.paths.BrokerSocket())
	require.NoError(t, err)
	defer slow.Close()
	_, err = slow.Write(registerFrame("slow", regOpts{scope: "Scope_SLOWREADER_00"}))
	require.NoError(t, err)
	fast := h.register("fast", regOpts{})
	sender := h.register("sender", regOpts{})
	// slow never reads; fill its socket buffer and queue with messages.
	text := strings.Repeat("z", 100*1024)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		sender.send("slow", message(fmt.Sprintf("s%d", i), text))
		f := sender.next()
		for f.Type == wire.TypeSessionJoined || f.Type == wire.TypeSessionLeft {
			f = sender.next()
		}
		if f.Type == wire.TypeDeliveryFailed {
			require.Equal(t, string(wire.FailRecipientDisconnected), f.Code)
			break
		}
		require.Equal(t, wire.TypeDeliveryAccepted, f.Type)
		require.True(t, time.Now().Before(deadline), "slow reader never dropped")
	}
	require.Equal(t, uint64(1), h.b.Stats().SlowConsumersClosed)
	time.Sleep(100 * time.Millisecond)
	sender.drainFrames()
	fast.drainFrames()
	sender.deliver("fast", fast, message("still-fast", "ok"))
}

func (c *client) drainFrames() {
	for {
		select {
		case <-c.frames:
		default:
			return
		}
	}
}
