package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// LoadSpec is the load a benchmark offers a broker: pairs of sessions, each
// sender sending to its receiver, plus idle sessions that only read and
// publish presence.
type LoadSpec struct {
	Pairs     int     // sender/receiver pairs
	TextBytes int     // bytes of message text
	Rate      float64 // messages/s per sender; 0 = as fast as the window allows
	Window    int     // sends in flight per sender, 1..64
	// Sessions is how many sessions register in all, the 2×Pairs of the
	// pairs among them; the rest are idle. Scopes spreads them
	// round-robin over that many scopes, each pair's two in one.
	Sessions int
	Scopes   int
	// PresenceEvery is how often each session sends a presence update
	// (0: never), staggered evenly over the interval.
	PresenceEvery time.Duration
}

// dialer opens a connection to the broker under test.
type dialer func(ctx context.Context) (net.Conn, error)

// recorder collects what a load observes: the latency of every completed
// message in completion order, delivery failures by code, and the first
// fatal error, which cancels the load.
type recorder struct {
	mu       sync.Mutex
	lat      []int64 // ns, in completion order
	failures map[string]int
	err      error
	stopping atomic.Bool
	cancel   context.CancelFunc
}

func (r *recorder) record(ns int64) {
	r.mu.Lock()
	r.lat = append(r.lat, ns)
	r.mu.Unlock()
}

func (r *recorder) failed(code string) {
	r.mu.Lock()
	if r.failures == nil {
		r.failures = map[string]int{}
	}
	r.failures[code]++
	r.mu.Unlock()
}

// delivered is how many messages have completed so far.
func (r *recorder) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lat)
}

// latencies returns a copy of the latencies of messages [from, to).
func (r *recorder) latencies(from, to int) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.lat[from:min(to, len(r.lat))]...)
}

func (r *recorder) failureCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.failures)
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	if r.err == nil && !r.stopping.Load() {
		r.err = err
	}
	r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
	}
}

// firstErr is the first fatal error, if any.
func (r *recorder) firstErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// benchText is n bytes of readable message text.
func benchText(n int) string {
	text := make([]byte, n)
	const filler = "the quick brown fox jumps over the lazy dog; "
	for i := range text {
		text[i] = filler[i%len(filler)]
	}
	return string(text)
}

// rawLoad drives a broker with raw v4 frames. It records the send →
// delivered latency of every message in completion order.
type rawLoad struct {
	recorder
	spec LoadSpec
	dial dialer
	// dialReceiver, when set, is where receivers (and idle sessions)
	// register instead: another host's broker. ready then waits until
	// the senders' broker lists every receiver.
	dialReceiver dialer
	ready        func(ctx context.Context, receivers []string) error
	tag          string
	text         string
	start        time.Time // the monotonic zero of sentAt

	inFlight  atomic.Int64
	presences atomic.Int64

	conns []*benchConn
	wg    sync.WaitGroup
}

func newRawLoad(spec LoadSpec, dial dialer) *rawLoad {
	return &rawLoad{spec: spec, dial: dial, tag: randomTag(), text: benchText(spec.TextBytes)}
}

func (l *rawLoad) scope(i int) string {
	return fmt.Sprintf("agent-fleet-bench-%s-scope-%d", l.tag, i%max(1, l.spec.Scopes))
}

// register dials and registers one session and returns its connection
// with a reader positioned after `registered`.
func (l *rawLoad) register(ctx context.Context, id, scope string) (*benchConn, error) {
	return l.registerOn(ctx, l.dial, id, scope)
}

