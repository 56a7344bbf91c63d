package broker

import (
	"bufio"
	"container/list"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// conn is one accepted connection on broker.sock.
type conn struct {
	b  *Broker
	nc net.Conn

	peerPID int // kernel-verified, 0 where unknown
	peerUID int

	stopped atomic.Bool // no further frames are handled

	// Reader-goroutine state.
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
	wake    chan struct{}
	writing bool // the writer goroutine holds a buffer it is writing
	ending  bool // close once out is flushed
	dead    bool // closed; drop output
	raw     syscall.RawConn
}

func (b *Broker) serveConn(nc net.Conn) {
	uid, pid, credErr := intercom.PeerCredentials(nc)
	if b.cfg.CheckPeerUID && credErr == nil && uid != os.Getuid() {
		b.log.Warn("refused connection from another user", "uid", uid, "pid", pid)
		_ = nc.Close()
		return
	}
	c := &conn{
		b:          b,
		nc:         nc,
		peerPID:    pid,
		peerUID:    uid,
		tokens:     b.cfg.RateCapacity,
		lastRefill: b.cfg.RateClock(),
		deliveries: make(map[*delivery]struct{}),
		wake:       make(chan struct{}, 1),
	}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		_ = nc.Close()
		return
	}
	b.conns[c] = struct{}{}
	b.armRegistration(c)
	b.mu.Unlock()

	done := make(chan struct{})
	go func() {
		c.writeLoop()
		close(done)
	}()
	c.readLoop()
	b.connClosed(c)
	c.wmu.Lock()
	graceful := c.ending && !c.dead
	c.wmu.Unlock()
	if !graceful {
		c.destroy()
	}
	<-done // a graceful end returns once the queue is flushed
	_ = c.nc.Close()
}

// readLoop handles frames in order until the connection ends or a frame
// requires it to end.
func (c *conn) readLoop() {
	fr := wire.NewFrameReader(bufio.NewReaderSize(c.nc, 4096))
	for {
		payload, err := fr.Next()
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.b.log.Debug("dropped connection: oversized frame", "err", err)
			}
			return // oversized, cut, or closed: silent destroy (spec §3.1)
		}
		c.b.stats.framesIn.Add(1)
		c.b.stats.bytesIn.Add(uint64(len(payload) + wire.HeaderBytes))
		c.b.stats.framesRate.add(1)
		if !c.b.handleFrame(c, payload) {
			return
		}
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

// send writes one encoded frame (or several). When nothing is queued it
// writes straight to the socket without blocking, so frames leave in the
// order the broker produced them, across connections as within one, with no
// goroutine hand-off; whatever the socket does not take at once is queued
// for the writer goroutine. A connection whose queue grows past
// MaxQueueBytes is a reader that stopped reading: it is dropped rather than
// allowed to hold broker memory.
func (c *conn) send(frame []byte) {
	c.wmu.Lock()
	if c.dead || c.ending {
		c.wmu.Unlock()
		return
	}
	c.b.stats.framesOut.Add(1)
	if len(c.out) == 0 && !c.writing && c.raw != nil {
		n := writeNow(c.raw, frame)
		c.b.stats.bytesOut.Add(uint64(n))
		if n == len(frame) {
			c.wmu.Unlock()
			return
		}
		frame = frame[n:]
	}
	if len(c.out)+len(frame) > c.b.cfg.MaxQueueBytes {
		c.dead = true
		c.out = nil
		c.wmu.Unlock()
		c.b.stats.slowClosed.Add(1)
		c.b.log.Warn("dropped connection: not reading its frames", "session", c.sessionID)
		_ = c.nc.Close()
		return
	}
	c.out = append(c.out, frame...)
	c.wmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// end closes the connection once everything queued so far is written, and
// stops handling its frames (the reference's socket.end()).
func (c *conn) end() {
	c.stopped.Store(true)
	c.wmu.Lock()
	c.ending = true
	c.wmu.Unlock()
	// A peer that does not read cannot hold the flush open for long.
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// destroy closes the connection at once, dropping queued output.
func (c *conn) destroy() {
	c.stopped.Store(true)
	c.wmu.Lock()
	already := c.dead
	c.dead = true
	c.out = nil
	c.wmu.Unlock()
	if !already {
		_ = c.nc.Close()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) writeLoop() {
	for range c.wake {
		for {
			c.wmu.Lock()
			if c.dead {
				c.wmu.Unlock()
				return
			}
			if len(c.out) == 0 {
				ending := c.ending
				if ending {
					c.dead = true
				}
				c.wmu.Unlock()
				if ending {
					// Half-close so the peer reads everything, then let the
					// reader (which handles no more frames) see the peer's
					// close or give up after a second and close for good.
					if uc, ok := c.nc.(interface{ CloseWrite() error }); ok {
						_ = uc.CloseWrite()
					}
					_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
					return
				}
				break
			}
			buf := c.out
			c.out = c.spare[:0]
			c.writing = true
			c.wmu.Unlock()
			n, err := c.nc.Write(buf)
			c.b.stats.bytesOut.Add(uint64(n))
			if err != nil {
				c.destroy()
				return
			}
			c.wmu.Lock()
			c.writing = false
			if cap(buf) <= 64<<10 {
				c.spare = buf[:0]
			} else {
				c.spare = nil // let a burst's big buffer go
			}
			c.wmu.Unlock()
		}
	}
}
