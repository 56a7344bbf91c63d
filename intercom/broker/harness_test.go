package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// harness is an in-process broker on real Unix sockets in a short temp dir.
type harness struct {
	t      *testing.T
	b      *Broker
	paths  intercom.Paths
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
	// frames remembers every payload any raw client received, for the
	// scope-privacy checks.
	frames *syncBuffer
	once   sync.Once
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// shortTempDir returns a temp dir short enough for socket paths.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "afb")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startBroker(t *testing.T, tweak ...func(*Config)) *harness {
	t.Helper()
	return startBrokerIn(t, shortTempDir(t), tweak...)
}

// testGoroutineIO makes startBroker use the goroutine transport, which
// Linux brokers use only when asked (see TestGoroutineTransport).
var testGoroutineIO bool

func startBrokerIn(t *testing.T, agentDir string, tweak ...func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, paths: intercom.NewPaths(agentDir), logs: &syncBuffer{}, frames: &syncBuffer{}}
	require.NoError(t, intercom.EnsureDir(h.paths.Dir))
	cfg := Config{
		Paths:        h.paths,
		Logger:       slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		IdleExit:     -1,
		TrustedLocal: true,
		CheckPeerUID: true,
		goroutineIO:  testGoroutineIO,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	b, err := New(cfg)
	require.NoError(t, err)
	h.b = b
	ln, err := listenSocket(h.paths.BrokerSocket())
	require.NoError(t, err)
	api, err := listenSocket(h.paths.LocalAPISocket())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- b.Run(ctx, ln, api) }()
	t.Cleanup(h.stop)
	return h
}

// stop shuts the broker down and waits for Run to return.
func (h *harness) stop() {
	h.once.Do(func() {
		h.cancel()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			h.t.Errorf("broker did not stop")
		}
	})
}

// client is a raw protocol peer: it writes frames and reads them back one
// by one, decoding each with the strict (Claude-client) decoder so every
// frame the broker emits is checked for its exact key set.
type client struct {
	t      *testing.T
	h      *harness
	nc     net.Conn
	frames chan []byte
	closed chan struct{}
	id     string
	n      atomic.Int32
}

func (h *harness) dial() *client {
	h.t.Helper()
	nc, err := net.Dial("unix", h.paths.BrokerSocket())
	require.NoError(h.t, err)
	c := &client{t: h.t, h: h, nc: nc, frames: make(chan []byte, 4096), closed: make(chan struct{})}
	go func() {
		defer close(c.closed)
		fr := wire.NewFrameReader(nc)
		for {
			p, err := fr.Next()
			if err != nil {
				return
			}
			cp := append([]byte(nil), p...)
			h.frames.Write(append(cp, '\n'))
			c.frames <- cp
		}
	}()
	h.t.Cleanup(func() { nc.Close() })
	return c
}

func (c *client) write(frame []byte) {
	c.t.Helper()
	_, err := c.nc.Write(frame)
	require.NoError(c.t, err)
}

// writeJSON sends one frame carrying payload.
func (c *client) writeJSON(payload string) { c.write(wire.AppendFrame(nil, []byte(payload))) }

// next returns the next frame's raw payload.
func (c *client) nextRaw() []byte {
	c.t.Helper()
	select {
	case p := <-c.frames:
		return p
	case <-time.After(5 * time.Second):
		c.t.Fatalf("%s: no frame within 5s", c.id)
		return nil
	}
}

// next returns the next frame, strictly decoded.
func (c *client) next() *wire.BrokerFrame {
	c.t.Helper()
	p := c.nextRaw()
	f, err := wire.DecodeBrokerFrame(p)
	require.NoError(c.t, err, "%s: frame %s", c.id, p)
	return f
}

// expect returns the next frame and checks its type.
func (c *client) expect(typ string) *wire.BrokerFrame {
	c.t.Helper()
	f := c.next()
	require.Equal(c.t, typ, f.Type, "%s: unexpected frame %+v", c.id, f)
	return f
}

// expectError checks for an error frame with code (and text, when given).
func (c *client) expectError(code wire.ErrorCode, text string) {
	c.t.Helper()
	f := c.expect(wire.TypeError)
	require.Equal(c.t, string(code), f.Code)
	if text != "" {
		require.Equal(c.t, text, f.Error)
	}
}

// expectFailed checks for delivery_failed with code and accepted.
func (c *client) expectFailed(messageID string, accepted bool, code wire.FailureCode) *wire.BrokerFrame {
	c.t.Helper()
	f := c.expect(wire.TypeDeliveryFailed)
	require.Equal(c.t, messageID, f.MessageID)
	require.Equal(c.t, accepted, f.Accepted, "accepted of %+v", f)
	require.Equal(c.t, string(code), f.Code, "reason: %s", f.Reason)
	return f
}

// quiet checks that no frame arrives for d.
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case p := <-c.frames:
		c.t.Fatalf("%s: unexpected frame %s", c.id, p)
	case <-time.After(d):
	}
}

// expectClosed checks that the broker closes the connection with no
// further frame.
func (c *client) expectClosed() {
	c.t.Helper()
	select {
	case p := <-c.frames:
		c.t.Fatalf("%s: frame %s instead of close", c.id, p)
	case <-c.closed:
		select {
		case p := <-c.frames:
			c.t.Fatalf("%s: frame %s before close", c.id, p)
		default:
		}
	case <-time.After(5 * time.Second):
		c.t.Fatalf("%s: connection not closed", c.id)
	}
}

