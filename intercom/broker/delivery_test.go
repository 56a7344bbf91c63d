package broker_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func TestSendDeliveredAfterAck(t *testing.T) {
	h := startBroker(t)
	a := h.Register("aaaa-1111", intercomtest.RegisterOptions{Name: "alpha"})
	b := h.Register("bbbb-2222", intercomtest.RegisterOptions{Name: "beta"})
	a.Expect(wire.TypeSessionJoined)

	msg := []byte(`{"id":"m1","timestamp":1760000000001,"content":{"text":"<hi & \u00e9>"},"custom":{"z":1,"a":[2]}}`)
	a.Send("BETA", msg)
	acc := a.Expect(wire.TypeDeliveryAccepted)
	require.Equal(t, "m1", acc.MessageID)
	raw := b.NextRaw()
	m, err := wire.DecodeBrokerFrame(raw)
	require.NoError(t, err)
	require.Equal(t, acc.DeliveryID, m.DeliveryID)
	require.Equal(t, string(msg), string(m.Message), "message forwarded byte for byte")
	require.Equal(t, "aaaa-1111", m.From.ID)
	require.Equal(t, "alpha", m.From.Name)
	a.Quiet(50 * time.Millisecond) // not delivered until acknowledged
	b.Ack(m.DeliveryID)
	d := a.Expect(wire.TypeDelivered)
	require.Equal(t, acc.DeliveryID, d.DeliveryID)

	// An identical retry is deduplicated: accepted + delivered again with
	// the original deliveryId, and no second message.
	a.Send("BETA", msg)
	require.Equal(t, acc.DeliveryID, a.Expect(wire.TypeDeliveryAccepted).DeliveryID)
	require.Equal(t, acc.DeliveryID, a.Expect(wire.TypeDelivered).DeliveryID)
	b.Quiet(50 * time.Millisecond)

	// Same id, different payload: refused.
	a.Send("BETA", []byte(`{"id":"m1","timestamp":1,"content":{"text":"changed"}}`))
	a.ExpectFailed("m1", false, wire.FailDuplicateMessageID)
	// Same id and content, other selector: a different fingerprint.
	a.Send("bbbb-2222", msg)
	a.ExpectFailed("m1", false, wire.FailDuplicateMessageID)

	// Self-send is not refused by the broker.
	a.Send("aaaa-1111", intercomtest.Message("self", "me"))
	a.Expect(wire.TypeDeliveryAccepted)
	self := a.Expect(wire.TypeMessage)
	a.Ack(self.DeliveryID)
	a.Expect(wire.TypeDelivered)
}

func TestRetryWhilePendingReemitsAccepted(t *testing.T) {
	h := startBroker(t)
	a := h.Register("a", intercomtest.RegisterOptions{})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	msg := intercomtest.Message("p1", "x")
	a.Send("b", msg)
	acc := a.Expect(wire.TypeDeliveryAccepted)
	m := b.Expect(wire.TypeMessage)
	a.Send("b", msg)
	require.Equal(t, acc.DeliveryID, a.Expect(wire.TypeDeliveryAccepted).DeliveryID)
	b.Quiet(50 * time.Millisecond)
	a.Send("b", intercomtest.Message("p1", "different"))
	a.ExpectFailed("p1", false, wire.FailDuplicateMessageID)
	b.Ack(m.DeliveryID)
	a.Expect(wire.TypeDelivered)
}

