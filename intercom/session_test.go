package intercom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func shortDir(t *testing.T) string { return intercomtest.ShortDir(t) }

// startBroker runs a real broker on p until the test ends or Stop.
func startBroker(t *testing.T, p intercom.Paths) *intercomtest.Broker {
	t.Helper()
	return intercomtest.StartBroker(t, func(c *broker.Config) {
		c.Paths = p
		c.AskTTL = 10 * time.Minute
	})
}

func identity(t *testing.T, id, name string) intercom.Identity {
	t.Helper()
	ident, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot, Cwd: "/work/" + id,
		Getenv: func(k string) string {
			switch k {
			case intercom.SessionIDEnv:
				return id
			case intercom.SessionNameEnv:
				return name
			}
			return ""
		}})
	require.NoError(t, err)
	return ident
}

func open(t *testing.T, p intercom.Paths, id, name string, tweak ...func(*intercom.SessionConfig)) *intercom.Session {
	t.Helper()
	cfg := intercom.SessionConfig{Paths: p, Identity: identity(t, id, name)}
	for _, f := range tweak {
		f(&cfg)
	}
	s, err := intercom.OpenSession(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

var ctx = context.Background()

func TestSendPendingAndMarkRead(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")

	res, err := b.Send(ctx, intercom.SendRequest{To: "ALPHA", Text: "hello", Attachments: []wire.Attachment{{Type: "snippet", Name: "x.go", Content: "package x"}}})
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	require.True(t, res.Delivered)
	require.Equal(t, "alpha", res.TargetID, "names are pre-resolved to ids")

	pend, err := a.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 1)
	m := pend.Unread[0]
	require.Equal(t, "hello", m.Text)
	require.Equal(t, intercom.Sender{ID: "beta", Name: "Beta", Origin: "local"}, m.From)
	require.Equal(t, "x.go", m.Attachments[0].Name)
	pend, _ = a.Pending(ctx, intercom.PendingRequest{MarkRead: true})
	require.Len(t, pend.Unread, 1)
	pend, _ = a.Pending(ctx, intercom.PendingRequest{})
	require.Empty(t, pend.Unread, "marked read")

	_, err = a.Send(ctx, intercom.SendRequest{To: "alpha", Text: "me"})
	require.ErrorIs(t, err, intercom.ErrSelfTarget)
	res, err = a.Send(ctx, intercom.SendRequest{To: "nobody", Text: "x"})
	require.NoError(t, err)
	require.False(t, res.OK)
	require.Equal(t, "SESSION_NOT_FOUND", res.Code)

	st, err := a.Status(ctx)
	require.NoError(t, err)
	require.True(t, st.Connected)
	require.Equal(t, 2, st.ActiveSessions)
	require.Zero(t, st.Outbox, "delivered and failed sends leave the outbox")

	who, _ := a.Whoami(ctx)
	require.Equal(t, "alpha", who.SessionID)
	list, err := a.List(ctx, intercom.ListRequest{})
	require.NoError(t, err)
	require.Len(t, list.Sessions, 1)
	require.Equal(t, "beta", list.Sessions[0].ID)
	list, _ = a.List(ctx, intercom.ListRequest{IncludeSelf: true, Where: "directory"})
	require.Len(t, list.Sessions, 1, "only alpha is in /work/alpha")
}

func TestTargetPreResolution(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	open(t, p, "worker-one", "Twin")
	open(t, p, "worker-two", "twin")
	_, err := a.Send(ctx, intercom.SendRequest{To: "twin", Text: "x"})
	require.ErrorIs(t, err, intercom.ErrAmbiguousTarget)
	_, err = a.Send(ctx, intercom.SendRequest{To: "work", Text: "x"})
	require.ErrorIs(t, err, intercom.ErrAmbiguousTarget)
	res, err := a.Send(ctx, intercom.SendRequest{To: "worker-o", Text: "x"})
	require.NoError(t, err)
	require.Equal(t, "worker-one", res.TargetID)
}

// A target no session can have is refused before anything is sent, with
// an error about to, not the message: too long for the broker (not "the
// message is … bytes once encoded"), or with a control character (a
// trailing newline would be trimmed and echoed back as part of the name).
func TestTargetIsChecked(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "peer4", "Peer4")
	for to, want := range map[string]string{
		strings.Repeat("x", 1_000_000): "invalid request: to is 1000000 characters long, over the 512 a target may have",
		strings.Repeat("é", 513):       "to is 513 characters long",
		strings.Repeat("😀", 257):       "to is 514 characters long", // UTF-16 units, as the broker counts
		"peer4\n":                      `invalid request: to "peer4\n" holds a control character (U+000A)`,
		"pe\x1b[2Jer4":                 `to "pe\x1b[2Jer4" holds a control character (U+001B)`,
		" \t":                          "invalid request: to is empty",
	} {
		_, err := a.Send(ctx, intercom.SendRequest{To: to, Text: "hi"})
		require.ErrorIs(t, err, intercom.ErrInvalidInput)
		require.ErrorContains(t, err, want)
		_, err = a.Ask(ctx, intercom.AskRequest{To: to, Text: "hi?", Wait: 50 * time.Millisecond})
		require.ErrorContains(t, err, want)
	}
	pend, err := b.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Empty(t, pend.Unread, "nothing was sent")
	res, err := a.Send(ctx, intercom.SendRequest{To: " peer4 ", Text: "hi"})
	require.NoError(t, err, "spaces around a target are trimmed")
	require.True(t, res.OK)
	_, err = a.Send(ctx, intercom.SendRequest{To: strings.Repeat("x", 512), Text: "hi"})
	require.NotErrorIs(t, err, intercom.ErrInvalidInput, "512 is still a target")
	_, err = b.Reply(ctx, intercom.ReplyRequest{Text: "x", To: "alpha\n"})
	require.ErrorContains(t, err, `to "alpha\n" holds a control character`, "a reply's sender selector too")
}

