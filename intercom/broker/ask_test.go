package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// trio registers a, b and c in one scope and drains the join frames.
func trio(t *testing.T, h *harness) (a, b, c *client) {
	a = h.register("a", regOpts{})
	b = h.register("b", regOpts{})
	c = h.register("c", regOpts{})
	a.expect(wire.TypeSessionJoined)
	a.expect(wire.TypeSessionJoined)
	b.expect(wire.TypeSessionJoined)
	return a, b, c
}

func TestAskRules(t *testing.T) {
	h := startBroker(t)
	a, b, c := trio(t, h)

	q1 := a.deliver("b", b, message("q1", "ok?", asAsk))
	require.Contains(t, string(q1.Message), `"expectsReply":true`)
	edges := h.readAskStateEventually(1)
	require.Equal(t, "q1", edges[0]["messageId"])
	require.Equal(t, "a", edges[0]["from"])
	require.Equal(t, "b", edges[0]["to"])
	require.Equal(t, "blocking", edges[0]["state"])

	a.send("b", message("q2", "again?", asAsk))
	f := a.expectFailed("q2", false, wire.FailAskAlreadyPending)
	require.Contains(t, f.Reason, "Another ask to this session is still unresolved")
	a.deliver("c", c, message("qc", "you?", asAsk)) // other recipients are fine

	b.send("a", message("rev", "me first?", asAsk))
	b.expectFailed("rev", false, wire.FailMutualAsk)

	// A reply that is itself an ask, threaded on the reverse edge, is fine.
	b.deliver("a", a, message("r1", "which one?", replyTo("q1"), asAsk))
	// a's edge to b is answered; b's new edge to a waits.
	a.deliver("b", b, message("r2", "the first", replyTo("r1")))
	a.deliver("b", b, message("q3", "new question", asAsk))

	// Replies must match a live edge, from its recipient.
	b.send("a", message("bogus", "x", replyTo("nope")))
	f = b.expectFailed("bogus", false, wire.FailInvalidReplyTarget)
	require.Equal(t, "Reply target does not match a pending ask", f.Reason)
	c.send("a", message("forged", "x", replyTo("q3")))
	f = c.expectFailed("forged", false, wire.FailInvalidReplyTarget)
	require.Equal(t, "Reply target does not match the pending ask", f.Reason)
}

func TestAskDeferCancelAndLateReply(t *testing.T) {
	h := startBroker(t)
	a, b, _ := trio(t, h)
	a.deliver("b", b, message("q1", "slow question", asAsk))

	require.True(t, a.askControl(wire.TypeDeferAsk, "q1"))
	d := b.expect(wire.TypeAskDeferred)
	require.Equal(t, "q1", d.MessageID)
	require.Equal(t, "a", d.FromID)
	require.True(t, a.askControl(wire.TypeDeferAsk, "q1"), "already deferred: applied, no notice")
	b.quiet(50 * time.Millisecond)
	require.False(t, b.askControl(wire.TypeDeferAsk, "q1"), "only the asker controls its edge")
	require.False(t, a.askControl(wire.TypeCancelAsk, "nope"))

	// A deferred edge no longer blocks the reverse direction, but still
	// blocks a second ask to the same peer.
	b.deliver("a", a, message("bq", "meanwhile?", asAsk))
	a.send("b", message("q2", "x", asAsk))
	a.expectFailed("q2", false, wire.FailAskAlreadyPending)

	// The late reply is still accepted and clears the edge.
	b.deliver("a", a, message("late", "here you go", replyTo("q1")))
	a.deliver("b", b, message("bqr", "answer", replyTo("bq")))
	a.deliver("b", b, message("q3", "next", asAsk))

	require.True(t, a.askControl(wire.TypeCancelAsk, "q3"))
	cancelled := b.expect(wire.TypeAskCancelled)
	require.Equal(t, "q3", cancelled.MessageID)
	require.Equal(t, "a", cancelled.FromID)
	require.Equal(t, string(wire.AskCancelled), cancelled.Reason)
	b.send("a", message("too-late", "x", replyTo("q3")))
	b.expectFailed("too-late", false, wire.FailInvalidReplyTarget)
}

func TestFailedReplyKeepsEdgeAndFailedAskDropsIt(t *testing.T) {
	h := startBroker(t)
	a, b, _ := trio(t, h)
	a.deliver("b", b, message("q1", "?", asAsk))
	b.send("a", message("r1", "!", replyTo("q1")))
	b.expect(wire.TypeDeliveryAccepted)
	m := a.expect(wire.TypeMessage)
	a.write(wire.AppendMessageRejected(nil, m.DeliveryID, "conflict"))
	b.expectFailed("r1", true, wire.FailConflictingMessageID)
	b.deliver("a", a, message("r2", "! again", replyTo("q1"))) // edge survived

	a.send("b", message("q2", "?", asAsk))
	a.expect(wire.TypeDeliveryAccepted)
	m = b.expect(wire.TypeMessage)
	b.write(wire.AppendMessageRejected(nil, m.DeliveryID, "conflict"))
	a.expectFailed("q2", true, wire.FailConflictingMessageID)
	cancelled := b.expect(wire.TypeAskCancelled)
	require.Equal(t, string(wire.AskDeliveryFailed), cancelled.Reason)
	a.deliver("b", b, message("q3", "?", asAsk)) // no edge left over
}