// registerOn is register through dial.
func (l *rawLoad) registerOn(ctx context.Context, dial dialer, id, scope string) (*benchConn, error) {
	nc, br, err := l.registerConn(ctx, dial, id, scope)
	if err != nil {
		return nil, err
	}
	c := &benchConn{nc: nc, br: br}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *rawLoad) registerConn(ctx context.Context, dial dialer, id, scope string) (net.Conn, *bufio.Reader, error) {
	nc, err := dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the broker: %w", err)
	}
	now := float64(time.Now().UnixMilli())
	frame := wire.AppendRegisterFrame(nil, &wire.RegisterRequest{SessionID: id, Scope: scope, Cwd: "/bench", Model: "bench",
		PID: os.Getpid(), StartedAt: now, LastActivity: now, Name: id, HasName: true, RuntimeInstanceID: "bench-" + l.tag})
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(nc, 64<<10)
	if _, err := nc.Write(frame); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("register %s: %w", id, err)
	}
	fr := wire.NewFrameReader(br)
	for {
		p, err := fr.Next()
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("register %s: %w", id, err)
		}
		f, err := wire.DecodeBrokerFrame(p)
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("register %s: %w", id, err)
		}
		switch f.Type {
		case wire.TypeRegistered:
			_ = nc.SetDeadline(time.Time{})
			return nc, br, nil
		case wire.TypeError:
			nc.Close()
			return nil, nil, fmt.Errorf("register %s: the broker refused: %s: %s", id, f.Code, f.Error)
		}
	}
}

// benchConn is a registered session's connection. Several goroutines
// write to it (the sender or acknowledger and the presence loop), each
// frame or batch in one locked write.
type benchConn struct {
	nc  net.Conn
	br  *bufio.Reader
	wmu sync.Mutex
}

func (c *benchConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// pair is one sender and its receiver.
type pair struct {
	l        *rawLoad
	index    int
	sender   *benchConn
	receiver *benchConn
	to       string
	window   chan struct{}
	sentAt   []atomic.Int64 // send time (ns since rawLoad.start), by sequence number modulo len
}

// run connects every session, then drives the pairs until ctx ends. It
// returns once every goroutine it started has exited.
func (l *rawLoad) run(ctx context.Context, ready chan<- error) {
	ctx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	defer cancel()
	l.start = time.Now()
	total := max(l.spec.Sessions, 2*l.spec.Pairs)
	pairs := make([]*pair, l.spec.Pairs)
	recvDial := l.dial
	if l.dialReceiver != nil {
		recvDial = l.dialReceiver
	}
	setup := func() error {
		var receivers []string
		for p := range pairs {
			pr := &pair{l: l, index: p, window: make(chan struct{}, l.spec.Window)}
			ring := 1
			for ring < 2*l.spec.Window {
				ring <<= 1
			}
			pr.sentAt = make([]atomic.Int64, ring)
			pr.to = fmt.Sprintf("bench-%s-recv-%d", l.tag, p)
			var err error
			if pr.receiver, err = l.registerOn(ctx, recvDial, pr.to, l.scope(p)); err != nil {
				return err
			}
			receivers = append(receivers, pr.to)
			if pr.sender, err = l.register(ctx, fmt.Sprintf("bench-%s-send-%d", l.tag, p), l.scope(p)); err != nil {
				return err
			}
			pairs[p] = pr
			// Read from the start: registrations that follow broadcast to
			// these sessions.
			l.wg.Add(2)
			go func() { defer l.wg.Done(); pr.receive() }()
			go func() { defer l.wg.Done(); pr.readOutcomes() }()
		}
		for i := 2 * l.spec.Pairs; i < total; i++ {
			c, err := l.registerOn(ctx, recvDial, fmt.Sprintf("bench-%s-idle-%d", l.tag, i), l.scope(i))
			if err != nil {
				return err
			}
			l.wg.Add(1)
			go func() { defer l.wg.Done(); l.drain(c) }()
		}
		if l.ready != nil {
			return l.ready(ctx, receivers)
		}
		return nil
	}
	err := setup()
	ready <- err
	if err != nil {
		l.shutdown()
		return
	}
	if l.spec.PresenceEvery > 0 {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.presenceLoop(ctx) }()
	}
	for _, pr := range pairs {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); pr.sendLoop(ctx) }()
	}
	<-ctx.Done()
	l.stopping.Store(true)
	// Let what is in flight finish, so the broker is left with nothing
	// pending and the last latencies are not lost.
	deadline := time.Now().Add(5 * time.Second)
	for l.inFlight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	l.shutdown()
}