func TestAskAnsweredWithinTheCall(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")

	replied := make(chan struct{})
	go func() {
		defer close(replied)
		require.Eventually(t, func() bool {
			pend, _ := b.Pending(ctx, intercom.PendingRequest{})
			return len(pend.Asks) == 1
		}, 5*time.Second, 10*time.Millisecond)
		pend, _ := b.Pending(ctx, intercom.PendingRequest{})
		ask := pend.Asks[0]
		require.Equal(t, "ready?", ask.Preview)
		require.Equal(t, intercom.AskID("alpha", pend.Unread[0].MessageID), ask.AskID)
		res, err := b.Reply(ctx, intercom.ReplyRequest{Text: "yes", AskID: ask.AskID})
		require.NoError(t, err)
		require.True(t, res.OK)
	}()
	res, err := a.Ask(ctx, intercom.AskRequest{To: "beta", Text: "ready?", Wait: 10 * time.Second})
	require.NoError(t, err)
	require.True(t, res.Replied, "%+v", res)
	require.Equal(t, "yes", res.Reply.Text)
	require.Equal(t, "beta", res.Reply.From.ID)
	<-replied
	pend, _ := a.Pending(ctx, intercom.PendingRequest{})
	require.Empty(t, pend.Unread, "the reply was handed to the ask, not left unread")
	pend, _ = b.Pending(ctx, intercom.PendingRequest{})
	require.Empty(t, pend.Asks, "answered asks are no longer pending")
}

func TestAskTimeoutDefersAndLateReplyArrives(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")
	res, err := a.Ask(ctx, intercom.AskRequest{To: "beta", Text: "slow one", Wait: 200 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, res.OK)
	require.False(t, res.Replied)
	require.True(t, res.Pending)

	require.Eventually(t, func() bool {
		pend, _ := b.Pending(ctx, intercom.PendingRequest{})
		return len(pend.Asks) == 1 && pend.Asks[0].DeferredAt != 0
	}, 5*time.Second, 10*time.Millisecond, "the recipient sees the ask deferred (async)")
	r, err := b.Reply(ctx, intercom.ReplyRequest{Text: "late answer"})
	require.NoError(t, err)
	require.True(t, r.OK, "%+v", r)
	pend, _ := a.Pending(ctx, intercom.PendingRequest{})
	require.Len(t, pend.Unread, 1)
	require.Equal(t, "late answer", pend.Unread[0].Text)
	require.Equal(t, res.MessageID, pend.Unread[0].ReplyTo)
}

func TestAskTimeoutCancelsForAOneShot(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")
	res, err := a.Ask(ctx, intercom.AskRequest{To: "beta", Text: "q", Wait: 150 * time.Millisecond, OnTimeout: intercom.CancelOnTimeout})
	require.NoError(t, err)
	require.True(t, res.Cancelled)
	require.Eventually(t, func() bool {
		pend, _ := b.Pending(ctx, intercom.PendingRequest{})
		return len(pend.Asks) == 0
	}, 5*time.Second, 10*time.Millisecond, "the recipient's pending ask is dismissed")
	_, err = b.Reply(ctx, intercom.ReplyRequest{Text: "too late"})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk)
}

