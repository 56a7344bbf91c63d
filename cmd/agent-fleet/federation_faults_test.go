//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// faultSender is a session on host A sending a stream of messages with
// unique ids through the Go client with its durable outbox (the holder
// every agent-fleet process uses): each message is sent until it is
// reported delivered, the same id on every try, so a retry after a fault
// is idempotent (spec §5.3: dedup by sender and message id).
type faultSender struct {
	s    *intercom.Session
	to   string
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	delivered map[string]bool // ids the sender was told delivered
	tries     int
	failures  map[string]int // failed tries by code or error
}

func startFaultSender(t *testing.T, h *fedHost, id, to string) *faultSender {
	t.Helper()
	ident, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot, Cwd: h.home,
		Getenv: func(k string) string {
			if k == intercom.SessionIDEnv {
				return id
			}
			return ""
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: intercom.NewPaths(h.dir), Identity: ident,
		Reconnect: true, Share: true})
	require.NoError(t, err)
	fs := &faultSender{s: s, to: to, stop: make(chan struct{}), done: make(chan struct{}),
		delivered: map[string]bool{}, failures: map[string]int{}}
	t.Cleanup(func() { fs.halt(); s.Close() })
	go fs.run()
	return fs
}

func (fs *faultSender) run() {
	defer close(fs.done)
	for i := 0; ; i++ {
		id := fmt.Sprintf("fault-%04d", i)
		for {
			select {
			case <-fs.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := fs.s.Send(ctx, intercom.SendRequest{To: fs.to, Text: "message " + id, MessageID: id})
			cancel()
			fs.mu.Lock()
			fs.tries++
			ok := err == nil && res.Delivered
			switch {
			case ok:
				fs.delivered[id] = true
			case err != nil:
				fs.failures[shortErr(err)]++
			default:
				fs.failures[res.Code]++
			}
			fs.mu.Unlock()
			if ok {
				break
			}
			// Retry the same id after a pause: the fault may last seconds.
			select {
			case <-fs.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		time.Sleep(20 * time.Millisecond) // about 30 messages/s with the round trip
	}
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, ':'); i > 0 {
		return s[:i]
	}
	return s
}

func (fs *faultSender) halt() {
	select {
	case <-fs.stop:
	default:
		close(fs.stop)
	}
	<-fs.done
}

func (fs *faultSender) deliveredCount() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.delivered)
}

// flows waits until n more messages were reported delivered.
func (fs *faultSender) flows(t *testing.T, n int, what string) {
	t.Helper()
	from := fs.deliveredCount()
	fedWait(t, 120*time.Second, func() bool { return fs.deliveredCount() >= from+n }, "%d more messages delivered %s", n, what)
}

