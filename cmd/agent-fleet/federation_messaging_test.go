//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// listen starts `agent-fleet intercom listen --json` as id on the host
// (args add flags such as --share); the process ends with the test.
func (h *fedHost) listen(id string, args ...string) *textListener {
	t := h.w.t
	t.Helper()
	cmd := h.command(id, append([]string{"intercom", "listen", "--json"}, args...)...)
	l := &textListener{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = l.stdout, l.stderr
	require.NoError(t, cmd.Start())
	go func() { l.err = cmd.Wait(); close(l.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-l.done
		if t.Failed() {
			t.Logf("listen %s on %s stdout: %s\nstderr: %s", id, h.name, l.stdout.String(), l.stderr.String())
		}
	})
	p := intercom.NewPaths(h.dir)
	fedWait(t, 30*time.Second, func() bool { return intercom.HolderAlive(p, id) }, "listen %s on %s holds its session: %s", id, h.name, l.stderr)
	return l
}

// fedWait polls ok every 20 ms; limit is a hang guard only.
func fedWait(t *testing.T, limit time.Duration, ok func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			for i, a := range args {
				if s, ok := a.(fmt.Stringer); ok {
					args[i] = s.String()
				}
			}
			t.Fatalf("gave up waiting: "+format, args...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessions is `intercom list --json` as id on the host.
func (h *fedHost) sessions(id string) []intercom.SessionView {
	h.w.t.Helper()
	var res intercom.ListResult
	out := h.must(id, "intercom", "list", "--json")
	require.NoError(h.w.t, json.Unmarshal([]byte(out), &res), out)
	return res.Sessions
}

// waitSession waits until id on the host lists session of host remote
// ("" for a local one) and returns its view.
func (h *fedHost) waitSession(id, session, remote string) intercom.SessionView {
	t := h.w.t
	t.Helper()
	var found intercom.SessionView
	var last []intercom.SessionView
	fedWait(t, 60*time.Second, func() bool {
		last = h.sessions(id)
		for _, v := range last {
			if v.ID == session && v.RemoteHostID == remote {
				found = v
				return true
			}
		}
		return false
	}, "%s on %s lists %s of host %q; last list %+v", id, h.name, session, remote, &last)
	return found
}

// pending is `intercom pending --json` as id on the host.
func (h *fedHost) pending(id string) intercom.PendingResult {
	h.w.t.Helper()
	var p intercom.PendingResult
	out := h.must(id, "intercom", "pending", "--json")
	require.NoError(h.w.t, json.Unmarshal([]byte(out), &p), out)
	return p
}

func hasUnread(p intercom.PendingResult, messageID string) bool {
	for _, m := range p.Unread {
		if m.MessageID == messageID {
			return true
		}
	}
	return false
}

// Two hosts, each with its own agent directory, node and network: a
// session shared on B is listed on A with its host; a send from A is
// reported delivered only once B's listener holds it (B's inbox has it
// the moment A's CLI returns); an ask from A gets B's reply through the
// CLI on both ends; `intercom status` on A prints the routing line with
// one other host live.
func TestFederationSendAskReplyAcrossHosts(t *testing.T) {
	t.Parallel()
	w := newFedWorld(t)
	a := w.host("a", fedHostConfig{})
	b := w.host("b", fedHostConfig{})
	w.waitJoined()

	bob := b.listen("bob", "--share", "--keep-unread")
	a.listen("alice", "--share")
	seen := a.waitSession("alice", "bob", "b")
	require.Equal(t, "remote", seen.Origin)
	b.waitSession("bob", "alice", "a")
	table := a.must("alice", "intercom", "list")
	require.Regexp(t, `(?m)^b\s+bob\s`, table, "the table shows bob's host:\n%s", table)
	require.Contains(t, strings.SplitN(table, "\n", 2)[0], "HOST", table)

	status := a.must("alice", "intercom", "status")
	require.Contains(t, status, "Multi-node routing: on (nats, prefix "+w.prefix+"), 1 other host live", status)

	var sent intercom.SendResult
	out := a.must("alice", "intercom", "send", "bob", "hello from host a", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &sent), out)
	require.True(t, sent.Delivered, "%s", out)
	require.True(t, sent.OK, "%s", out)
	// Delivered means B's inbox holds it: no waiting here.
	require.True(t, hasUnread(b.pending("bob"), sent.MessageID), "delivered before bob's inbox held %s", sent.MessageID)
	fedWait(t, 30*time.Second, func() bool { return strings.Contains(bob.stdout.String(), "hello from host a") },
		"bob's listener prints the message: %s", bob.stdout)

	ask := a.command("alice", "intercom", "ask", "bob", "what is six times seven?", "--json")
	askOut := &lockedBuffer{}
	ask.Stdout = askOut
	require.NoError(t, ask.Start())
	askDone := make(chan error, 1)
	go func() { askDone <- ask.Wait() }()
	t.Cleanup(func() { _ = ask.Process.Kill() })
	var askID string
	fedWait(t, 60*time.Second, func() bool {
		for _, x := range b.pending("bob").Asks {
			if x.From.ID == "alice" {
				askID = x.AskID
				return true
			}
		}
		return false
	}, "bob has alice's ask pending")
	out = b.must("bob", "intercom", "reply", "--ask-id", askID, "forty-two", "--json")
	var replied intercom.SendResult
	require.NoError(t, json.Unmarshal([]byte(out), &replied), out)
	require.True(t, replied.Delivered, out)
	select {
	case err := <-askDone:
		require.NoError(t, err, askOut.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the ask did not return: %s", askOut.String())
	}
	require.Contains(t, askOut.String(), "forty-two")
}

// A send in flight to a remote session whose socket closes before it
// acknowledged fails RECIPIENT_DISCONNECTED (accepted) at the sender, as
// on one broker; an ask whose remote recipient unregisters is cancelled
// with session_disconnected. Raw v4 clients on both hosts, so the test
// sees the frames themselves.
func TestFederationRemoteSessionLeaving(t *testing.T) {
	t.Parallel()
	w := newFedWorld(t)
	a := w.host("a", fedHostConfig{Share: []string{"sender-*"}})
	b := w.host("b", fedHostConfig{Share: []string{"carol-*"}})
	w.waitJoined()
	pa, pb := intercom.NewPaths(a.dir), intercom.NewPaths(b.dir)

	carol := fedRegister(t, pb, "carol-1", intercomtest.RegisterOptions{})
	sender := fedRegister(t, pa, "sender-1", intercomtest.RegisterOptions{})
	fedWait(t, 60*time.Second, func() bool { return contains(sender.List(), "carol-1") }, "sender-1 on a lists carol-1")

	msg := intercomtest.Message("m-left-1", "you will not ack this")
	sender.Send("carol-1", msg)
	got := carol.Expect(wire.TypeMessage)
	require.Equal(t, "sender-1", got.From.ID)
	require.Equal(t, "a", got.From.RemoteHostID)
	accepted := sender.Expect(wire.TypeDeliveryAccepted)
	require.Equal(t, "m-left-1", accepted.MessageID)
	carol.Conn.Close()
	sender.ExpectFailed("m-left-1", true, wire.FailRecipientDisconnected)

	carol2 := fedRegister(t, pb, "carol-2", intercomtest.RegisterOptions{})
	fedWait(t, 60*time.Second, func() bool { return contains(sender.List(), "carol-2") }, "sender-1 on a lists carol-2")
	sender.Send("carol-2", intercomtest.Message("m-ask-1", "answer me later", intercomtest.AsAsk))
	got = carol2.Expect(wire.TypeMessage)
	carol2.Ack(got.DeliveryID)
	sender.Expect(wire.TypeDeliveryAccepted)
	sender.Expect(wire.TypeDelivered)
	carol2.Write(wire.AppendUnregisterFrame(nil, false))
	cancelled := sender.Expect(wire.TypeAskCancelled)
	require.Equal(t, "m-ask-1", cancelled.MessageID)
	require.Equal(t, "session_disconnected", cancelled.Reason)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
