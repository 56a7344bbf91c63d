package broker_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// trio registers a, b and c in one scope and drains the join frames.
func trio(t *testing.T, h *intercomtest.Broker) (a, b, c *intercomtest.Client) {
	a = h.Register("a", intercomtest.RegisterOptions{})
	b = h.Register("b", intercomtest.RegisterOptions{})
	c = h.Register("c", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	a.Expect(wire.TypeSessionJoined)
	b.Expect(wire.TypeSessionJoined)
	return a, b, c
}

func TestAskRules(t *testing.T) {
	h := startBroker(t)
	a, b, c := trio(t, h)

	q1 := a.Deliver("b", b, intercomtest.Message("q1", "ok?", intercomtest.AsAsk))
	require.Contains(t, string(q1.Message), `"expectsReply":true`)
	edges := readAskStateEventually(t, h, 1)
	require.Equal(t, "q1", edges[0]["messageId"])
	require.Equal(t, "a", edges[0]["from"])
	require.Equal(t, "b", edges[0]["to"])
	require.Equal(t, "blocking", edges[0]["state"])

	a.Send("b", intercomtest.Message("q2", "again?", intercomtest.AsAsk))
	f := a.ExpectFailed("q2", false, wire.FailAskAlreadyPending)
	require.Contains(t, f.Reason, "Another ask to this session is still unresolved")
	a.Deliver("c", c, intercomtest.Message("qc", "you?", intercomtest.AsAsk)) // other recipients are fine

	b.Send("a", intercomtest.Message("rev", "me first?", intercomtest.AsAsk))
	b.ExpectFailed("rev", false, wire.FailMutualAsk)

	// A reply that is itself an ask, threaded on the reverse edge, is fine.
	b.Deliver("a", a, intercomtest.Message("r1", "which one?", intercomtest.ReplyTo("q1"), intercomtest.AsAsk))
	// a's edge to b is answered; b's new edge to a waits.
	a.Deliver("b", b, intercomtest.Message("r2", "the first", intercomtest.ReplyTo("r1")))
	a.Deliver("b", b, intercomtest.Message("q3", "new question", intercomtest.AsAsk))

	// Replies must match a live edge, from its recipient.
	b.Send("a", intercomtest.Message("bogus", "x", intercomtest.ReplyTo("nope")))
	f = b.ExpectFailed("bogus", false, wire.FailInvalidReplyTarget)
	require.Equal(t, "Reply target does not match a pending ask", f.Reason)
	c.Send("a", intercomtest.Message("forged", "x", intercomtest.ReplyTo("q3")))
	f = c.ExpectFailed("forged", false, wire.FailInvalidReplyTarget)
	require.Equal(t, "Reply target does not match the pending ask", f.Reason)
}

func TestAskDeferCancelAndLateReply(t *testing.T) {
	h := startBroker(t)
	a, b, _ := trio(t, h)
	a.Deliver("b", b, intercomtest.Message("q1", "slow question", intercomtest.AsAsk))

	require.True(t, a.AskControl(wire.TypeDeferAsk, "q1"))
	d := b.Expect(wire.TypeAskDeferred)
	require.Equal(t, "q1", d.MessageID)
	require.Equal(t, "a", d.FromID)
	require.True(t, a.AskControl(wire.TypeDeferAsk, "q1"), "already deferred: applied, no notice")
	b.Quiet(50 * time.Millisecond)
	require.False(t, b.AskControl(wire.TypeDeferAsk, "q1"), "only the asker controls its edge")
	require.False(t, a.AskControl(wire.TypeCancelAsk, "nope"))

	// A deferred edge no longer blocks the reverse direction, but still
	// blocks a second ask to the same peer.
	b.Deliver("a", a, intercomtest.Message("bq", "meanwhile?", intercomtest.AsAsk))
	a.Send("b", intercomtest.Message("q2", "x", intercomtest.AsAsk))
	a.ExpectFailed("q2", false, wire.FailAskAlreadyPending)

	// The late reply is still accepted and clears the edge.
	b.Deliver("a", a, intercomtest.Message("late", "here you go", intercomtest.ReplyTo("q1")))
	a.Deliver("b", b, intercomtest.Message("bqr", "answer", intercomtest.ReplyTo("bq")))
	a.Deliver("b", b, intercomtest.Message("q3", "next", intercomtest.AsAsk))

	require.True(t, a.AskControl(wire.TypeCancelAsk, "q3"))
	cancelled := b.Expect(wire.TypeAskCancelled)
	require.Equal(t, "q3", cancelled.MessageID)
	require.Equal(t, "a", cancelled.FromID)
	require.Equal(t, string(wire.AskCancelled), cancelled.Reason)
	b.Send("a", intercomtest.Message("too-late", "x", intercomtest.ReplyTo("q3")))
	b.ExpectFailed("too-late", false, wire.FailInvalidReplyTarget)
}

func TestFailedReplyKeepsEdgeAndFailedAskDropsIt(t *testing.T) {
	h := startBroker(t)
	a, b, _ := trio(t, h)
	a.Deliver("b", b, intercomtest.Message("q1", "?", intercomtest.AsAsk))
	b.Send("a", intercomtest.Message("r1", "!", intercomtest.ReplyTo("q1")))
	b.Expect(wire.TypeDeliveryAccepted)
	m := a.Expect(wire.TypeMessage)
	a.Write(wire.AppendMessageRejected(nil, m.DeliveryID, "conflict"))
	b.ExpectFailed("r1", true, wire.FailConflictingMessageID)
	b.Deliver("a", a, intercomtest.Message("r2", "! again", intercomtest.ReplyTo("q1"))) // edge survived

	a.Send("b", intercomtest.Message("q2", "?", intercomtest.AsAsk))
	a.Expect(wire.TypeDeliveryAccepted)
	m = b.Expect(wire.TypeMessage)
	b.Write(wire.AppendMessageRejected(nil, m.DeliveryID, "conflict"))
	a.ExpectFailed("q2", true, wire.FailConflictingMessageID)
	cancelled := b.Expect(wire.TypeAskCancelled)
	require.Equal(t, string(wire.AskDeliveryFailed), cancelled.Reason)
	a.Deliver("b", b, intercomtest.Message("q3", "?", intercomtest.AsAsk)) // no edge left over
}

func TestAskExpiry(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.AskTTL = 300 * time.Millisecond })
	a, b, _ := trio(t, h)
	a.Deliver("b", b, intercomtest.Message("q1", "?", intercomtest.AsAsk))
	cancelled := b.Expect(wire.TypeAskCancelled)
	require.Equal(t, "q1", cancelled.MessageID)
	require.Equal(t, "a", cancelled.FromID)
	require.Equal(t, string(wire.AskExpired), cancelled.Reason)
	a.Quiet(100 * time.Millisecond) // the asker hears nothing
	b.Send("a", intercomtest.Message("r", "late", intercomtest.ReplyTo("q1")))
	b.ExpectFailed("r", false, wire.FailInvalidReplyTarget)
	waitFor(t, "the edge file to empty", func() bool { return len(h.ReadAskState()) == 0 })
}