func (l *rawLoad) shutdown() {
	l.stopping.Store(true)
	for _, c := range l.conns {
		c.nc.Close()
	}
	l.wg.Wait()
}

// drain reads and discards what the broker sends an idle session.
func (l *rawLoad) drain(c *benchConn) {
	_, _ = io.Copy(io.Discard, c.br)
	if !l.stopping.Load() {
		l.fail(fmt.Errorf("the broker closed an idle session's connection"))
	}
}

// presenceLoop sends one presence update every PresenceEvery/N, round-robin
// over all N sessions, so each session updates once per PresenceEvery.
func (l *rawLoad) presenceLoop(ctx context.Context) {
	conns := l.conns
	tick := time.NewTicker(max(l.spec.PresenceEvery/time.Duration(len(conns)), time.Millisecond))
	defer tick.Stop()
	statuses := []string{"idle", "thinking", "tool:bash"}
	var frame []byte
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		frame = wire.AppendPresenceFrame(frame[:0], &wire.Presence{Status: statuses[(i/len(conns))%len(statuses)], HasStatus: true})
		if conns[i%len(conns)].write(frame) != nil {
			return
		}
		l.presences.Add(1)
	}
}

// sendLoop sends messages to the pair's receiver: paced at Rate (pairs
// staggered over one interval), or as fast as the window allows, batching
// every free slot into one write.
func (p *pair) sendLoop(ctx context.Context) {
	l := p.l
	prefix := "m" + strconv.Itoa(p.index) + "-" + l.tag + "-"
	var msg, out []byte
	var seq uint64
	var interval time.Duration
	next := time.Now()
	if l.spec.Rate > 0 {
		interval = time.Duration(float64(time.Second) / l.spec.Rate)
		next = next.Add(interval * time.Duration(p.index) / time.Duration(l.spec.Pairs))
	}
	for {
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			next = next.Add(interval)
		}
		select {
		case <-ctx.Done():
			return
		case p.window <- struct{}{}:
		}
		n := 1
		if interval == 0 {
		more:
			for n < l.spec.Window {
				select {
				case p.window <- struct{}{}:
					n++
				default:
					break more
				}
			}
		}
		out = out[:0]
		now := time.Since(l.start).Nanoseconds()
		for range n {
			m := wire.Message{ID: prefix + strconv.FormatUint(seq, 10), Timestamp: float64(time.Now().UnixMilli()), Text: l.text}
			msg = m.AppendJSON(msg[:0])
			out = wire.AppendSendFrame(out, p.to, msg)
			p.sentAt[seq&uint64(len(p.sentAt)-1)].Store(now)
			seq++
		}
		l.inFlight.Add(int64(n))
		if err := p.sender.write(out); err != nil {
			l.fail(fmt.Errorf("pair %d: send: %w", p.index, err))
			return
		}
	}
}

