package intercom

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// RefusedError is an error frame the broker sent instead of registering.
type RefusedError struct {
	Code    wire.ErrorCode
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("broker refused: %s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, ErrSessionIDInUse) work for SESSION_ID_IN_USE.
func (e *RefusedError) Is(target error) bool {
	return target == ErrSessionIDInUse && e.Code == wire.CodeSessionIDInUse
}

// Outcome is the final answer of the broker to a send.
type Outcome struct {
	MessageID  string
	Delivered  bool
	Accepted   bool // the broker routed it (always true when delivered)
	DeliveryID string
	Code       wire.FailureCode // on failure
	Reason     string           // on failure
}

// InboundHandler receives what the broker pushes. Stage and Commit run on
// the client's reader goroutine, in frame order: Stage takes one message
// (returning a non-empty reject reason to refuse it as conflicting), and
// Commit makes everything staged durable; only then are the staged
// deliveries acknowledged. Several messages that arrive together are staged
// and committed as one batch. Event gets every other pushed frame
// (ask_deferred, ask_cancelled, presence_update, session_joined,
// session_left, error).
type InboundHandler interface {
	Stage(f *wire.BrokerFrame) (reject string)
	Commit() error
	Event(f *wire.BrokerFrame)
}

// ClientConfig configures a Client.
type ClientConfig struct {
	Paths    Paths
	Identity Identity
	Logger   *slog.Logger
	// Start launches a broker when none answers (see EnsureBroker); nil
	// means never start one.
	Start BrokerStarter
	// Outbox, when set, makes sends durable: recorded before the frame is
	// written, removed on delivered or delivery_failed, replayed after
	// every registration (spec §5.3).
	Outbox *Outbox
	// Handler receives inbound messages and events; nil acknowledges
	// messages without keeping them.
	Handler InboundHandler
	// Reconnect keeps reconnecting, with backoff, after the broker goes
	// away, re-registering the same identity (spec §6.5).
	Reconnect bool
	// Unpaced writes frames as they come instead of pacing them within
	// the broker's v4 rate limit (pacing.go): for a broker whose limit was
	// raised for this client.
	Unpaced bool
	// OnRegistered runs after every successful registration (first and
	// reconnects), after the outbox replay was written.
	OnRegistered func()
	// InUseRetry is how long a SESSION_ID_IN_USE refusal is retried, for a
	// previous holder whose close the broker has not processed yet. Default 2 s.
	InUseRetry time.Duration
	// InUse, when set, is asked why the id is in use each time a
	// registration is refused as SESSION_ID_IN_USE: an error it returns
	// ends the retries at once (InUseRetry's here, and Attach's) and is
	// returned; nil retries as usual. A session id that nobody but its
	// current holder may act as (a fleet worker's) need not be waited for.
	InUse func(ctx context.Context) error
	// ReplayFilter, when set, judges every queued outbox entry before it is
	// replayed after a registration: an entry it refuses (false) is dropped
	// from the outbox unsent, as Boss team-only mode requires (spec §7.3).
	ReplayFilter func(to string) bool
}

// reconnectBackoff is the Claude/Codex client's schedule (spec §6.5).
var reconnectBackoff = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}

// Client is one registered intercom session: a connection to the broker,
// the correlation of requests and answers, durable sends through the
// outbox, and inbound delivery through an InboundHandler. Its methods are
// safe for concurrent use.
type Client struct {
	cfg ClientConfig
	log *slog.Logger

	mu        sync.Mutex
	nc        net.Conn
	ready     chan struct{} // closed while registered; replaced on loss
	closed    bool
	sends     map[string]*sendWait
	lists     map[string]chan []wire.SessionInfo
	controls  map[string]chan bool
	sessionID string
	scope     string // the scope registrations use (Identity.Scope until SetScope)
	// presence is what Presence set last (name, status, model): every
	// registration carries it, so a new broker shows what the old one did.
	presence wire.Presence

	switchMu sync.Mutex // one SetScope at a time
	// retiring is the connection a SetScope is replacing: the broker ends
	// it once the new one registers, which is no loss. retiringLost
	// records that it ended, in case the replacement fails.
	retiring     net.Conn
	retiringLost bool

	// Test hooks: lostHook runs when a connection's reader ended;
	// afterScopeRegister between a SetScope's registration and its install.
	lostHook           func()
	afterScopeRegister func()
	reconnects         int // reconnect loops started, for tests

	gone chan struct{} // closed when a client that does not reconnect lost its connection
	wmu  sync.Mutex    // one frame at a time on the socket
	pace pacer         // under wmu

	outcomeWait time.Duration // SendOutcomeTimeout; tests shorten it
	done        chan struct{}
	wg          sync.WaitGroup
}

type sendWait struct {
	accepted   bool
	deliveryID string
	result     chan sendResult // buffered 1
	replay     bool            // an outbox replay nobody waits for
}

type sendResult struct {
	out Outcome
	err error
}

// NewClient returns an unconnected client.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.InUseRetry == 0 {
		cfg.InUseRetry = 2 * time.Second
	}
	return &Client{
		cfg:      cfg,
		log:      cfg.Logger,
		ready:    make(chan struct{}),
		sends:    make(map[string]*sendWait),
		lists:    make(map[string]chan []wire.SessionInfo),
		controls: make(map[string]chan bool),
		done:     make(chan struct{}),
		gone:     make(chan struct{}),

		outcomeWait: SendOutcomeTimeout,
		scope:       cfg.Identity.Scope,
	}
}