func TestAskEdgesOnDisconnectAndUnregister(t *testing.T) {
	h := startBroker(t)
	a, b, c := trio(t, h)
	a.Deliver("b", b, intercomtest.Message("q1", "?", intercomtest.AsAsk))
	c.Deliver("a", a, intercomtest.Message("qc", "?", intercomtest.AsAsk))

	// The asker's socket closes: its blocking edge defers (b is told), and
	// so does the edge where it is the recipient (c is not told).
	a.Conn.Close()
	require.Equal(t, "a", b.Expect(wire.TypeSessionLeft).SessionID)
	d := b.Expect(wire.TypeAskDeferred)
	require.Equal(t, "q1", d.MessageID)
	require.Equal(t, "a", d.FromID)
	c.Expect(wire.TypeSessionLeft)
	c.Quiet(50 * time.Millisecond)
	states := map[string]string{}
	for _, e := range readAskStateEventually(t, h, 2) {
		states[e["messageId"].(string)] = e["state"].(string)
	}
	waitFor(t, "both edges deferred", func() bool {
		for _, e := range h.ReadAskState() {
			if e["state"] != "deferred" {
				return false
			}
		}
		return true
	})

	// a comes back: the late reply is still deliverable.
	a = h.Register("a", intercomtest.RegisterOptions{})
	b.Expect(wire.TypeSessionJoined)
	c.Expect(wire.TypeSessionJoined)
	b.Deliver("a", a, intercomtest.Message("late", "answer", intercomtest.ReplyTo("q1")))

	// Unregister without preserveAsks cancels every edge, telling the other
	// party and naming the session that left.
	a.Write(wire.AppendUnregisterFrame(nil, false))
	require.Equal(t, "a", c.Expect(wire.TypeSessionLeft).SessionID)
	cancelled := c.Expect(wire.TypeAskCancelled)
	require.Equal(t, "qc", cancelled.MessageID)
	require.Equal(t, "a", cancelled.FromID)
	require.Equal(t, string(wire.AskSessionDisconnected), cancelled.Reason)
	b.Expect(wire.TypeSessionLeft)
	c.Send("a", intercomtest.Message("after", "x"))
	c.ExpectFailed("after", false, wire.FailSessionNotFound)
}