func TestReplySelection(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")
	c := open(t, p, "gamma", "Gamma")
	_, err := c.Reply(ctx, intercom.ReplyRequest{Text: "x"})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk)
	for _, asker := range []*intercom.Session{a, b} {
		res, err := asker.Ask(ctx, intercom.AskRequest{To: "gamma", Text: "from " + asker.Client().SessionID(), Wait: 50 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, res.Pending)
	}
	_, err = c.Reply(ctx, intercom.ReplyRequest{Text: "x"})
	require.ErrorIs(t, err, intercom.ErrAmbiguousTarget, "two senders need a selector")
	r, err := c.Reply(ctx, intercom.ReplyRequest{Text: "to beta", To: "Beta"})
	require.NoError(t, err)
	require.True(t, r.OK)
	r, err = c.Reply(ctx, intercom.ReplyRequest{Text: "to alpha"})
	require.NoError(t, err)
	require.True(t, r.OK, "one ask left: no selector needed")
	_, err = c.Reply(ctx, intercom.ReplyRequest{Text: "x", AskID: "ask-nope"})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk)
}

func TestHolderServesOtherProcesses(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")
	hs, err := intercom.ListenHolder(intercom.HolderConfig{Paths: p, SessionID: "alpha", Ops: a})
	require.NoError(t, err)
	hctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { _ = hs.Serve(hctx); close(served) }()
	t.Cleanup(func() { stop(); <-served })

	_, err = intercom.ListenHolder(intercom.HolderConfig{Paths: p, SessionID: "alpha", Ops: a})
	require.ErrorIs(t, err, intercom.ErrHeld)

	hc, err := intercom.DialHolder(ctx, p, "alpha")
	require.NoError(t, err)
	who, err := hc.Whoami(ctx)
	require.NoError(t, err)
	require.True(t, who.Holder)
	res, err := hc.Send(ctx, intercom.SendRequest{To: "beta", Text: "through the holder"})
	require.NoError(t, err)
	require.True(t, res.OK)
	pend, _ := b.Pending(ctx, intercom.PendingRequest{})
	require.Equal(t, "alpha", pend.Unread[0].From.ID, "sent as the held session")

	_, err = hc.Send(ctx, intercom.SendRequest{To: "zed", Text: "x"})
	require.NoError(t, err)
	_, err = hc.Reply(ctx, intercom.ReplyRequest{Text: "x"})
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk, "typed errors cross the holder socket")

	// Stream: two messages, then stop.
	lctx, lstop := context.WithCancel(ctx)
	got := make(chan *intercom.MessageView, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = hc.Listen(lctx, intercom.ListenRequest{}, func(m *intercom.MessageView) error { got <- m; return nil })
	}()
	for _, text := range []string{"one", "two"} {
		r, err := b.Send(ctx, intercom.SendRequest{To: "alpha", Text: text})
		require.NoError(t, err)
		require.True(t, r.OK)
	}
	for _, want := range []string{"one", "two"} {
		select {
		case m := <-got:
			require.Equal(t, want, m.Text)
		case <-time.After(5 * time.Second):
			t.Fatal("no streamed message")
		}
	}
	lstop()
	wg.Wait()

	_, err = intercom.DialHolder(ctx, p, "beta")
	require.ErrorIs(t, err, intercom.ErrNoHolder)
	// A stale socket file is not a holder.
	require.NoError(t, os.MkdirAll(strings.TrimSuffix(p.HolderSocket("ghost"), "/"+lastElem(p.HolderSocket("ghost"))), 0o700))
	l, err := net.Listen("unix", p.HolderSocket("ghost"))
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	_, err = intercom.DialHolder(ctx, p, "ghost")
	require.ErrorIs(t, err, intercom.ErrNoHolder)
}

func lastElem(p string) string { return p[strings.LastIndex(p, "/")+1:] }