// SessionID is the registered session id (the identity's, once connected).
func (c *Client) SessionID() string { return c.cfg.Identity.SessionID }

// Identity is the client's identity, with the scope it registers under now.
func (c *Client) Identity() Identity {
	id := c.cfg.Identity
	c.mu.Lock()
	id.Scope = c.scope
	c.mu.Unlock()
	return id
}

// Connected reports whether the client is registered right now.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nc != nil && isClosedChan(c.ready)
}

func isClosedChan(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Connect makes sure a broker runs, registers, replays the outbox and
// starts reading. With Reconnect set it keeps the session registered until
// Close. A SESSION_ID_IN_USE refusal is retried for InUseRetry.
func (c *Client) Connect(ctx context.Context) error {
	if err := c.connectOnce(ctx); err != nil {
		return err
	}
	return nil
}

func (c *Client) connectOnce(ctx context.Context) error {
	deadline := time.Now().Add(c.cfg.InUseRetry)
	for {
		if err := EnsureBroker(ctx, c.cfg.Paths, c.cfg.Start); err != nil {
			return err
		}
		nc, br, err := c.register(ctx)
		if err == nil {
			c.install(nc, br)
			return nil
		}
		if !errors.Is(err, ErrSessionIDInUse) || time.Now().After(deadline) {
			return err
		}
		if c.cfg.InUse != nil {
			if why := c.cfg.InUse(ctx); why != nil {
				return inUseFinal{why}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// inUseFinal is a SESSION_ID_IN_USE refusal that ClientConfig.InUse
// called final: nobody retries it. It is ErrSessionIDInUse and what InUse
// returned.
type inUseFinal struct{ err error }

func (e inUseFinal) Error() string   { return e.err.Error() }
func (e inUseFinal) Unwrap() []error { return []error{e.err, ErrSessionIDInUse} }

// register dials and registers, returning the connection once the broker
// answered registered.
func (c *Client) register(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	nc, err := dialBroker(ctx, c.cfg.Paths)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBrokerUnavailable, err)
	}
	id := c.Identity()
	req := &wire.RegisterRequest{
		SessionID: id.SessionID, Scope: id.Scope, Cwd: id.Cwd, Model: id.Model, PID: id.PID,
		StartedAt: id.StartedAt, LastActivity: float64(time.Now().UnixMilli()),
		Name: id.Name, HasName: id.Name != "", RuntimeInstanceID: id.RuntimeID,
	}
	c.mu.Lock()
	p := c.presence
	c.mu.Unlock()
	if p.HasName {
		req.Name, req.HasName = p.Name, true
	}
	if p.HasModel {
		req.Model = p.Model
	}
	req.Status, req.HasStatus = p.Status, p.HasStatus
	deadline := time.Now().Add(10 * time.Second) // spec §6.5 register timeout
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetDeadline(deadline)
	if _, err := nc.Write(wire.AppendRegisterFrame(nil, req)); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%w: register: %v", ErrBrokerUnavailable, err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	for {
		payload, err := wire.NewFrameReader(br).Next()
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("%w: register: %v", ErrBrokerUnavailable, err)
		}
		f, err := wire.DecodeBrokerFrame(payload)
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("%w: register: %v", ErrIncompatibleBroker, err)
		}
		switch f.Type {
		case wire.TypeRegistered:
			if f.SessionID != id.SessionID {
				nc.Close()
				return nil, nil, fmt.Errorf("broker registered %q, not %q", f.SessionID, id.SessionID)
			}
			_ = nc.SetDeadline(time.Time{})
			return nc, br, nil
		case wire.TypeError:
			nc.Close()
			return nil, nil, &RefusedError{Code: wire.ErrorCode(f.Code), Message: f.Error}
		}
		// Anything else before registered is ignored (none is expected).
	}
}