func TestTooManyPendingAsks(t *testing.T) {
	h := startBroker(t, func(c *broker.Config) { c.RateCapacity = 10000 })
	a := h.Register("asker", intercomtest.RegisterOptions{Scope: "Scope_ASKER_000000"})
	var targets []*intercomtest.Client
	for i := 0; i <= broker.MaxAsksPerSender; i++ {
		targets = append(targets, h.Register(fmt.Sprintf("t%d", i), intercomtest.RegisterOptions{Scope: fmt.Sprintf("Scope_TARGET_%06d", i)}))
	}
	for i := 0; i < broker.MaxAsksPerSender; i++ {
		a.Deliver(fmt.Sprintf("t%d", i), targets[i], intercomtest.Message(fmt.Sprintf("q%d", i), "?", intercomtest.AsAsk))
	}
	a.Send(fmt.Sprintf("t%d", broker.MaxAsksPerSender), intercomtest.Message("over", "?", intercomtest.AsAsk))
	a.ExpectFailed("over", false, wire.FailTooManyPendingAsks)
}

func TestAskEdgesSurviveBrokerRestart(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	h := startBrokerIn(t, dir)
	a, b, _ := trio(t, h)
	a.Deliver("b", b, intercomtest.Message("q1", "?", intercomtest.AsAsk))
	readAskStateEventually(t, h, 1)
	h.Stop()
	a.ExpectClosed()
	b.ExpectClosed()
	edges := h.ReadAskState()
	require.Len(t, edges, 1)
	require.NotContains(t, h.AllFiles(), "Scope_", "no scope in any file")

	h2 := startBrokerIn(t, dir)
	waitFor(t, "restored edges rewritten as deferred", func() bool {
		edges := h2.ReadAskState()
		return len(edges) == 1 && edges[0]["state"] == "deferred"
	})
	a = h2.Register("a", intercomtest.RegisterOptions{})
	b = h2.Register("b", intercomtest.RegisterOptions{})
	a.Expect(wire.TypeSessionJoined)
	b.Deliver("a", a, intercomtest.Message("late", "after restart", intercomtest.ReplyTo("q1")))
	// A deferred edge does not block b from asking a.
	b.Deliver("a", a, intercomtest.Message("bq", "?", intercomtest.AsAsk))
	waitFor(t, "answered edge removed", func() bool {
		for _, e := range h2.ReadAskState() {
			if e["messageId"] == "q1" {
				return false
			}
		}
		return true
	})
}

func TestCorruptAskStateIsKeptAside(t *testing.T) {
	dir := intercomtest.ShortDir(t)
	h0 := startBrokerIn(t, dir)
	h0.Stop()
	require.NoError(t, os.WriteFile(h0.Paths.AskState(), []byte("{not json"), 0o600))
	h := startBrokerIn(t, dir)
	matches, _ := filepath.Glob(h.Paths.AskState() + ".corrupt-*")
	require.Len(t, matches, 1)
	data, err := os.ReadFile(matches[0])
	require.NoError(t, err)
	require.Equal(t, "{not json", string(data))
	a, b, _ := trio(t, h)
	a.Deliver("b", b, intercomtest.Message("q", "?", intercomtest.AsAsk))
	require.True(t, strings.Contains(h.Logs.String(), "ask state unreadable"))
}

// readAskStateEventually waits until the coalesced writer has persisted n edges.
func readAskStateEventually(t *testing.T, h *intercomtest.Broker, n int) []map[string]any {
	t.Helper()
	var edges []map[string]any
	waitFor(t, fmt.Sprintf("%d persisted ask edges", n), func() bool {
		edges = h.ReadAskState()
		return len(edges) == n
	})
	return edges
}
