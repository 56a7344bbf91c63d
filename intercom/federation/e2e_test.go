package federation_test

import (
	"slices"
	"testing"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// realHost is a host with a real v4 broker on its own agent dir, joined
// through its link and bridge.
type realHost struct {
	cfg    *federation.Config
	link   *federation.Link
	bridge *federation.Bridge
	h      *intercomtest.Broker
	logs   *logBuffer
}

func (w *natsWorld) realHost(t *testing.T, name string, i int) *realHost {
	t.Helper()
	cfg, p := w.hostConfig(name, i, w.keyFile)
	rh := &realHost{cfg: cfg, logs: &logBuffer{}}
	rh.link = connectHost(t, cfg, federation.LinkOptions{Logger: rh.logs.logger()})
	rh.h = intercomtest.StartBroker(t, func(c *broker.Config) { c.Paths = p })
	rh.bridge = federation.NewBridge(rh.link, rh.h.B, cfg, rh.logs.logger())
	rh.h.B.SetFederation(rh.bridge, cfg.Scoper())
	if err := rh.bridge.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rh.bridge.Close)
	return rh
}

// broadcasts are frames a client hears about others at any time.
var broadcasts = []string{wire.TypeSessionJoined, wire.TypeSessionLeft, wire.TypePresenceUpdate}

// expect returns c's next frame that is not a broadcast and checks its
// type.
func expect(t *testing.T, c *intercomtest.Client, typ string) *wire.BrokerFrame {
	t.Helper()
	for {
		f := c.Next()
		if slices.Contains(broadcasts, f.Type) {
			continue
		}
		if f.Type != typ {
			t.Fatalf("%s: want %s, got %+v", c.ID, typ, f)
		}
		return f
	}
}

// awaitJoined waits until c hears session_joined of id.
func awaitJoined(t *testing.T, c *intercomtest.Client, id string) wire.SessionInfo {
	t.Helper()
	guard := time.After(hangGuard)
	for {
		select {
		case p := <-c.Frames:
			f, err := wire.DecodeBrokerFrame(p)
			if err != nil {
				t.Fatalf("%s: frame %s: %v", c.ID, p, err)
			}
			if f.Type == wire.TypeSessionJoined && f.Session.ID == id {
				return f.Session
			}
			if !slices.Contains(broadcasts, f.Type) {
				t.Fatalf("%s: unexpected %+v while waiting for %s to join", c.ID, f, id)
			}
		case <-guard:
			t.Fatalf("%s: %s never joined", c.ID, id)
		}
	}
}