// install makes nc the live connection, replays the outbox and starts the
// reader.
func (c *Client) install(nc net.Conn, br *bufio.Reader) (installed bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return false
	}
	c.nc = nc // a replaced connection's reader ends when the broker closes it
	c.retiring, c.retiringLost = nil, false
	c.sessionID = c.cfg.Identity.SessionID
	ready := c.ready
	c.mu.Unlock()

	c.replayOutbox("")
	c.markReady(ready)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.readLoop(nc, br)
		c.lost(nc)
	}()
	if c.cfg.OnRegistered != nil {
		c.cfg.OnRegistered()
	}
	return true
}

// Gone is closed once a client without Reconnect has lost its
// connection: nothing more will arrive on it.
func (c *Client) Gone() <-chan struct{} { return c.gone }

// markReady closes ready (the registered signal) unless a concurrent
// registration already did or the connection was lost since.
func (c *Client) markReady(ready chan struct{}) {
	c.mu.Lock()
	if c.ready == ready && !isClosedChan(ready) {
		close(ready)
	}
	c.mu.Unlock()
}

// replayOutbox re-sends every queued message not already in flight (those
// to session only, unless it is ""), with its original id and target
// (spec §5.3). Broker dedup makes it idempotent. Entries ReplayFilter
// refuses are dropped instead.
func (c *Client) replayOutbox(only string) {
	if c.cfg.Outbox == nil {
		return
	}
	for _, e := range c.cfg.Outbox.Entries() {
		if only != "" && e.To != only {
			continue
		}
		if c.cfg.ReplayFilter != nil && !c.cfg.ReplayFilter(e.To) {
			if err := c.cfg.Outbox.Remove(e.id); err != nil {
				c.log.Error("outbox write failed", "err", err)
			}
			c.log.Info("dropped a queued message the replay policy refuses", "message", e.id)
			continue
		}
		frame := wire.AppendSendFrame(nil, e.To, e.Message)
		if err := checkSendFrame(frame); err != nil {
			// Queued by a client that did not check (an older one): the
			// broker would drop the connection on it at every replay.
			if err := c.cfg.Outbox.Remove(e.id); err != nil {
				c.log.Error("outbox write failed", "err", err)
			}
			c.log.Warn("dropped a queued message no broker can take", "message", e.id, "err", err)
			continue
		}
		c.mu.Lock()
		_, inFlight := c.sends[e.id]
		if inFlight && only != "" {
			c.mu.Unlock()
			continue // on this connection already: its outcome is coming
		}
		if !inFlight {
			c.sends[e.id] = &sendWait{result: make(chan sendResult, 1), replay: true}
		}
		nc := c.nc
		c.mu.Unlock()
		if err := c.writeTo(nc, frame); err != nil {
			return
		}
	}
}