func TestAskExpiry(t *testing.T) {
	h := startBroker(t, func(c *Config) { c.AskTTL = 300 * time.Millisecond })
	a, b, _ := trio(t, h)
	a.deliver("b", b, message("q1", "?", asAsk))
	cancelled := b.expect(wire.TypeAskCancelled)
	require.Equal(t, "q1", cancelled.MessageID)
	require.Equal(t, "a", cancelled.FromID)
	require.Equal(t, string(wire.AskExpired), cancelled.Reason)
	a.quiet(100 * time.Millisecond) // the asker hears nothing
	b.send("a", message("r", "late", replyTo("q1")))
	b.expectFailed("r", false, wire.FailInvalidReplyTarget)
	waitFor(t, "the edge file to empty", func() bool { return len(h.readAskState()) == 0 })
}

func TestAskEdgesOnDisconnectAndUnregister(t *testing.T) {
	h := startBroker(t)
	a, b, c := trio(t, h)
	a.deliver("b", b, message("q1", "?", asAsk))
	c.deliver("a", a, message("qc", "?", asAsk))

	// The asker's socket closes: its blocking edge defers (b is told), and
	// so does the edge where it is the recipient (c is not told).
	a.nc.Close()
	require.Equal(t, "a", b.expect(wire.TypeSessionLeft).SessionID)
	d := b.expect(wire.TypeAskDeferred)
	require.Equal(t, "q1", d.MessageID)
	require.Equal(t, "a", d.FromID)
	c.expect(wire.TypeSessionLeft)
	c.quiet(50 * time.Millisecond)
	states := map[string]string{}
	for _, e := range h.readAskStateEventually(2) {
		states[e["messageId"].(string)] = e["state"].(string)
	}
	waitFor(t, "both edges deferred", func() bool {
		for _, e := range h.readAskState() {
			if e["state"] != "deferred" {
				return false
			}
		}
		return true
	})

	// a comes back: the late reply is still deliverable.
	a = h.register("a", regOpts{})
	b.expect(wire.TypeSessionJoined)
	c.expect(wire.TypeSessionJoined)
	b.deliver("a", a, message("late", "answer", replyTo("q1")))

	// Unregister without preserveAsks cancels every edge, telling the other
	// party and naming the session that left.
	a.write(wire.AppendUnregisterFrame(nil, false))
	require.Equal(t, "a", c.expect(wire.TypeSessionLeft).SessionID)
	cancelled := c.expect(wire.TypeAskCancelled)
	require.Equal(t, "qc", cancelled.MessageID)
	require.Equal(t, "a", cancelled.FromID)
	require.Equal(t, string(wire.AskSessionDisconnected), cancelled.Reason)
	b.expect(wire.TypeSessionLeft)
	c.send("a", message("after", "x"))
	c.expectFailed("after", false, wire.FailSessionNotFound)
}

func TestTooManyPendingAsks(t *testing.T) {
	h := startBroker(t, func(c *Config) { c.RateCapacity = 10000 })
	a := h.register("asker", regOpts{scope: "Scope_ASKER_000000"})
	var targets []*client
	for i := 0; i <= MaxAsksPerSender; i++ {
		targets = append(targets, h.register(fmt.Sprintf("t%d", i), regOpts{scope: fmt.Sprintf("Scope_TARGET_%06d", i)}))
	}
	for i := 0; i < MaxAsksPerSender; i++ {
		a.deliver(fmt.Sprintf("t%d", i), targets[i], message(fmt.Sprintf("q%d", i), "?", asAsk))
	}
	a.send(fmt.Sprintf("t%d", MaxAsksPerSender), message("over", "?", asAsk))
	a.expectFailed("over", false, wire.FailTooManyPendingAsks)
}

func TestAskEdgesSurviveBrokerRestart(t *testing.T) {
	dir := shortTempDir(t)
	h := startBrokerIn(t, dir)
	a, b, _ := trio(t, h)
	a.deliver("b", b, message("q1", "?", asAsk))
	h.readAskStateEventually(1)
	h.stop()
	a.expectClosed()
	b.expectClosed()
	edges := h.readAskState()
	require.Len(t, edges, 1)
	require.NotContains(t, h.allFiles(), "Scope_", "no scope in any file")

	h2 := startBrokerIn(t, dir)
	waitFor(t, "restored edges rewritten as deferred", func() bool {
		edges := h2.readAskState()
		return len(edges) == 1 && edges[0]["state"] == "deferred"
	})
	a = h2.register("a", regOpts{})
	b = h2.register("b", regOpts{})
	a.expect(wire.TypeSessionJoined)
	b.deliver("a", a, message("late", "after restart", replyTo("q1")))
	// A deferred edge does not block b from asking a.
	b.deliver("a", a, message("bq", "?", asAsk))
	waitFor(t, "answered edge removed", func() bool {
		for _, e := range h2.readAskState() {
			if e["messageId"] == "q1" {
				return false
			}
		}
		return true
	})
}

func TestCorruptAskStateIsKeptAside(t *testing.T) {
	dir := shortTempDir(t)
	h0 := startBrokerIn(t, dir)
	h0.stop()
	require.NoError(t, os.WriteFile(h0.paths.AskState(), []byte("{not json"), 0o600))
	h := startBrokerIn(t, dir)
	matches, _ := filepath.Glob(h.paths.AskState() + ".corrupt-*")
	require.Len(t, matches, 1)
	data, err := os.ReadFile(matches[0])
	require.NoError(t, err)
	require.Equal(t, "{not json", string(data))
	a, b, _ := trio(t, h)
	a.deliver("b", b, message("q", "?", asAsk))
	require.True(t, strings.Contains(h.logs.String(), "ask state unreadable"))
}

// readAskStateEventually waits until the coalesced writer has persisted n edges.
func (h *harness) readAskStateEventually(n int) []map[string]any {
	h.t.Helper()
	var edges []map[string]any
	waitFor(h.t, fmt.Sprintf("%d persisted ask edges", n), func() bool {
		edges = h.readAskState()
		return len(edges) == n
	})
	return edges
}