func TestReconnectReplaysTheOutbox(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	br := startBroker(t, p)
	a := open(t, p, "alpha", "Alpha", func(c *intercom.SessionConfig) { c.Reconnect = true })
	b := open(t, p, "beta", "Beta", func(c *intercom.SessionConfig) { c.Reconnect = true })
	br.Stop()
	require.Eventually(t, func() bool { return !a.Client().Connected() }, 5*time.Second, 5*time.Millisecond)

	// While the broker is gone, a send waits (and its outbox entry stays).
	done := make(chan *intercom.SendResult, 1)
	go func() {
		res, err := a.Send(ctx, intercom.SendRequest{To: "beta", Text: "queued while down"})
		if err != nil {
			t.Logf("send: %v", err)
		}
		done <- res
	}()
	time.Sleep(200 * time.Millisecond)
	startBroker(t, p)
	require.Eventually(t, func() bool { return a.Client().Connected() && b.Client().Connected() }, 10*time.Second, 10*time.Millisecond)
	select {
	case res := <-done:
		if res == nil || !res.OK {
			// The send may have raced the re-registration of beta; the
			// outbox replays it on the next registration.
			require.Eventually(t, func() bool {
				pend, _ := b.Pending(ctx, intercom.PendingRequest{})
				return len(pend.Unread) == 1
			}, 10*time.Second, 20*time.Millisecond)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("send never completed")
	}
	require.Eventually(t, func() bool {
		pend, _ := b.Pending(ctx, intercom.PendingRequest{})
		return len(pend.Unread) == 1 && pend.Unread[0].Text == "queued while down"
	}, 10*time.Second, 20*time.Millisecond)
}

func TestOneShotOutboxIsReplayedByTheNextRegistration(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	b := open(t, p, "beta", "Beta")
	// A previous one-shot left a message in alpha's outbox.
	o, err := intercom.OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Flush() }) // before the temp dir goes
	m := wire.Message{ID: "left-behind", Timestamp: 1, Text: "from the last run"}
	info, err := wire.ParseMessage(m.AppendJSON(nil))
	require.NoError(t, err)
	_, err = o.Enqueue("beta", info)
	require.NoError(t, err)

	a := open(t, p, "alpha", "Alpha")
	require.Eventually(t, func() bool {
		pend, _ := b.Pending(ctx, intercom.PendingRequest{})
		return len(pend.Unread) == 1 && pend.Unread[0].MessageID == "left-behind"
	}, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		st, _ := a.Status(ctx)
		return st.Outbox == 0
	}, 5*time.Second, 10*time.Millisecond)
}

func TestBackToBackOneShotsNeverCollide(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	open(t, p, "beta", "Beta")
	for i := 0; i < 20; i++ {
		s, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: identity(t, "alpha", "Alpha")})
		require.NoError(t, err, "run %d", i)
		res, err := s.Send(ctx, intercom.SendRequest{To: "beta", Text: "x"})
		require.NoError(t, err)
		require.True(t, res.OK)
		require.NoError(t, s.Close())
	}
}

func TestEnsureBrokerRefusesAnIncompatibleBroker(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	ln, err := net.Listen("unix", p.BrokerSocket())
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				payload, err := wire.NewFrameReader(c).Next()
				if err != nil {
					return
				}
				env, _ := wire.ParseEnvelope(payload)
				rid, _ := env.DecodeRequestID()
				v3 := `{"type":"health_ok","requestId":"` + rid + `","protocol":"pi-intercom","version":3,"endpoint":"local","remoteAccess":` + wire.RemoteAccessJSON + `}`
				_, _ = c.Write(wire.AppendFrame(nil, []byte(v3)))
			}()
		}
	}()
	h, detail := intercom.ProbeBroker(ctx, p)
	require.Equal(t, intercom.Incompatible, h)
	require.Contains(t, detail, "v3")
	started := false
	err = intercom.EnsureBroker(ctx, p, func(context.Context, intercom.Paths) error { started = true; return nil })
	require.ErrorIs(t, err, intercom.ErrIncompatibleBroker)
	require.False(t, started, "never start a second broker")
	_, err = intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: identity(t, "a", "A")})
	require.ErrorIs(t, err, intercom.ErrIncompatibleBroker)
}

func TestEnsureBrokerStartsOneUnderTheSpawnLock(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	var mu sync.Mutex
	starts := 0
	var brokers []*intercomtest.Broker
	start := func(context.Context, intercom.Paths) error {
		mu.Lock()
		defer mu.Unlock()
		starts++
		brokers = append(brokers, startBroker(t, p))
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- intercom.EnsureBroker(ctx, p, start)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1, starts, "concurrent clients start one broker")
	_, err := os.Stat(p.SpawnLock())
	require.True(t, os.IsNotExist(err), "the spawn lock is released")

	// A failed start quotes the broker log.
	q := intercom.NewPaths(shortDir(t))
	require.NoError(t, intercom.EnsureDir(q.Dir))
	require.NoError(t, os.WriteFile(q.BrokerLog(), []byte("boom: cannot bind\n"), 0o600))
	err = intercom.EnsureBroker(ctx, q, func(context.Context, intercom.Paths) error { return errors.New("exit status 1") })
	require.ErrorIs(t, err, intercom.ErrBrokerUnavailable)
	require.Contains(t, err.Error(), "boom: cannot bind")
}