// deliveryHeadroom is what the broker's message frame may add to a send
// frame's payload: the sender's session info (id, name, cwd, model,
// status within their spec §6.7 bounds, JSON-escaped) and the delivery id
// in place of the target.
const deliveryHeadroom = 64 << 10

// MaxSendPayload is the largest send frame payload a client writes, in
// bytes: a frame over wire.MaxFrameBytes makes the broker drop the
// connection without an answer (spec §1.2), and the message frame that
// delivers it must fit the recipient's reader as well.
const MaxSendPayload = wire.MaxFrameBytes - deliveryHeadroom

// checkSendFrame refuses a send frame no broker would take (ErrInvalidInput):
// text and attachments within their own limits can still exceed it once
// JSON-escaped (a control character takes 6 bytes).
func checkSendFrame(frame []byte) error {
	if n := len(frame) - wire.HeaderBytes; n > MaxSendPayload {
		return fmt.Errorf("%w: the message is %d bytes once encoded, over the %d a message may take (the intercom's frames hold 1 MiB, and text and attachments are JSON-escaped: a control character takes 6 bytes); send less, or a path to a file", ErrInvalidInput, n, MaxSendPayload)
	}
	return nil
}

func (c *Client) writeTo(nc net.Conn, frame []byte) error {
	if nc == nil {
		return ErrNotConnected
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(frame) > 0 {
		chunk := frame
		if !c.cfg.Unpaced {
			// A batch (acknowledgements of a flood) in pieces the
			// broker's bucket can pay for, each when it can.
			n, cost := wire.FramesPrefix(frame, paceChunk)
			chunk = frame[:n]
			if d := c.pace.delay(nc, cost, time.Now()); d > 0 {
				time.Sleep(d) // about a second at most: a frame costs at most 128 tokens
			}
		}
		_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(chunk); err != nil {
			return err
		}
		frame = frame[len(chunk):]
	}
	return nil
}

// write sends a frame on the current connection.
func (c *Client) write(frame []byte) error {
	c.mu.Lock()
	nc := c.nc
	c.mu.Unlock()
	return c.writeTo(nc, frame)
}

// waitReady waits for a registered connection (through reconnects).
func (c *Client) waitReady(ctx context.Context) (net.Conn, error) {
	for {
		c.mu.Lock()
		closed, ready, nc := c.closed, c.ready, c.nc
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if isClosedChan(ready) && nc != nil {
			return nc, nil
		}
		if !c.cfg.Reconnect {
			return nil, ErrNotConnected
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", ErrNotConnected, ctx.Err())
		case <-c.done:
			return nil, ErrClosed
		}
	}
}

// lost runs when a connection's reader ends: waiters learn the outcome is
// unknown, and with Reconnect a new connection is sought.
func (c *Client) lost(nc net.Conn) {
	nc.Close()
	c.mu.Lock()
	hook := c.lostHook
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	c.mu.Lock()
	if c.nc != nc {
		c.mu.Unlock()
		return
	}
	if c.retiring == nc {
		// Replaced by SetScope (spec §4.4): the new connection is installed
		// next; treating this as a loss would reconnect over it.
		c.retiringLost = true
		c.mu.Unlock()
		return
	}
	c.nc = nil
	c.ready = make(chan struct{})
	for id, w := range c.sends {
		if !w.replay {
			w.result <- sendResult{out: Outcome{MessageID: id, Accepted: w.accepted, DeliveryID: w.deliveryID}, err: ErrConnectionLost}
		}
		delete(c.sends, id)
	}
	for rid, ch := range c.lists {
		close(ch)
		delete(c.lists, rid)
	}
	for rid, ch := range c.controls {
		close(ch)
		delete(c.controls, rid)
	}
	closed := c.closed
	if !closed && !c.cfg.Reconnect && !isClosedChan(c.gone) {
		close(c.gone)
	}
	c.mu.Unlock()
	if closed || !c.cfg.Reconnect {
		return
	}
	c.log.Info("intercom connection lost; reconnecting", "session", c.cfg.Identity.SessionID)
	c.mu.Lock()
	c.reconnects++
	c.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.reconnectLoop()
	}()
}