func TestDeliveryFailures(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.DeliveryTimeout = 200 * time.Millisecond })
	a := h.Register("a", intercomtest.RegisterOptions{})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)

	a.Send("nobody", intercomtest.Message("n1", "x"))
	f := a.ExpectFailed("n1", false, wire.FailSessionNotFound)
	require.Equal(t, "Session not found", f.Reason)

	// Receiver rejection fails at once, accepted:true.
	a.Send("b", intercomtest.Message("r1", "x"))
	a.Expect(wire.TypeDeliveryAccepted)
	m := b.Expect(wire.TypeMessage)
	b.Write(wire.AppendMessageRejected(nil, m.DeliveryID, "conflicting content"))
	f = a.ExpectFailed("r1", true, wire.FailConflictingMessageID)
	require.Equal(t, "conflicting content", f.Reason)

	// No ack: DELIVERY_TIMEOUT, then a retry of the same message is fresh.
	msg := intercomtest.Message("t1", "x")
	a.Send("b", msg)
	a.Expect(wire.TypeDeliveryAccepted)
	first := b.Expect(wire.TypeMessage)
	a.ExpectFailed("t1", true, wire.FailDeliveryTimeout)
	b.Ack(first.DeliveryID) // too late: ignored
	a.Quiet(50 * time.Millisecond)
	a.Send("b", msg)
	acc := a.Expect(wire.TypeDeliveryAccepted)
	require.NotEqual(t, first.DeliveryID, acc.DeliveryID)
	second := b.Expect(wire.TypeMessage)
	b.Ack(second.DeliveryID)
	a.Expect(wire.TypeDelivered)

	// An ack from someone other than the recipient is ignored.
	a.Send("b", intercomtest.Message("w1", "x"))
	a.Expect(wire.TypeDeliveryAccepted)
	m = b.Expect(wire.TypeMessage)
	a.Ack(m.DeliveryID)
	a.Quiet(50 * time.Millisecond)
	b.Ack(m.DeliveryID)
	a.Expect(wire.TypeDelivered)

	// Recipient disconnects before acknowledging.
	a.Send("b", intercomtest.Message("d1", "x"))
	a.Expect(wire.TypeDeliveryAccepted)
	b.Expect(wire.TypeMessage)
	b.Conn.Close()
	// The audience hears session_left before the pending delivery fails, as
	// the reference broker orders it.
	require.Equal(t, "b", a.Expect(wire.TypeSessionLeft).SessionID)
	a.ExpectFailed("d1", true, wire.FailRecipientDisconnected)
}

func TestSenderDisconnectedAndReplacement(t *testing.T) {
	h := startBroker(t)
	a := h.Register("a", intercomtest.RegisterOptions{Runtime: "rtA"})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	a.Send("b", intercomtest.Message("s1", "x"))
	a.Expect(wire.TypeDeliveryAccepted)
	m := b.Expect(wire.TypeMessage)

	// Same runtime registers again: the old socket's pending send fails
	// SENDER_DISCONNECTED on the old socket, then it is ended.
	a2 := h.Dial()
	a2.Write(intercomtest.RegisterFrame("a", intercomtest.RegisterOptions{Runtime: "rtA"}))
	a.ExpectFailed("s1", true, wire.FailSenderDisconnected)
	a.ExpectClosed()
	a2.Expect(wire.TypeRegistered)
	require.Equal(t, "a", b.Expect(wire.TypeSessionLeft).SessionID)
	require.Equal(t, "a", b.Expect(wire.TypeSessionJoined).Session.ID)
	b.Ack(m.DeliveryID) // the delivery is gone
	a2.Quiet(50 * time.Millisecond)
}

func TestInvalidMessages(t *testing.T) {
	h := startBroker(t)
	a := h.Register("a", intercomtest.RegisterOptions{})
	h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)

	big := strings.Repeat("x", wire.MaxTextBytes+1)
	a.Send("b", intercomtest.Message("big", big))
	a.ExpectFailed("big", false, wire.FailInvalidMessage)
	a.Send("b", []byte(`{"timestamp":1,"content":{"text":""}}`))
	a.ExpectFailed("unknown", false, wire.FailInvalidMessage)
	a.WriteJSON(`{"type":"send","message":{"id":"nt","timestamp":1,"content":{"text":""}}}`)
	a.ExpectFailed("nt", false, wire.FailInvalidMessage)
	a.Send("b", []byte(`{"id":"c1","timestamp":1,"replyTo":"q","content":{"text":"","control":{"type":"x","version":1}}}`))
	a.ExpectFailed("c1", false, wire.FailInvalidMessage)
	a.Send("b", []byte(`{"id":"boss0","timestamp":1,"content":{"text":"","control":{"type":"boss.assign","version":1}}}`))
	a.ExpectFailed("boss0", false, wire.FailInvalidMessage)
	a.Send("b", []byte(`{"id":"boss1","timestamp":1,"content":{"text":"","control":{"type":"boss.worker.health","version":1,"messageId":"boss1","bossRunId":"r","participantId":"p","bindingEpoch":2,"idempotencyKey":"k","payload":null}}}`))
	a.ExpectFailed("boss1", false, wire.FailControlDispatchUnavailable)
	a.Send("b", []byte(`{"id":"boss2","timestamp":1,"content":{"text":""},"control":{"type":"assign"}}`))
	a.ExpectFailed("boss2", false, wire.FailControlDispatchUnavailable)
	a.Send("b", intercomtest.Message("exact", strings.Repeat("é", wire.MaxTextBytes/2)))
	a.Expect(wire.TypeDeliveryAccepted)
}

