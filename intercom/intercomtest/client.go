package intercomtest

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Client is a raw protocol peer of a Broker. Its methods fail the test
// that dialed it; use it from that test's goroutine.
type Client struct {
	// ID labels the client in failure messages; Register sets it to the
	// session id.
	ID string
	// Conn is the connection, closed when the test ends.
	Conn net.Conn
	// Frames receives every frame's payload in order; Closed is closed
	// once the broker closed the connection (after the last frame).
	Frames <-chan []byte
	Closed <-chan struct{}
	// SkipBroadcasts makes Next (and all that reads through it) pass over
	// session_joined, session_left and presence_update: for peers that
	// hear others come and go at any time, as across hosts.
	SkipBroadcasts bool
	// Wait bounds each wait for a frame (a hang guard); 0 is 5 s, as on
	// one broker. Across hosts a failure may wait for a host to be
	// declared gone.
	Wait time.Duration

	t testing.TB
	n atomic.Int32 // request ids
}

// Dial connects a raw client to the broker socket of p: any broker's, one
// StartBroker ran or one broker.ListenAndServe runs.
func Dial(t testing.TB, p intercom.Paths) *Client { return dial(t, p, nil) }

// Dial connects a raw client to the broker; what it receives is recorded in
// h.Frames too.
func (h *Broker) Dial() *Client { return dial(h.t, h.Paths, h.Frames) }

func dial(t testing.TB, p intercom.Paths, record *Buffer) *Client {
	t.Helper()
	nc, err := net.Dial("unix", p.BrokerSocket())
	require.NoError(t, err)
	frames, closed := make(chan []byte, 4096), make(chan struct{})
	c := &Client{t: t, Conn: nc, Frames: frames, Closed: closed}
	go func() {
		defer close(closed)
		fr := wire.NewFrameReader(nc)
		for {
			p, err := fr.Next()
			if err != nil {
				return
			}
			cp := append([]byte(nil), p...)
			if record != nil {
				record.Write(append(cp, '\n'))
			}
			frames <- cp
		}
	}()
	t.Cleanup(func() { nc.Close() })
	return c
}

// RegisterOptions describe a registration; the zero value registers with
// the session id as name, pid 4242, the default scope and a runtime id
// derived from the session id.
type RegisterOptions struct {
	Name      string // default: the session id
	NoName    bool   // send no name at all
	Scope     string
	Runtime   string // runtimeInstanceId; default "rt-<id>"
	PID       int
	StartedAt float64 // ms since the epoch
	Status    string
}

// RegisterFrame encodes a register frame for id.
func RegisterFrame(id string, o RegisterOptions) []byte {
	r := &wire.RegisterRequest{SessionID: id, Scope: o.Scope, Cwd: "/work/" + id, Model: "test-model",
		PID: o.PID, StartedAt: o.StartedAt, LastActivity: 1760000000000, RuntimeInstanceID: o.Runtime}
	if r.PID == 0 {
		r.PID = 4242
	}
	if r.StartedAt == 0 {
		r.StartedAt = 1760000000000
	}
	if !o.NoName {
		r.Name, r.HasName = o.Name, true
		if o.Name == "" {
			r.Name = id
		}
	}
	if o.Status != "" {
		r.Status, r.HasStatus = o.Status, true
	}
	if o.Runtime == "" {
		r.RuntimeInstanceID = "rt-" + id
	}
	return wire.AppendRegisterFrame(nil, r)
}

// Register connects to the broker socket of p and registers id; it
// returns once the broker sent registered.
func Register(t testing.TB, p intercom.Paths, id string, o RegisterOptions) *Client {
	t.Helper()
	return register(Dial(t, p), id, o)
}

// Register connects to the broker and registers id; it returns once the
// broker sent registered.
func (h *Broker) Register(id string, o RegisterOptions) *Client {
	h.t.Helper()
	return register(h.Dial(), id, o)
}

func register(c *Client, id string, o RegisterOptions) *Client {
	c.t.Helper()
	c.ID = id
	c.Write(RegisterFrame(id, o))
	f := c.Expect(wire.TypeRegistered)
	require.Equal(c.t, id, f.SessionID)
	return c
}

var msgSeq atomic.Int64

// Message encodes a message with id and text and a timestamp unique in
// this process; mods change it further (AsAsk, ReplyTo).
func Message(id, text string, mods ...func(*wire.Message)) []byte {
	m := &wire.Message{ID: id, Timestamp: float64(1760000000000 + msgSeq.Add(1)), Text: text}
	for _, f := range mods {
		f(m)
	}
	return m.AppendJSON(nil)
}

// AsAsk makes a message an ask (expectsReply).
func AsAsk(m *wire.Message) { m.ExpectsReply = true }

// ReplyTo makes a message the reply to message id.
func ReplyTo(id string) func(*wire.Message) { return func(m *wire.Message) { m.ReplyTo = id } }

// Write writes raw bytes: one or more frames, or part of one.
func (c *Client) Write(frame []byte) {
	c.t.Helper()
	_, err := c.Conn.Write(frame)
	require.NoError(c.t, err)
}

// WriteJSON sends one frame carrying payload.
func (c *Client) WriteJSON(payload string) { c.Write(wire.AppendFrame(nil, []byte(payload))) }