// Something that holds broker.sock and never answers keeps every broker
// out: the error says so and where to look next, not only that the
// broker started did not answer.
func TestEnsureBrokerNamesASilentListener(t *testing.T) {
	t.Parallel()
	p := intercom.NewPaths(shortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	ln, err := net.Listen("unix", p.BrokerSocket())
	require.NoError(t, err)
	done := make(chan struct{})
	defer func() { ln.Close(); <-done }()
	go func() {
		defer close(done)
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	err = intercom.EnsureBroker(ctx, p, func(context.Context, intercom.Paths) error { return nil })
	require.ErrorIs(t, err, intercom.ErrBrokerUnavailable)
	require.Contains(t, err.Error(), "something listens on "+p.BrokerSocket()+" but does not answer as an intercom v4 broker")
	require.Contains(t, err.Error(), "agent-fleet doctor")
}

func TestStaleSpawnLockIsReplaced(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	require.NoError(t, intercom.EnsureDir(p.Dir))
	// A lock left by a dead process.
	require.NoError(t, os.WriteFile(p.SpawnLock(), []byte("999999999\n1\n"), 0o600))
	err := intercom.EnsureBroker(ctx, p, func(context.Context, intercom.Paths) error { startBroker(t, p); return nil })
	require.NoError(t, err)
}

// startBenchBroker runs a broker with the rate limit raised.
func startBenchBroker(b *testing.B, p intercom.Paths) *intercomtest.Broker {
	return intercomtest.StartBroker(b, func(c *broker.Config) {
		c.Paths = p
		c.RateCapacity, c.RateRefill = 1e12, 1e12
		c.CheckPeerUID = false
		c.Logger = slog.New(slog.DiscardHandler)
	})
}

// A send whose outcome never arrives stays in the outbox across Close, for
// the next registration to replay.
func TestCloseKeepsTheOutbox(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	// A recipient that never acknowledges.
	intercomtest.Register(t, p, "mute", intercomtest.RegisterOptions{})

	a := open(t, p, "alpha", "Alpha")
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := a.Send(sctx, intercom.SendRequest{To: "mute", Text: "are you there?"})
	require.ErrorIs(t, err, intercom.ErrOutcomeUnknown)
	require.NoError(t, a.Close())
	o, err := intercom.OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Flush() }) // before the temp dir goes
	require.Equal(t, 1, o.Len(), "kept for the next registration")
}

// A send waits for its outcome well past the broker's acknowledgement
// timeout: a recipient too slow to acknowledge must come back as the
// broker's DELIVERY_TIMEOUT, a known outcome, even on a busy machine,
// never as ErrOutcomeUnknown.
func TestSendOutcomeOutlastsTheAcknowledgementTimeout(t *testing.T) {
	require.GreaterOrEqual(t, intercom.SendOutcomeTimeout, broker.DefaultDeliveryTimeout+5*time.Second)
}

// A send that a broker which has just replaced another refuses as
// SESSION_NOT_FOUND is sent again while its target — alive a moment ago,
// its holder still listening — reconnects (within the grace a new broker
// gives its predecessor's sessions); a target nobody saw stays refused.
func TestSendWaitsForATargetReconnectingToANewBroker(t *testing.T) {
	t.Parallel()
	p := intercom.NewPaths(shortDir(t))
	serve := func() func() { return serveBroker(t, p) }
	listenAsHolder(t, p, "alpha") // alpha's holder, as a listen or a worker's shim keeps it while its session reconnects

	serve()() // the broker alpha was on, gone
	t.Cleanup(serve())
	gamma := open(t, p, "gamma", "Gamma")
	sent := make(chan *intercom.SendResult, 1)
	go func() {
		res, err := gamma.Send(context.Background(), intercom.SendRequest{To: "alpha", Text: "back yet?"})
		assert.NoError(t, err)
		sent <- res
	}()
	time.Sleep(300 * time.Millisecond) // alpha's reconnect backoff
	alpha := open(t, p, "alpha", "Alpha")
	res := <-sent
	require.True(t, res.OK, "%+v", res)
	pend, err := alpha.Pending(context.Background(), intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 1)

	res, err = gamma.Send(context.Background(), intercom.SendRequest{To: "nobody", Text: "hello?"})
	require.NoError(t, err)
	require.False(t, res.OK)
	require.Equal(t, string(wire.FailSessionNotFound), res.Code)
}