func (c *Client) reconnectLoop() {
	for attempt := 0; ; attempt++ {
		delay := reconnectBackoff[min(attempt, len(reconnectBackoff)-1)]
		select {
		case <-c.done:
			return
		case <-time.After(delay):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := c.connectOnce(ctx)
		cancel()
		if err == nil {
			c.log.Info("intercom reconnected", "session", c.cfg.Identity.SessionID)
			return
		}
		if errors.Is(err, ErrClosed) {
			return
		}
		c.log.Warn("intercom reconnect failed", "err", err, "attempt", attempt+1)
	}
}

// readLoop dispatches broker frames. Inbound messages are staged and
// committed in batches: whatever arrived together is made durable with one
// Commit before any of it is acknowledged.
func (c *Client) readLoop(nc net.Conn, br *bufio.Reader) {
	fr := wire.NewFrameReader(br)
	var acks []byte
	staged := false
	for {
		payload, err := fr.Next()
		if err != nil {
			return
		}
		f, err := wire.DecodeBrokerFrame(payload)
		if err != nil {
			c.log.Error("dropping connection: invalid frame from broker", "err", err)
			return
		}
		if f.Type == wire.TypeMessage {
			reject := ""
			if c.cfg.Handler != nil {
				reject = c.cfg.Handler.Stage(f)
				staged = true
			}
			if reject != "" {
				acks = wire.AppendMessageRejected(acks, f.DeliveryID, reject)
			} else {
				acks = wire.AppendMessageReceived(acks, f.DeliveryID)
			}
		} else {
			c.dispatch(f)
		}
		if br.Buffered() > 0 && len(acks) < 64<<10 {
			continue // more frames already here: batch them
		}
		if len(acks) > 0 {
			if staged && c.cfg.Handler != nil {
				if err := c.cfg.Handler.Commit(); err != nil {
					// Not durable: acknowledge nothing; the broker will time
					// the deliveries out and the senders keep their copies.
					c.log.Error("inbox write failed; deliveries left unacknowledged", "err", err)
					acks, staged = acks[:0], false
					continue
				}
			}
			if err := c.writeTo(nc, acks); err != nil {
				return
			}
			acks, staged = acks[:0], false
		}
	}
}

func (c *Client) dispatch(f *wire.BrokerFrame) {
	switch f.Type {
	case wire.TypeSessions:
		c.mu.Lock()
		ch := c.lists[f.RequestID]
		delete(c.lists, f.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- f.Sessions
		}
	case wire.TypeAskControlResult:
		c.mu.Lock()
		ch := c.controls[f.RequestID]
		delete(c.controls, f.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- f.Applied
		}
	case wire.TypeDeliveryAccepted:
		c.mu.Lock()
		if w := c.sends[f.MessageID]; w != nil {
			w.accepted, w.deliveryID = true, f.DeliveryID
		}
		c.mu.Unlock()
	case wire.TypeDelivered, wire.TypeDeliveryFailed:
		out := Outcome{MessageID: f.MessageID, Delivered: f.Type == wire.TypeDelivered, DeliveryID: f.DeliveryID}
		if out.Delivered {
			out.Accepted = true
		} else {
			out.Accepted, out.Code, out.Reason = f.Accepted, wire.FailureCode(f.Code), f.Reason
		}
		c.mu.Lock()
		w := c.sends[f.MessageID]
		delete(c.sends, f.MessageID)
		c.mu.Unlock()
		if out.Code == wire.FailRecipientDisconnected && out.Accepted {
			// Handed on, then the recipient went away: it may not have
			// stored it. Kept, and sent again when it joins again (or at
			// the next registration); its inbox drops a second copy.
			c.log.Info("kept a message whose recipient went away for a resend", "message", f.MessageID)
		} else if c.cfg.Outbox != nil {
			if err := c.cfg.Outbox.Remove(f.MessageID); err != nil {
				c.log.Error("outbox write failed", "err", err)
			}
		}
		if w != nil {
			if out.DeliveryID == "" {
				out.DeliveryID = w.deliveryID
			}
			w.result <- sendResult{out: out}
		}
	default:
		if f.Type == wire.TypeSessionJoined && c.cfg.Outbox != nil && c.cfg.Outbox.HasFor(f.Session.ID) {
			go c.replayOutbox(strings.Clone(f.Session.ID))
		}
		if c.cfg.Handler != nil {
			c.cfg.Handler.Event(f)
		}
	}
}

// Send sends msg to `to` and waits for the broker's final outcome: delivered
// or delivery_failed. With an outbox, the message is recorded before the
// frame is written. If ctx ends or the connection drops first, the error is
// ErrConnectionLost or the ctx error and the outcome is unknown.
func (c *Client) Send(ctx context.Context, to string, msg *wire.MessageInfo) (Outcome, error) {
	frame := wire.AppendSendFrame(nil, to, msg.Raw)
	if err := checkSendFrame(frame); err != nil {
		return Outcome{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.outcomeWait)
	nc, err := c.waitReady(rctx)
	cancel()
	if err != nil {
		return Outcome{}, err
	}
	if c.cfg.Outbox != nil {
		if _, err := c.cfg.Outbox.Enqueue(to, msg); err != nil {
			return Outcome{}, err
		}
	}
	w := &sendWait{result: make(chan sendResult, 1)}
	c.mu.Lock()
	if prev := c.sends[msg.ID]; prev != nil && !prev.replay {
		c.mu.Unlock()
		return Outcome{}, fmt.Errorf("message %s is already being sent", msg.ID)
	}
	c.sends[msg.ID] = w
	c.mu.Unlock()
	if err := c.writeTo(nc, frame); err != nil {
		c.forget(msg.ID, w)
		return Outcome{}, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	// The outcome's time runs from the write: a send that waited its turn
	// behind the pacing (a burst of large messages) is not yet late.
	outcome := time.NewTimer(c.outcomeWait)
	defer outcome.Stop()
	select {
	case r := <-w.result:
		return r.out, r.err
	case <-outcome.C:
		c.forget(msg.ID, w)
		return Outcome{MessageID: msg.ID, Accepted: w.accepted}, fmt.Errorf("no outcome within %s of the send: %w", c.outcomeWait, context.DeadlineExceeded)
	case <-ctx.Done():
		c.forget(msg.ID, w)
		return Outcome{MessageID: msg.ID, Accepted: w.accepted}, ctx.Err()
	case <-c.done:
		return Outcome{}, ErrClosed
	}
}

func (c *Client) forget(id string, w *sendWait) {
	c.mu.Lock()
	if c.sends[id] == w {
		delete(c.sends, id)
	}
	c.mu.Unlock()
}

// List returns the sessions the broker shows this session (its scope,
// itself included), within 5 s (spec §6.5). A list the connection dropped
// under is asked again once the client has reconnected: it changes
// nothing, so the caller (a send resolving its target) need not fail.
func (c *Client) List(ctx context.Context) ([]wire.SessionInfo, error) {
	list, err := c.listOnce(ctx)
	if errors.Is(err, ErrConnectionLost) && c.cfg.Reconnect {
		list, err = c.listOnce(ctx)
	}
	return list, err
}

func (c *Client) listOnce(ctx context.Context) ([]wire.SessionInfo, error) {
	nc, err := c.waitReady(ctx)
	if err != nil {
		return nil, err
	}
	rid := NewMessageID()
	ch := make(chan []wire.SessionInfo, 1)
	c.mu.Lock()
	c.lists[rid] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.lists, rid)
		c.mu.Unlock()
	}()
	if err := c.writeTo(nc, wire.AppendListRequest(nil, rid)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	select {
	case s, ok := <-ch:
		if !ok {
			return nil, ErrConnectionLost
		}
		return s, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("list sessions: %w", ctx.Err())
	}
}

// AskControl sends defer_ask or cancel_ask for one of this session's asks
// and reports whether the broker applied it (false after 2 s, spec §2.4).
func (c *Client) AskControl(ctx context.Context, typ, messageID string) (bool, error) {
	nc, err := c.waitReady(ctx)
	if err != nil {
		return false, err
	}
	rid := NewMessageID()
	ch := make(chan bool, 1)
	c.mu.Lock()
	c.controls[rid] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.controls, rid)
		c.mu.Unlock()
	}()
	if err := c.writeTo(nc, wire.AppendAskControl(nil, typ, rid, messageID)); err != nil {
		return false, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	select {
	case applied, ok := <-ch:
		return ok && applied, nil
	case <-ctx.Done():
		return false, nil
	}
}

// Presence publishes name/status/model changes (no answer frame); every
// later registration carries them, so a broker restarted meanwhile shows
// them too.
func (c *Client) Presence(ctx context.Context, p wire.Presence) error {
	c.mu.Lock()
	if p.HasName {
		c.presence.Name, c.presence.HasName = p.Name, true
	}
	if p.HasStatus {
		c.presence.Status, c.presence.HasStatus = p.Status, true
	}
	if p.HasModel {
		c.presence.Model, c.presence.HasModel = p.Model, true
	}
	c.mu.Unlock()
	nc, err := c.waitReady(ctx)
	if err != nil {
		return err
	}
	return c.writeTo(nc, wire.AppendPresenceFrame(nil, &p))
}

// Close unregisters and closes the connection. preserveAsks keeps this
// session's ask edges (deferred) so late replies still reach it; the outbox
// is kept either way, for the next registration under this id to replay.
func (c *Client) Close(preserveAsks bool) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	nc := c.nc
	c.mu.Unlock()
	close(c.done)
	if nc != nil {
		_ = c.writeTo(nc, wire.AppendUnregisterFrame(nil, preserveAsks))
		if uc, ok := nc.(interface{ CloseWrite() error }); ok {
			_ = uc.CloseWrite()
			// Let the broker process the unregister before the socket goes,
			// so the next one-shot under this id is not refused as in use.
			_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		} else {
			nc.Close()
		}
	}
	c.wg.Wait()
	if nc != nil {
		nc.Close()
	}
	if c.cfg.Outbox != nil {
		// Outcomes that arrived are written before the process may exit,
		// and the whole outbox into its file, which is all a TypeScript
		// client that registers this id next reads.
		return c.cfg.Outbox.Close()
	}
	return nil
}