// A send within the 1 MiB frame whose delivery, which adds the sender's
// session info, would be over it is refused as INVALID_MESSAGE: no reader
// could take the message frame. The connection goes on.
func TestSendWhoseDeliveryIsOverTheFrame(t *testing.T) {
	h := startBroker(t)
	a := h.Register("a", intercomtest.RegisterOptions{Name: "A sender with a name"})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	at := func(pad int) []byte {
		return intercomtest.Message("full", "", func(m *wire.Message) {
			m.Attachments = []wire.Attachment{{Type: "file", Name: "one", Content: strings.Repeat("x", wire.MaxAttachmentContentBytes)},
				{Type: "file", Name: "two", Content: strings.Repeat("y", pad)}}
		})
	}
	probe := len(wire.AppendSendFrame(nil, "b", at(0))) - wire.HeaderBytes
	msg := at(wire.MaxFrameBytes - probe) // the send frame exactly 1 MiB
	require.Equal(t, wire.MaxFrameBytes, len(wire.AppendSendFrame(nil, "b", msg))-wire.HeaderBytes)
	a.Send("b", msg)
	a.ExpectFailed("full", false, wire.FailInvalidMessage)
	a.Send("b", intercomtest.Message("after", "still connected"))
	a.Expect(wire.TypeDeliveryAccepted)
	require.Contains(t, string(b.Expect(wire.TypeMessage).Message), `"id":"after"`)
}

func TestPerSenderPendingBound(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.RateCapacity = 10000 })
	a := h.Register("a", intercomtest.RegisterOptions{})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	for i := 0; i < broker.MaxPendingPerSender; i++ {
		a.Send("b", intercomtest.Message(fmt.Sprintf("p%d", i), "x"))
		a.Expect(wire.TypeDeliveryAccepted)
		b.Expect(wire.TypeMessage)
	}
	a.Send("b", intercomtest.Message("over", "x"))
	a.ExpectFailed("over", false, wire.FailTooManyPendingDeliveries)
}

func TestTargetResolution(t *testing.T) {
	h := startBroker(t)
	s := h.Register("sender", intercomtest.RegisterOptions{})
	h.Register("abcd-1", intercomtest.RegisterOptions{Name: "Worker"})
	h.Register("abcd-2", intercomtest.RegisterOptions{Name: "worker"})
	h.Register("squat", intercomtest.RegisterOptions{Name: "zzzz"})  // named like another's id prefix
	h.Register("zzzz-42", intercomtest.RegisterOptions{Name: "zed"}) // id starts with "zzzz"
	h.Register("uniq-99", intercomtest.RegisterOptions{Name: "solo"})
	for i := 0; i < 5; i++ {
		s.Expect(wire.TypeSessionJoined)
	}
	s.Send("WORKER", intercomtest.Message("amb", "x"))
	f := s.ExpectFailed("amb", false, wire.FailAmbiguousTarget)
	require.Equal(t, `Multiple sessions named "WORKER" are connected. Use the session ID instead.`, f.Reason)
	s.Send("abcd", intercomtest.Message("amb2", "x"))
	s.ExpectFailed("amb2", false, wire.FailAmbiguousTarget)
	s.Send("abcd-2", intercomtest.Message("exact", "x"))
	s.Expect(wire.TypeDeliveryAccepted)
	s.Send("uniq", intercomtest.Message("prefix", "x"))
	s.Expect(wire.TypeDeliveryAccepted)
	// An exact name beats a session whose id merely starts with it.
	s.Send("zzzz", intercomtest.Message("name-wins", "x"))
	s.Expect(wire.TypeDeliveryAccepted)
	s.Send("UNIQ", intercomtest.Message("prefix-is-case-sensitive", "x"))
	s.ExpectFailed("prefix-is-case-sensitive", false, wire.FailSessionNotFound)
}