// A message within the text and attachment limits that is over the frame
// limit once JSON-escaped is refused before it is queued (the broker would
// drop the connection on it, and every replay of it again); one an older
// client queued is dropped at the replay. The session sends on.
func TestSendRefusesAMessageOverTheFrameOnceEncoded(t *testing.T) {
	t.Parallel()
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	rx := open(t, p, "rx", "Rx")
	ctx := context.Background()

	// An older client's outbox: a poison entry, and one the broker takes.
	ob, err := intercom.OpenOutbox(p, "tx")
	require.NoError(t, err)
	for _, m := range []wire.Message{{ID: "poison", Timestamp: 1, Text: strings.Repeat("\x01", 200_000)}, {ID: "fine", Timestamp: 1, Text: "queued before"}} {
		info, err := wire.ParseMessage(m.AppendJSON(nil))
		require.NoError(t, err)
		_, err = ob.Enqueue("rx", info)
		require.NoError(t, err)
	}
	require.NoError(t, ob.Close())

	tx := open(t, p, "tx", "Tx")
	_, err = tx.Send(ctx, intercom.SendRequest{To: "rx", Text: strings.Repeat("\x01", 200_000)})
	require.ErrorIs(t, err, intercom.ErrInvalidInput)
	require.Contains(t, err.Error(), "once encoded")
	res, err := tx.Send(ctx, intercom.SendRequest{To: "rx", Text: "still sending"})
	require.NoError(t, err)
	require.True(t, res.OK)
	require.Eventually(t, func() bool {
		pend, err := rx.Pending(ctx, intercom.PendingRequest{})
		require.NoError(t, err)
		return len(pend.Unread) == 2
	}, 10*time.Second, 20*time.Millisecond, "the replayed message and the new one")
	require.NoError(t, tx.Close())
	ob, err = intercom.OpenOutbox(p, "tx")
	require.NoError(t, err)
	defer ob.Close()
	require.Zero(t, ob.Len(), "nothing left queued: the poison dropped, the rest delivered")
}

// blockedSend is a holder's Ops whose Send never returns until released:
// the holder goes away in the middle of it.
type blockedSend struct {
	intercom.Ops
	entered, release chan struct{}
}

func (b blockedSend) Send(ctx context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	close(b.entered)
	<-b.release
	return nil, ctx.Err()
}

// A holder that goes away during a send may have sent it (its outbox
// keeps it for the next holder): the caller hears the outcome is unknown,
// not a failure that invites a resend.
func TestHolderGoneDuringASendIsOutcomeUnknown(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	ops := blockedSend{Ops: a, entered: make(chan struct{}), release: make(chan struct{})}
	hs, err := intercom.ListenHolder(intercom.HolderConfig{Paths: p, SessionID: "alpha", Ops: ops})
	require.NoError(t, err)
	hctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { _ = hs.Serve(hctx); close(served) }()
	t.Cleanup(func() { close(ops.release); stop(); <-served })
	hc, err := intercom.DialHolder(ctx, p, "alpha")
	require.NoError(t, err)
	go func() { <-ops.entered; stop() }()
	_, err = hc.Send(ctx, intercom.SendRequest{To: "beta", Text: "in flight"})
	require.ErrorIs(t, err, intercom.ErrOutcomeUnknown)
	require.ErrorContains(t, err, "the session's holder went away during the send")
}

// A reply, like a send, waits for an asker that was on the broker before
// it restarted and is on its way back (its holder still listens).
func TestReplyWaitsForAnAskerReconnectingToANewBroker(t *testing.T) {
	t.Parallel()
	p := intercom.NewPaths(shortDir(t))
	serve := func() func() { return serveBroker(t, p) }
	listenAsHolder(t, p, "alpha")

	first := serve()
	alpha := open(t, p, "alpha", "Alpha")
	gamma := open(t, p, "gamma", "Gamma", func(c *intercom.SessionConfig) { c.Reconnect = true })
	asked, err := alpha.Ask(context.Background(), intercom.AskRequest{To: "gamma", Text: "which branch?", Wait: 200 * time.Millisecond})
	require.NoError(t, err)
	require.False(t, asked.Replied)
	require.NoError(t, alpha.Close()) // its ask deferred: a late reply still reaches it
	first()
	t.Cleanup(serve())
	require.Eventually(t, gamma.Client().Connected, 10*time.Second, 10*time.Millisecond)

	replied := make(chan *intercom.SendResult, 1)
	go func() {
		res, err := gamma.Reply(context.Background(), intercom.ReplyRequest{Text: "main"})
		assert.NoError(t, err)
		replied <- res
	}()
	time.Sleep(300 * time.Millisecond) // alpha's reconnect backoff
	back := open(t, p, "alpha", "Alpha")
	res := <-replied
	require.True(t, res.OK, "%+v", res)
	require.Eventually(t, func() bool {
		pend, err := back.Pending(context.Background(), intercom.PendingRequest{})
		return err == nil && len(pend.Unread) == 1 && pend.Unread[0].Text == "main"
	}, 10*time.Second, 10*time.Millisecond, "the late reply reached alpha")
}

