package broker

import (
	"container/list"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// drainWait is how long the event loop keeps a connection it has
// half-closed, waiting for the peer's EOF so closing cannot reset the peer
// before it read everything. A variable for tests.
var drainWait = time.Second

// conn is one accepted connection on broker.sock.
//
// Its bytes move by one of two transports. On Linux one event loop per
// broker reads every connection (conn_linux.go); elsewhere, and on Linux in
// tests that ask for it, each connection has a reader and a writer
// goroutine (conn_goroutine.go). Either way frames are handled in order per
// connection, output is written straight to the socket when nothing is
// queued, and what the socket does not take at once waits in a bounded
// queue.
type conn struct {
	b *Broker

	peerPID int // kernel-verified, 0 where unknown
	peerUID int

	stopped atomic.Bool // no further frames are handled

	// proxy marks the stand-in connection of a proxy session (proxy.go):
	// no socket, and what is sent to it is dropped, since the session's
	// home host tells the real session itself.
	proxy bool

	// Reader state (one reader at a time).
	tokens     float64
	lastRefill time.Time

	// Guarded by b.mu.
	sessionID  string // bound or formerly bound session; "" = unregistered
	regTimer   *time.Timer
	unregElem  *list.Element
	deliveries map[*delivery]struct{} // pending, as sender or recipient

	// Output queue, guarded by wmu.
	wmu     sync.Mutex
	out     []byte
	spare   []byte
	writing bool // the writer goroutine holds a buffer it is writing
	ending  bool // close once out is flushed
	dead    bool // closed; drop output

	// Goroutine transport.
	nc   net.Conn
	wake chan struct{}
	raw  syscall.RawConn

	// Event loop transport (Linux).
	loopConn
}

// admit checks a new connection's peer and creates its conn, or returns nil
// for a refused peer or a broker that is closing (nc is then closed).
func (b *Broker) admit(nc net.Conn) *conn {
	uid, pid, credErr := intercom.PeerCredentials(nc)
	if b.cfg.CheckPeerUID && credErr == nil && uid != os.Getuid() {
		b.log.Warn("refused connection from another user", "uid", uid, "pid", pid)
		_ = nc.Close()
		return nil
	}
	return &conn{
		b:          b,
		peerPID:    pid,
		peerUID:    uid,
		tokens:     b.cfg.RateCapacity,
		lastRefill: b.cfg.RateClock(),
		deliveries: make(map[*delivery]struct{}),
	}
}

// rateAllows takes cost tokens from the connection's bucket (spec §6.6).
func (c *conn) rateAllows(cost float64) bool {
	now := c.b.cfg.RateClock()
	if el := now.Sub(c.lastRefill); el > 0 {
		c.tokens = min(c.b.cfg.RateCapacity, c.tokens+el.Seconds()*c.b.cfg.RateRefill)
		c.lastRefill = now
	}
	if c.tokens < cost {
		return false
	}
	c.tokens -= cost
	return true
}

// frameIn counts one frame read and handles it; it reports whether the
// connection should keep reading.
func (c *conn) frameIn(payload []byte) bool {
	st := &c.b.stats
	st.framesIn.Add(1)
	st.bytesIn.Add(uint64(len(payload) + wire.HeaderBytes))
	st.framesRate.add(1)
	return c.b.handleFrame(c, payload)
}

// Each transport provides, for a conn:
//
//	send(frame)  writes one encoded frame (or several). When nothing is
//	             queued it writes straight to the socket without blocking,
//	             so frames leave in the order the broker produced them,
//	             across connections as within one, with no hand-off; what
//	             the socket does not take at once is queued. A connection
//	             whose queue grows past MaxQueueBytes is a reader that
//	             stopped reading: it is dropped rather than allowed to hold
//	             broker memory.
//	end()        closes the connection once everything queued so far is
//	             written, and stops handling its frames (the reference's
//	             socket.end()).
//	destroy()    closes the connection at once, dropping queued output.

// queue appends what could not be written to the output queue, or drops a
// connection whose queue would pass MaxQueueBytes. Called with wmu held;
// it reports false when the connection was dropped.
func (c *conn) queue(frame []byte) bool {
	if len(c.out)+len(frame) > c.b.cfg.MaxQueueBytes {
		c.dead = true
		c.out = nil
		c.b.stats.slowClosed.Add(1)
		c.b.log.Warn("dropped connection: not reading its frames", "session", c.sessionID)
		return false
	}
	c.out = append(c.out, frame...)
	return true
}