func TestPresenceCoalescing(t *testing.T) {
	h := startBroker(t)
	a := h.Register("a", intercomtest.RegisterOptions{})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	frame := wire.AppendPresenceFrame(nil, &wire.Presence{Status: "thinking", HasStatus: true})
	for i := 0; i < 21; i++ {
		b.Write(frame)
	}
	p := a.Expect(wire.TypePresenceUpdate)
	require.Equal(t, "thinking", p.Session.Status)
	require.Greater(t, p.Session.LastActivity, float64(1760000000000), "lastActivity is broker time")
	a.Quiet(200 * time.Millisecond)
	b.Quiet(10 * time.Millisecond) // the subject hears nothing of itself
	b.Write(wire.AppendPresenceFrame(nil, &wire.Presence{Name: "renamed", HasName: true}))
	require.Equal(t, "renamed", a.Expect(wire.TypePresenceUpdate).Session.Name)
	time.Sleep(1100 * time.Millisecond)
	b.Write(wire.AppendPresenceFrame(nil, &wire.Presence{Name: "renamed", HasName: true}))
	a.Expect(wire.TypePresenceUpdate) // heartbeat after a second
	a.Send("RENAMED", intercomtest.Message("byname", "x"))
	a.Expect(wire.TypeDeliveryAccepted)
	b.Expect(wire.TypeMessage)

	b.WriteJSON(`{"type":"presence","status":7}`)
	b.ExpectError(wire.CodeInvalidRequest, "Invalid presence status")
	b.ExpectClosed()
}

func TestRateLimit(t *testing.T) {
	frozen := time.Now()
	h := startBroker(t, func(c *broker.Config) { c.RateClock = func() time.Time { return frozen } })
	a := h.Register("a", intercomtest.RegisterOptions{})
	h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	// ~200 KiB sends cost 26 tokens: nine pass the 240-token bucket (after
	// the register's 1), the tenth is limited (spec §6.6).
	text := strings.Repeat("y", 200*1024)
	var burst []byte
	for i := 0; i < 10; i++ {
		burst = wire.AppendSendFrame(burst, "b", intercomtest.Message(fmt.Sprintf("r%d", i), text))
	}
	a.Write(burst)
	for i := 0; i < 9; i++ {
		a.Expect(wire.TypeDeliveryAccepted)
	}
	a.ExpectError(wire.CodeRateLimited, "Intercom broker rate limit exceeded")
	a.ExpectClosed()

	c := h.Dial()
	var healths []byte
	for i := 0; i < 300; i++ {
		healths = wire.AppendHealthRequest(healths, "h")
	}
	_, _ = c.Conn.Write(healths) // the broker may cut us off mid-write
	for i := 0; i < 240; i++ {
		c.Expect(wire.TypeHealthOK)
	}
	c.ExpectError(wire.CodeRateLimited, "Intercom broker rate limit exceeded")
	c.ExpectClosed()
}

func TestSlowReaderIsDroppedWithoutHurtingOthers(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) {
		c.MaxQueueBytes = 2 << 20
		c.RateCapacity = 1e9
		c.RateRefill = 1e9
	})
	slow, err := net.Dial("unix", h.Paths.BrokerSocket())
	require.NoError(t, err)
	defer slow.Close()
	_, err = slow.Write(intercomtest.RegisterFrame("slow", intercomtest.RegisterOptions{Scope: "Scope_SLOWREADER_00"}))
	require.NoError(t, err)
	fast := h.Register("fast", intercomtest.RegisterOptions{})
	sender := h.Register("sender", intercomtest.RegisterOptions{})
	// slow never reads; fill its socket buffer and queue with messages.
	text := strings.Repeat("z", 100*1024)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		sender.Send("slow", intercomtest.Message(fmt.Sprintf("s%d", i), text))
		f := sender.Next()
		for f.Type == wire.TypeSessionJoined || f.Type == wire.TypeSessionLeft {
			f = sender.Next()
		}
		if f.Type == wire.TypeDeliveryFailed {
			require.Equal(t, string(wire.FailRecipientDisconnected), f.Code)
			break
		}
		require.Equal(t, wire.TypeDeliveryAccepted, f.Type)
		require.True(t, time.Now().Before(deadline), "slow reader never dropped")
	}
	require.Equal(t, uint64(1), h.B.Stats().SlowConsumersClosed)
	time.Sleep(100 * time.Millisecond)
	sender.Drain()
	fast.Drain()
	sender.Deliver("fast", fast, intercomtest.Message("still-fast", "ok"))
}