// Two processes of one id (two one-shot commands of a shell, say): the
// second reads the session's files only once the first has closed them.
// Before, it read them while the first still sent, and its close wrote
// that stale copy over the first's queued send — which had exited 8, "will
// be retried from the outbox" — and it was never sent.
func TestSecondSessionOfAnIDKeepsTheFirstsQueuedSend(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	mute := intercomtest.Register(t, p, "mute", intercomtest.RegisterOptions{}) // never acknowledges
	mute.SkipBroadcasts = true
	open(t, p, "gamma", "Gamma")
	first := open(t, p, "s1", "S1")
	second := make(chan *intercom.Session, 1)
	go func() {
		s, err := intercom.OpenSession(context.Background(), intercom.SessionConfig{Paths: p, Identity: identity(t, "s1", "S1")})
		assert.NoError(t, err)
		second <- s
	}()
	time.Sleep(100 * time.Millisecond) // the second is opening meanwhile
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _ = first.Send(sctx, intercom.SendRequest{To: "mute", Text: "queued, unacknowledged"}) // its wait runs out
	cancel()
	mute.Expect(wire.TypeMessage)
	require.NoError(t, first.Close())
	s := <-second
	require.NotNil(t, s)
	res, err := s.Send(ctx, intercom.SendRequest{To: "gamma", Text: "the second's own send"})
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	require.NoError(t, s.Close())
	o, err := intercom.OpenOutbox(p, "s1")
	require.NoError(t, err)
	require.Equal(t, 1, o.Len(), "the first's unacknowledged send is still queued")
}

// serveBroker runs a broker on p in this process until the returned stop.
func serveBroker(t *testing.T, p intercom.Paths) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- broker.ListenAndServe(ctx, broker.Config{Paths: p, IdleExit: -1, TrustedLocal: true, CheckPeerUID: true,
			Logger: slog.New(slog.DiscardHandler)})
	}()
	require.Eventually(t, func() bool { _, err := os.Stat(p.PIDFile()); return err == nil }, 10*time.Second, 10*time.Millisecond)
	return func() { cancel(); require.NoError(t, <-done) }
}

// listenAsHolder listens on id's holder socket until the test ends: a
// holder that is there, as while its session reconnects.
func listenAsHolder(t *testing.T, p intercom.Paths, id string) {
	t.Helper()
	require.NoError(t, intercom.EnsureDir(filepath.Dir(p.HolderSocket(id))))
	holder, err := net.Listen("unix", p.HolderSocket(id))
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close() })
}

// A sender that outpaces the broker's rate limit (spec §6.6) waits rather
// than lose its connection, and so does a receiver acknowledging a flood:
// every send arrives, none is refused or left unknown.
func TestBurstsStayWithinTheRateLimit(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	b := startBroker(t, p)
	peer := open(t, p, "peer", "Peer")
	// Four sessions, each paced on its own, flood one receiver, whose
	// acknowledgements are paced too.
	var from []*intercom.Session
	for _, id := range []string{"alpha", "bravo", "charlie", "delta"} {
		from = append(from, open(t, p, id, id, func(c *intercom.SessionConfig) { c.Reconnect = true }))
	}
	const senders, each = 4, 30 // 120 frames from each of the four, at once
	errs := make(chan error, len(from)*senders*each)
	var wg sync.WaitGroup
	for g := range len(from) * senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				res, err := from[g%len(from)].Send(ctx, intercom.SendRequest{To: "peer", Text: fmt.Sprintf("m%d-%d", g, i)})
				if err == nil && !res.OK {
					err = fmt.Errorf("%s: %s", res.Code, res.Reason)
				}
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, b.B.Stats().RateLimited)
	pend, err := peer.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, len(from)*senders*each)
}

// A send that waits its turn behind the pacing is not late: its outcome's
// time runs from its write.
func TestASendWaitingForItsTurnIsNotLate(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	peer := open(t, p, "peer", "Peer")
	alpha := open(t, p, "alpha", "Alpha")
	intercom.SetOutcomeWait(alpha, time.Second)
	text := strings.Repeat("x", 64<<10) // 9 tokens a send: 40 of them are ~2 s of pacing
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := alpha.Send(ctx, intercom.SendRequest{To: "peer", Text: text})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	pend, err := peer.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 40)
}

// A list the connection dropped under is asked again after the reconnect.
func TestListAsksAgainAfterTheConnectionDropped(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	b := intercomtest.StartBroker(t, func(c *broker.Config) {
		c.Paths = p
		c.RateCapacity, c.RateRefill = 2, 0.001 // the registration and one list
	})
	alpha := open(t, p, "alpha", "Alpha", func(c *intercom.SessionConfig) { c.Reconnect = true })
	for range 2 {
		l, err := alpha.List(ctx, intercom.ListRequest{IncludeSelf: true})
		require.NoError(t, err)
		require.Len(t, l.Sessions, 1)
	}
	require.EqualValues(t, 1, b.B.Stats().RateLimited, "the second list ended the first connection")
}