// drainUntilClosed discards frames until the connection closes.
func (c *client) drainUntilClosed() {
	c.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case <-c.frames:
		case <-c.closed:
			return
		case <-deadline:
			c.t.Fatalf("%s: connection not closed", c.id)
		}
	}
}

// regOpts describe a registration.
type regOpts struct {
	name      string
	noName    bool
	scope     string
	runtime   string
	pid       int
	startedAt float64
	status    string
}

func registerFrame(id string, o regOpts) []byte {
	r := &wire.RegisterRequest{SessionID: id, Scope: o.scope, Cwd: "/work/" + id, Model: "test-model",
		PID: o.pid, StartedAt: o.startedAt, LastActivity: 1760000000000, RuntimeInstanceID: o.runtime}
	if r.PID == 0 {
		r.PID = 4242
	}
	if r.StartedAt == 0 {
		r.StartedAt = 1760000000000
	}
	if !o.noName {
		r.Name, r.HasName = o.name, true
		if o.name == "" {
			r.Name = id
		}
	}
	if o.status != "" {
		r.Status, r.HasStatus = o.status, true
	}
	if o.runtime == "" {
		r.RuntimeInstanceID = "rt-" + id
	}
	return wire.AppendRegisterFrame(nil, r)
}

// register connects and registers id; it returns once registered.
func (h *harness) register(id string, o regOpts) *client {
	h.t.Helper()
	c := h.dial()
	c.id = id
	c.write(registerFrame(id, o))
	f := c.expect(wire.TypeRegistered)
	require.Equal(h.t, id, f.SessionID)
	return c
}

var msgSeq atomic.Int64

// message builds a message JSON.
func message(id, text string, mods ...func(*wire.Message)) []byte {
	m := &wire.Message{ID: id, Timestamp: float64(1760000000000 + msgSeq.Add(1)), Text: text}
	for _, f := range mods {
		f(m)
	}
	return m.AppendJSON(nil)
}

func asAsk(m *wire.Message) { m.ExpectsReply = true }

func replyTo(id string) func(*wire.Message) { return func(m *wire.Message) { m.ReplyTo = id } }

// send writes a send frame.
func (c *client) send(to string, msg []byte) { c.write(wire.AppendSendFrame(nil, to, msg)) }

// ack acknowledges a delivery.
func (c *client) ack(deliveryID string) { c.write(wire.AppendMessageReceived(nil, deliveryID)) }

// deliver sends msg from c to `to` and drives it to delivered through
// recipient r, returning the message frame r saw.
func (c *client) deliver(to string, r *client, msg []byte) *wire.BrokerFrame {
	c.t.Helper()
	c.send(to, msg)
	acc := c.expect(wire.TypeDeliveryAccepted)
	m := r.expect(wire.TypeMessage)
	require.Equal(c.t, acc.DeliveryID, m.DeliveryID)
	r.ack(m.DeliveryID)
	d := c.expect(wire.TypeDelivered)
	require.Equal(c.t, acc.DeliveryID, d.DeliveryID)
	require.Equal(c.t, acc.MessageID, d.MessageID)
	return m
}

// list returns the session ids c can see.
func (c *client) list() []string {
	c.t.Helper()
	rid := fmt.Sprintf("l%d", c.n.Add(1))
	c.write(wire.AppendListRequest(nil, rid))
	f := c.expect(wire.TypeSessions)
	require.Equal(c.t, rid, f.RequestID)
	ids := make([]string, len(f.Sessions))
	for i, s := range f.Sessions {
		ids[i] = s.ID
	}
	return ids
}

// askControl sends defer_ask/cancel_ask and returns applied.
func (c *client) askControl(typ, messageID string) bool {
	c.t.Helper()
	rid := fmt.Sprintf("c%d", c.n.Add(1))
	c.write(wire.AppendAskControl(nil, typ, rid, messageID))
	f := c.expect(wire.TypeAskControlResult)
	require.Equal(c.t, rid, f.RequestID)
	require.Equal(c.t, messageID, f.MessageID)
	return f.Applied
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readAskState parses broker-asks.json.
func (h *harness) readAskState() (edges []map[string]any) {
	h.t.Helper()
	data, err := os.ReadFile(h.paths.AskState())
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(h.t, err)
	var st struct {
		Version int              `json:"version"`
		Edges   []map[string]any `json:"edges"`
	}
	require.NoError(h.t, json.Unmarshal(data, &st))
	require.Equal(h.t, 1, st.Version)
	return st.Edges
}

// allFiles returns the content of every regular file below the agent dir.
func (h *harness) allFiles() string {
	var sb strings.Builder
	_ = filepath.Walk(h.paths.AgentDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			sb.Write(data)
			sb.WriteByte('\n')
		}
		return nil
	})
	return sb.String()
}

func mkdirTempShort() (string, error) { return os.MkdirTemp("", "afb") }

// startBenchBroker runs an unpaced broker (rate limit raised) for benchmarks.
func startBenchBroker(b *testing.B, dir string) *harness {
	p := intercom.NewPaths(dir)
	if err := intercom.EnsureDir(p.Dir); err != nil {
		b.Fatal(err)
	}
	br, err := New(Config{Paths: p, IdleExit: -1, RateCapacity: 1e12, RateRefill: 1e12, TrustedLocal: true})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := listenSocket(p.BrokerSocket())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{b: br, paths: p, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- br.Run(ctx, ln, nil) }()
	b.Cleanup(func() { os.RemoveAll(dir) })
	return h
}