func TestDedupCacheBoundAndRecipientGone(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.RecentMax = 4 })
	a := h.Register("a", intercomtest.RegisterOptions{})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	first := intercomtest.Message("first", "x")
	a.Deliver("b", b, first)
	for i := range 4 {
		a.Deliver("b", b, intercomtest.Message(fmt.Sprintf("n%d", i), "x"))
	}
	require.Equal(t, 4, h.B.Stats().RecentDeliveries)
	// The first record was evicted: a retry is delivered afresh.
	a.Deliver("b", b, first)

	// A retry of a delivered message whose recipient has left is a fresh
	// send, and fails as one.
	last := intercomtest.Message("last", "x")
	a.Deliver("b", b, last)
	b.Conn.Close()
	require.Equal(t, "b", a.Expect(wire.TypeSessionLeft).SessionID)
	a.Send("b", last)
	a.ExpectFailed("last", false, wire.FailSessionNotFound)
}

// Deliveries share one deadline queue (deadline.go): the unacknowledged
// ones among many acknowledged fail DELIVERY_TIMEOUT, once each and in
// the order they were accepted, while those acknowledged in time never
// do, and the queue works again once it has emptied. (The timeout is long
// enough for a busy machine to acknowledge in time.)
func TestDeliveryTimeoutsAmongAcknowledged(t *testing.T) {
	t.Parallel()
	h := startBroker(t, func(c *broker.Config) {
		c.DeliveryTimeout = 1500 * time.Millisecond
		c.RateCapacity = 1000
	})
	a := h.Register("a", intercomtest.RegisterOptions{})
	b := h.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)

	unacked := map[string]bool{"m10": true, "m50": true, "m99": true}
	for i := range 100 {
		id := fmt.Sprintf("m%d", i)
		a.Send("b", intercomtest.Message(id, "x"))
		m := b.Expect(wire.TypeMessage)
		if !unacked[id] {
			b.Ack(m.DeliveryID)
		}
	}
	var failed []string
	accepted, delivered := 0, 0
	for accepted < 100 || delivered+len(failed) < 100 {
		f := a.Next()
		switch f.Type {
		case wire.TypeDeliveryAccepted:
			accepted++
		case wire.TypeDelivered:
			require.False(t, unacked[f.MessageID], "%s was never acknowledged", f.MessageID)
			delivered++
		case wire.TypeDeliveryFailed:
			require.Equal(t, string(wire.FailDeliveryTimeout), f.Code, "%+v", f)
			failed = append(failed, f.MessageID)
		default:
			t.Fatalf("unexpected frame %+v", f)
		}
	}
	require.Equal(t, []string{"m10", "m50", "m99"}, failed)
	a.Quiet(200 * time.Millisecond)

	// Emptied: a new delivery is timed again, and an acknowledged one is not.
	a.Send("b", intercomtest.Message("late", "x"))
	a.Expect(wire.TypeDeliveryAccepted)
	b.Expect(wire.TypeMessage)
	a.Send("b", intercomtest.Message("ok", "x"))
	a.Expect(wire.TypeDeliveryAccepted)
	b.Ack(b.Expect(wire.TypeMessage).DeliveryID)
	require.Equal(t, "ok", a.Expect(wire.TypeDelivered).MessageID)
	a.ExpectFailed("late", true, wire.FailDeliveryTimeout)
}

// Names match as the TypeScript broker lowercases them (JavaScript's
// toLowerCase, wire.LowerName): İ is "i̇", a word-final Σ is ς — a name
// written with its ordinary final sigma reaches the session here as there.
func TestSendMatchesNamesAsJavaScriptLowercases(t *testing.T) {
	h := startBroker(t)
	a := h.Register("sender", intercomtest.RegisterOptions{})
	a.SkipBroadcasts = true
	h.Register("uc-b", intercomtest.RegisterOptions{Name: "İstanbul"})
	h.Register("uc-c", intercomtest.RegisterOptions{Name: "ΟΔΟΣ"})
	for i, c := range []struct {
		to    string
		found bool
	}{{"i\u0307stanbul", true}, {"istanbul", false}, {"οδος", true}, {"οδοσ", false}, {"ΟΔΟΣ", true}} {
		id := fmt.Sprintf("n%d", i)
		a.Send(c.to, intercomtest.Message(id, "hello"))
		if c.found {
			require.Equal(t, id, a.Expect(wire.TypeDeliveryAccepted).MessageID, c.to)
		} else {
			a.ExpectFailed(id, false, wire.FailSessionNotFound)
		}
	}
}