// A message handed on to a recipient that then went away without
// acknowledging it (RECIPIENT_DISCONNECTED once accepted) may never have
// been stored: it stays in the outbox and is sent again when the recipient
// joins again, and arrives once.
func TestAMessageWhoseRecipientWentAwayIsSentAgain(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	b := startBroker(t, p)
	alpha := open(t, p, "alpha", "Alpha")
	raw := b.Register("beta", intercomtest.RegisterOptions{})
	require.Eventually(t, func() bool { return connected(t, alpha, "beta") }, 5*time.Second, 10*time.Millisecond)
	done := make(chan *intercom.SendResult, 1)
	go func() {
		res, err := alpha.Send(ctx, intercom.SendRequest{To: "beta", Text: "are you there?"})
		assert.NoError(t, err)
		done <- res
	}()
	raw.Expect(wire.TypeMessage) // handed on, never acknowledged
	raw.Conn.Close()
	res := <-done
	require.Equal(t, string(wire.FailRecipientDisconnected), res.Code)
	require.True(t, res.Accepted, "outcome unknown (exit 8)")
	require.Equal(t, 1, alpha.Outbox().Len(), "kept for a resend")

	beta := open(t, p, "beta", "Beta")
	require.Eventually(t, func() bool {
		pend, err := beta.Pending(ctx, intercom.PendingRequest{})
		return err == nil && len(pend.Unread) == 1 && pend.Unread[0].Text == "are you there?"
	}, 5*time.Second, 10*time.Millisecond, "sent again when beta joined")
	require.Eventually(t, func() bool { return alpha.Outbox().Len() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// A one-shot's ask whose connection is lost while it waits (the broker
// went away) says so at once: no reply can reach it now.
func TestAOneShotAskWhoseConnectionIsLostEndsAtOnce(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	b := startBroker(t, p)
	beta := open(t, p, "beta", "Beta")
	alpha := open(t, p, "alpha", "Alpha") // no Reconnect: a one-shot command's session
	go func() {
		require.Eventually(t, func() bool {
			pend, err := beta.Pending(ctx, intercom.PendingRequest{})
			return err == nil && len(pend.Asks) == 1
		}, 5*time.Second, 10*time.Millisecond)
		b.B.Shutdown()
	}()
	res, err := alpha.Ask(ctx, intercom.AskRequest{To: "beta", Text: "still there?", Wait: time.Minute, OnTimeout: intercom.CancelOnTimeout})
	require.ErrorIs(t, err, intercom.ErrConnectionLost)
	require.Contains(t, err.Error(), "no reply can reach this command now")
	require.True(t, res.OK, "it was delivered")
	require.False(t, res.Replied)
}

// A reply that crosses the cancel of an ask whose wait ran out is that
// ask's answer, not mail for later: the asker is told it was answered.
func TestAReplyCrossingTheCancelAnswersTheAsk(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	b := startBroker(t, p)
	alpha := open(t, p, "alpha", "Alpha")
	raw := b.Register("beta", intercomtest.RegisterOptions{})
	go func() { // beta takes each ask and answers it at once
		for {
			select {
			case payload, ok := <-raw.Frames:
				if !ok {
					return
				}
				f, err := wire.DecodeBrokerFrame(payload)
				if err != nil || f.Type != wire.TypeMessage {
					continue
				}
				m, err := wire.ParseMessage(f.Message)
				if err != nil {
					continue
				}
				raw.Ack(f.DeliveryID)
				raw.Send("alpha", intercomtest.Message(intercom.NewMessageID(), "yes", intercomtest.ReplyTo(m.ID)))
			case <-raw.Closed:
				return
			}
		}
	}()
	for i := range 20 {
		res, err := alpha.Ask(ctx, intercom.AskRequest{To: "beta", Text: fmt.Sprint("q", i), Wait: time.Millisecond, OnTimeout: intercom.CancelOnTimeout})
		require.NoError(t, err)
		if !res.Replied {
			// The wait ran out first and the cancel was applied before the
			// reply was sent: then the reply is refused (no open ask).
			require.True(t, res.Cancelled, "round %d: neither answered nor cancelled: %+v", i, res)
			continue
		}
		require.Equal(t, "yes", res.Reply.Text, "round %d", i)
	}
	pend, err := alpha.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	for _, m := range pend.Unread {
		require.NotEqual(t, "yes", m.Text, "no answer left unread while its ask was said cancelled")
	}
}