// readOutcomes reads the sender's frames: delivered completes a message,
// delivery_failed counts a failure, an error frame or a close ends the run.
func (p *pair) readOutcomes() {
	l := p.l
	fr := wire.NewFrameReader(p.sender.br)
	for {
		payload, err := fr.Next()
		if err != nil {
			if !l.stopping.Load() {
				l.fail(fmt.Errorf("pair %d: the broker closed the sender's connection: %w", p.index, err))
			}
			return
		}
		switch string(peek(payload, `"type":"`)) {
		case wire.TypeDelivered:
			done := time.Since(l.start).Nanoseconds()
			id := peek(payload, `"messageId":"`)
			seq, ok := messageSeq(id)
			if !ok {
				l.fail(fmt.Errorf("pair %d: delivered names an unknown message %q", p.index, id))
				return
			}
			l.record(done - p.sentAt[seq&uint64(len(p.sentAt)-1)].Load())
			l.inFlight.Add(-1)
			<-p.window
		case wire.TypeDeliveryAccepted, wire.TypePresenceUpdate, wire.TypeSessionJoined, wire.TypeSessionLeft:
		default:
			f, err := wire.DecodeBrokerFrame(payload)
			if err != nil {
				l.fail(fmt.Errorf("pair %d: %w", p.index, err))
				return
			}
			switch f.Type {
			case wire.TypeDeliveryFailed:
				l.failed(f.Code)
				l.inFlight.Add(-1)
				<-p.window
			case wire.TypeError:
				hint := ""
				if f.Code == string(wire.CodeRateLimited) {
					hint = " (the offered rate is above the broker's rate limit: raise its --rate-capacity and --rate-refill, or lower --rate)"
				}
				l.fail(fmt.Errorf("pair %d: the broker sent %s: %s%s", p.index, f.Code, f.Error, hint))
				return
			}
		}
	}
}

// receive acknowledges every message the receiver gets, one write per
// batch of frames that arrived together.
func (p *pair) receive() {
	l := p.l
	fr := wire.NewFrameReader(p.receiver.br)
	var acks []byte
	for {
		payload, err := fr.Next()
		if err != nil {
			if !l.stopping.Load() {
				l.fail(fmt.Errorf("pair %d: the broker closed the receiver's connection: %w", p.index, err))
			}
			return
		}
		if string(peek(payload, `"type":"`)) == wire.TypeMessage {
			if id := peek(payload, `"deliveryId":"`); id != nil {
				acks = appendAck(acks, id)
			} else {
				f, err := wire.DecodeBrokerFrame(payload)
				if err != nil {
					l.fail(fmt.Errorf("pair %d: %w", p.index, err))
					return
				}
				acks = wire.AppendMessageReceived(acks, f.DeliveryID)
			}
		}
		if p.receiver.br.Buffered() > 0 && len(acks) < 32<<10 {
			continue
		}
		if len(acks) > 0 {
			if err := p.receiver.write(acks); err != nil {
				if !l.stopping.Load() {
					l.fail(fmt.Errorf("pair %d: acknowledge: %w", p.index, err))
				}
				return
			}
			acks = acks[:0]
		}
	}
}

// peek returns the string value that follows key (which includes the
// opening quote) in a compact JSON frame, or nil. Both the reference broker
// and ours write compact JSON whose ids need no escapes; where peek finds
// nothing usable the frame is decoded in full instead.
func peek(payload []byte, key string) []byte {
	i := bytes.Index(payload, []byte(key))
	if i < 0 {
		return nil
	}
	v := payload[i+len(key):]
	j := bytes.IndexByte(v, '"')
	if j < 0 {
		return nil
	}
	for _, c := range v[:j] {
		if c < 0x20 || c == '\\' {
			return nil
		}
	}
	return v[:j]
}

// appendAck appends message_received for a delivery id that needs no
// escaping (see peek).
func appendAck(dst, deliveryID []byte) []byte {
	const head, tail = `{"type":"message_received","deliveryId":"`, `"}`
	n := len(head) + len(deliveryID) + len(tail)
	dst = append(dst, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	dst = append(dst, head...)
	dst = append(dst, deliveryID...)
	return append(dst, tail...)
}

// messageSeq parses the sequence number at the end of a message id
// ("m<pair>-<tag>-<seq>").
func messageSeq(id []byte) (uint64, bool) {
	i := len(id)
	for i > 0 && id[i-1] >= '0' && id[i-1] <= '9' {
		i--
	}
	if i == len(id) || len(id)-i > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range id[i:] {
		v = v*10 + uint64(c-'0')
	}
	return v, true
}