// NextRaw returns the next frame's raw payload.
func (c *Client) NextRaw() []byte {
	c.t.Helper()
	select {
	case p := <-c.Frames:
		return p
	case <-time.After(c.wait()):
		c.t.Fatalf("%s: no frame within %s", c.ID, c.wait())
		return nil
	}
}

// Next returns the next frame, strictly decoded.
func (c *Client) Next() *wire.BrokerFrame {
	c.t.Helper()
	for {
		p := c.NextRaw()
		f, err := wire.DecodeBrokerFrame(p)
		require.NoError(c.t, err, "%s: frame %s", c.ID, p)
		switch f.Type {
		case wire.TypeSessionJoined, wire.TypeSessionLeft, wire.TypePresenceUpdate:
			if c.SkipBroadcasts {
				continue
			}
		}
		return f
	}
}

// Expect returns the next frame and checks its type.
func (c *Client) Expect(typ string) *wire.BrokerFrame {
	c.t.Helper()
	f := c.Next()
	require.Equal(c.t, typ, f.Type, "%s: unexpected frame %+v", c.ID, f)
	return f
}

// ExpectError checks for an error frame with code (and text, when given).
func (c *Client) ExpectError(code wire.ErrorCode, text string) {
	c.t.Helper()
	f := c.Expect(wire.TypeError)
	require.Equal(c.t, string(code), f.Code)
	if text != "" {
		require.Equal(c.t, text, f.Error)
	}
}

// ExpectFailed checks for delivery_failed of messageID with code and
// accepted, and returns it.
func (c *Client) ExpectFailed(messageID string, accepted bool, code wire.FailureCode) *wire.BrokerFrame {
	c.t.Helper()
	f := c.Expect(wire.TypeDeliveryFailed)
	require.Equal(c.t, messageID, f.MessageID)
	require.Equal(c.t, accepted, f.Accepted, "accepted of %+v", f)
	require.Equal(c.t, string(code), f.Code, "reason: %s", f.Reason)
	return f
}

// Quiet checks that no frame arrives for d.
func (c *Client) Quiet(d time.Duration) {
	c.t.Helper()
	select {
	case p := <-c.Frames:
		c.t.Fatalf("%s: unexpected frame %s", c.ID, p)
	case <-time.After(d):
	}
}

// ExpectClosed checks that the broker closes the connection with no
// further frame.
func (c *Client) ExpectClosed() {
	c.t.Helper()
	select {
	case p := <-c.Frames:
		c.t.Fatalf("%s: frame %s instead of close", c.ID, p)
	case <-c.Closed:
		select {
		case p := <-c.Frames:
			c.t.Fatalf("%s: frame %s before close", c.ID, p)
		default:
		}
	case <-time.After(frameWait):
		c.t.Fatalf("%s: connection not closed", c.ID)
	}
}

// DrainUntilClosed discards frames until the connection closes.
func (c *Client) DrainUntilClosed() {
	c.t.Helper()
	deadline := time.After(frameWait)
	for {
		select {
		case <-c.Frames:
		case <-c.Closed:
			return
		case <-deadline:
			c.t.Fatalf("%s: connection not closed", c.ID)
		}
	}
}

// Drain discards the frames received so far, without waiting.
func (c *Client) Drain() {
	for {
		select {
		case <-c.Frames:
		default:
			return
		}
	}
}

// Send writes a send frame of msg (Message) to the target to.
func (c *Client) Send(to string, msg []byte) { c.Write(wire.AppendSendFrame(nil, to, msg)) }

// Ack acknowledges a delivery (message_received).
func (c *Client) Ack(deliveryID string) { c.Write(wire.AppendMessageReceived(nil, deliveryID)) }

// Deliver sends msg from c to `to` and drives it to delivered through the
// recipient r, returning the message frame r saw.
func (c *Client) Deliver(to string, r *Client, msg []byte) *wire.BrokerFrame {
	c.t.Helper()
	c.Send(to, msg)
	acc := c.Expect(wire.TypeDeliveryAccepted)
	m := r.Expect(wire.TypeMessage)
	require.Equal(c.t, acc.DeliveryID, m.DeliveryID)
	r.Ack(m.DeliveryID)
	d := c.Expect(wire.TypeDelivered)
	require.Equal(c.t, acc.DeliveryID, d.DeliveryID)
	require.Equal(c.t, acc.MessageID, d.MessageID)
	return m
}

// List returns the ids of the sessions c can see.
func (c *Client) List() []string {
	c.t.Helper()
	rid := fmt.Sprintf("l%d", c.n.Add(1))
	c.Write(wire.AppendListRequest(nil, rid))
	f := c.Expect(wire.TypeSessions)
	require.Equal(c.t, rid, f.RequestID)
	ids := make([]string, len(f.Sessions))
	for i, s := range f.Sessions {
		ids[i] = s.ID
	}
	return ids
}

// AskControl sends defer_ask or cancel_ask (typ) for messageID and returns
// whether the broker applied it.
func (c *Client) AskControl(typ, messageID string) bool {
	c.t.Helper()
	rid := fmt.Sprintf("c%d", c.n.Add(1))
	c.Write(wire.AppendAskControl(nil, typ, rid, messageID))
	f := c.Expect(wire.TypeAskControlResult)
	require.Equal(c.t, rid, f.RequestID)
	require.Equal(c.t, messageID, f.MessageID)
	return f.Applied
}

func (c *Client) wait() time.Duration {
	if c.Wait > 0 {
		return c.Wait
	}
	return frameWait
}