// SetScope moves the session to scope ("" = unscoped) in place: the same
// session id, runtime and outbox re-register under the new scope, which
// the broker treats as a same-runtime replacement (spec §4.4): the old
// scope sees the session leave, the new one sees it join, and the old
// connection is ended by the broker. Deliveries still in flight on the old
// connection may fail (SENDER_DISCONNECTED) as they would on any
// replacement; the outbox is replayed on the new connection. An invalid
// scope is refused before anything changes (wire.ErrInvalidScope). While
// disconnected with Reconnect set, the next reconnect uses the new scope;
// without Reconnect that is ErrNotConnected and nothing changes. One
// SetScope runs at a time.
func (c *Client) SetScope(ctx context.Context, scope string) error {
	if err := wire.ValidateScope(scope); err != nil {
		return err
	}
	c.switchMu.Lock()
	defer c.switchMu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	prev := c.scope
	connected := c.nc != nil && isClosedChan(c.ready)
	if !connected && !c.cfg.Reconnect {
		c.mu.Unlock()
		return ErrNotConnected
	}
	c.scope = scope
	if connected {
		c.retiring, c.retiringLost = c.nc, false
	}
	afterRegister := c.afterScopeRegister
	c.mu.Unlock()
	if !connected {
		return nil // the reconnect loop registers under the new scope
	}
	nc, br, err := c.register(ctx)
	if err == nil && afterRegister != nil {
		afterRegister()
	}
	if err != nil {
		c.mu.Lock()
		c.scope = prev
		old, oldLost := c.retiring, c.retiringLost
		c.retiring, c.retiringLost = nil, false
		c.mu.Unlock()
		if oldLost {
			c.lost(old) // it ended meanwhile: now that is a loss
		}
		return err
	}
	if !c.install(nc, br) {
		return ErrClosed
	}
	return nil
}