func TestBridgeTwoBrokers(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 2)
	alpha := w.realHost(t, "alpha", 0)
	beta := w.realHost(t, "beta", 1)

	l := alpha.h.Register("shared-l", intercomtest.RegisterOptions{})
	r := beta.h.Register("shared-r", intercomtest.RegisterOptions{})
	info := awaitJoined(t, l, "shared-r")
	if info.Origin != "remote" || info.RemoteHostID != "beta" || info.TrustedLocal {
		t.Fatalf("beta's session on alpha: %+v", info)
	}
	awaitJoined(t, r, "shared-l")

	// A send: accepted only once beta's broker routed it, delivered once
	// R acknowledged, the message exactly as L sent it.
	m1 := intercomtest.Message("m1", "hello from alpha")
	l.Send("shared-r", m1)
	msg := expect(t, r, wire.TypeMessage)
	if string(msg.Message) != string(m1) || msg.From.ID != "shared-l" || msg.From.RemoteHostID != "alpha" {
		t.Fatalf("R got %s from %+v", msg.Message, msg.From)
	}
	acc := expect(t, l, wire.TypeDeliveryAccepted)
	r.Ack(msg.DeliveryID)
	if d := expect(t, l, wire.TypeDelivered); d.MessageID != "m1" || d.DeliveryID != acc.DeliveryID {
		t.Fatalf("delivered %+v after accepted %+v", d, acc)
	}

	// Ask and reply across hosts.
	q1 := intercomtest.Message("q1", "what time is it?", intercomtest.AsAsk)
	l.Send("shared-r", q1)
	ask := expect(t, r, wire.TypeMessage)
	if string(ask.Message) != string(q1) {
		t.Fatalf("R got the ask as %s", ask.Message)
	}
	expect(t, l, wire.TypeDeliveryAccepted)
	r.Ack(ask.DeliveryID)
	expect(t, l, wire.TypeDelivered)
	a1 := intercomtest.Message("a1", "noon", intercomtest.ReplyTo("q1"))
	r.Send("shared-l", a1)
	reply := expect(t, l, wire.TypeMessage)
	if reply.From.ID != "shared-r" || reply.From.RemoteHostID != "beta" || string(reply.Message) != string(a1) {
		t.Fatalf("reply %+v", reply)
	}
	expect(t, r, wire.TypeDeliveryAccepted)
	l.Ack(reply.DeliveryID)
	expect(t, r, wire.TypeDelivered)

	// Each message reached R once: the next one R sees is the next sent.
	m2 := intercomtest.Message("m2", "second")
	l.Send("shared-r", m2)
	if m := expect(t, r, wire.TypeMessage); string(m.Message) != string(m2) {
		t.Fatalf("R saw %s after m1, want m2", m.Message)
	}
	expect(t, l, wire.TypeDeliveryAccepted)

	// R leaves with m2 unacknowledged: L hears RECIPIENT_DISCONNECTED.
	_ = r.Conn.Close()
	f := expect(t, l, wire.TypeDeliveryFailed)
	if f.Code != string(wire.FailRecipientDisconnected) || f.MessageID != "m2" || !f.Accepted {
		t.Fatalf("after R left: %+v", f)
	}

	st := alpha.bridge.Status()
	if !st.On || len(st.LiveHosts) != 1 || st.LiveHosts[0] != "beta" || st.SharedSessions != 1 {
		t.Fatalf("alpha status %+v", st)
	}
}

// A local session that registers with the id of another host's session
// hides it (the local id wins, and status says so); once it left, the
// remote session is shown again and both directions deliver as before.
func TestBridgeLocalIDHidesTheRemoteUntilItLeaves(t *testing.T) {
	t.Parallel()
	w := newNATSWorld(t, 2)
	alpha := w.realHost(t, "alpha", 0)
	beta := w.realHost(t, "beta", 1)
	l := alpha.h.Register("shared-l", intercomtest.RegisterOptions{})
	r := beta.h.Register("shared-r", intercomtest.RegisterOptions{})
	awaitJoined(t, l, "shared-r")
	awaitJoined(t, r, "shared-l")

	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(hangGuard); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
		}
	}
	local := alpha.h.Register("shared-r", intercomtest.RegisterOptions{})
	if info := awaitJoined(t, l, "shared-r"); info.Origin != "local" {
		t.Fatalf("the local session replaced the proxy: %+v", info)
	}
	eventually("alpha's status names the hidden remote session", func() bool {
		st := alpha.bridge.Status()
		return slices.Equal(st.HiddenCollisions, []string{"shared-r"})
	})

	_ = local.Conn.Close()
	if info := awaitJoined(t, l, "shared-r"); info.Origin != "remote" || info.RemoteHostID != "beta" {
		t.Fatalf("beta's session is shown again: %+v", info)
	}
	eventually("alpha's status no longer hides it", func() bool { return len(alpha.bridge.Status().HiddenCollisions) == 0 })
	l.Send("shared-r", intercomtest.Message("m1", "to beta again"))
	expect(t, l, wire.TypeDeliveryAccepted)
	if m := expect(t, r, wire.TypeMessage); m.From.ID != "shared-l" {
		t.Fatalf("R got %+v", m)
	}
	r.Send("shared-l", intercomtest.Message("m2", "and back"))
	if m := expect(t, l, wire.TypeMessage); m.From.ID != "shared-r" || m.From.RemoteHostID != "beta" {
		t.Fatalf("L got %+v", m)
	}
}