// received parses a listen --json output: how often each message id was
// printed.
func received(out string) map[string]int {
	got := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			MessageID string `json:"messageId"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.MessageID != "" {
			got[m.MessageID]++
		}
	}
	return got
}

// A stream of messages from host A to a listener on host B survives, in
// turn, B's node killed and restarted, A's NATS link cut for seconds and
// restored, and the NATS server killed and restarted: every message the
// sender was told delivered is in B's listener's output (lost = 0), none
// twice (duplicated = 0). An ask in flight to B when its node dies fails
// RECIPIENT_DISCONNECTED when B had not acknowledged it, as on one broker;
// one bob holds ends (its CLI wait runs out) instead of hanging. The
// counts are in the test log.
func TestFederationFaultsLoseAndDuplicateNothing(t *testing.T) {
	t.Parallel()
	w := newFedWorld(t)
	a := w.host("a", fedHostConfig{})
	b := w.host("b", fedHostConfig{Share: []string{"mute"}}) // a raw v4 client cannot ask to be shared
	w.waitJoined()
	bob := b.listen("bob", "--share")
	a.waitSession("", "bob", "b")
	fs := startFaultSender(t, a, "streamer", "bob")
	fs.flows(t, 20, "before any fault")

	// (a) B's node killed: the host is gone; its restart brings bob back.
	// In flight then: an ask B's recipient never acknowledged (a raw
	// client on B), and an ask bob holds (through the CLI).
	mute := fedRegister(t, intercom.NewPaths(b.dir), "mute", intercomtest.RegisterOptions{})
	asker := fedRegister(t, intercom.NewPaths(a.dir), "raw-asker", intercomtest.RegisterOptions{})
	fedWait(t, 60*time.Second, func() bool { return contains(asker.List(), "mute") }, "raw-asker on a lists mute")
	asker.Send("mute", intercomtest.Message("ask-unacked", "you will not ack this", intercomtest.AsAsk))
	mute.Expect(wire.TypeMessage)
	asker.Expect(wire.TypeDeliveryAccepted)
	ask := a.command("asker", "intercom", "ask", "bob", "are you there?", "--json", "--timeout", "30s")
	askOut := &lockedBuffer{}
	ask.Stdout, ask.Stderr = askOut, askOut
	require.NoError(t, ask.Start())
	askDone := make(chan error, 1)
	go func() { askDone <- ask.Wait() }()
	t.Cleanup(func() { _ = ask.Process.Kill() })
	fedWait(t, 60*time.Second, func() bool { return len(b.pending("bob").Asks) > 0 }, "bob has the ask")
	b.kill()
	asker.ExpectFailed("ask-unacked", true, wire.FailRecipientDisconnected)
	a.waitLive()
	select {
	case err := <-askDone:
		require.Error(t, err, "the ask gets no reply: %s", askOut.String())
		t.Logf("CLI ask held by bob when B's node died: %v: %s", err, strings.TrimSpace(askOut.String()))
	case <-time.After(120 * time.Second):
		t.Fatalf("the ask in flight hangs after B's node died: %s", askOut.String())
	}
	b.start()
	w.waitJoined()
	fs.flows(t, 20, "after B's node restarted")

	// (b) A's link cut for a few seconds.
	a.link.Cut()
	b.waitLive()
	time.Sleep(3 * time.Second) // the outage itself, not a wait for anything
	a.link.Restore()
	w.waitJoined()
	fs.flows(t, 20, "after A's link came back")

	// (c) The NATS server killed and started again.
	w.nats.Stop()
	a.waitLive()
	b.waitLive()
	require.NoError(t, w.nats.Start())
	w.waitJoined()
	fs.flows(t, 20, "after the NATS server restarted")

	fs.halt()
	fs.mu.Lock()
	told := make(map[string]bool, len(fs.delivered))
	for id := range fs.delivered {
		told[id] = true
	}
	tries, failures := fs.tries, fs.failures
	fs.mu.Unlock()
	// Everything told delivered is in bob's inbox already; the listener
	// prints it right after: wait for the output to have them all.
	var got map[string]int
	lost := func() []string {
		got = received(bob.stdout.String())
		var l []string
		for id := range told {
			if got[id] == 0 {
				l = append(l, id)
			}
		}
		return l
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(lost()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var dup []string
	for id, n := range got {
		if n > 1 {
			dup = append(dup, id)
		}
	}
	t.Logf("faults: sent %d messages in %d tries (failed tries by cause: %v); told delivered %d; received %d; lost %d; duplicated %d",
		len(told)+1, tries, failures, len(told), len(got), len(lost()), len(dup))
	require.Empty(t, lost(), "messages reported delivered but never received")
	require.Empty(t, dup, "messages received twice")
}

// Hosts that must not join: a host whose nkey the server does not know,
// a host with the right credentials but another cluster key, and a host
// claiming a live host's name. Each node run exits with an error that
// says so, and none of their shared sessions ever appears on A.
func TestFederationRefusesBadJoins(t *testing.T) {
	t.Parallel()
	w := newFedWorld(t)
	a := w.host("a", fedHostConfig{})
	b := w.host("b", fedHostConfig{})
	w.waitJoined()

	other := make([]byte, 32)
	for i := range other {
		other[i] = byte(i)
	}
	cases := []struct {
		host string
		cfg  fedHostConfig
		want string
	}{
		{"badcreds", fedHostConfig{Unauthorized: true}, "refused the credentials"},
		{"wrongkey", fedHostConfig{Key: fmt.Sprintf("%x", other)}, "cluster key fingerprint"},
		{"dupname", fedHostConfig{Name: "b"}, "held by a live host"},
	}
	for _, c := range cases {
		h := w.addHost(c.host, c.cfg)
		delete(w.hosts, c.host) // not a member: waitJoined ignores it
		n := h.startNode()
		err, out := n.exited(t)
		require.Error(t, err, "%s: node run must refuse to join:\n%s", c.host, out)
		require.Contains(t, strings.ToLower(out), c.want, "%s: the error says why:\n%s", c.host, out)
		t.Logf("%s: %v: %s", c.host, err, errorLines(out))
		// Its sessions never reach A: nothing of it joined.
		for _, v := range a.sessions("") {
			require.NotEqual(t, c.host, v.RemoteHostID, "%s's session %s reached a", c.host, v.ID)
		}
	}
	a.waitLive("b")
	b.waitLive("a")
}

// errorLines are the lines of a node's output that agent-fleet's error
// printer wrote.
func errorLines(out string) string {
	var l []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "agent-fleet: ") {
			l = append(l, line)
		}
	}
	return strings.Join(l, "; ")
}
