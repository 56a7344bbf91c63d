package broker

import (
	"bufio"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// The goroutine transport: a reader goroutine per connection handles its
// frames in order; a writer goroutine drains what direct writes left
// queued.

// serveConnGoroutines admits nc and starts its goroutines. It runs on the
// accept loop.
func (b *Broker) serveConnGoroutines(nc net.Conn) {
	if c := b.admit(nc); c != nil {
		b.startGoroutines(c, nc)
	}
}

func (b *Broker) startGoroutines(c *conn, nc net.Conn) {
	c.nc = nc
	c.wake = make(chan struct{}, 1)
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
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		c.serveGoroutines()
	}()
}

// serveGoroutines reads c until it ends, with a writer goroutine beside.
func (c *conn) serveGoroutines() {
	done := make(chan struct{})
	go func() {
		c.writeLoop()
		close(done)
	}()
	c.readLoop()
	c.b.connClosed(c)
	c.wmu.Lock()
	graceful := c.ending && !c.dead
	c.wmu.Unlock()
	if !graceful {
		c.goDestroy()
	}
	<-done // a graceful end returns once the queue is flushed
	_ = c.nc.Close()
}

// readLoop handles frames in order until the connection ends or a frame
// requires it to end.
func (c *conn) readLoop() {
	fr := wire.NewFrameReader(bufio.NewReaderSize(newConnReader(c.nc, c.raw), 4096))
	for {
		payload, err := fr.Next()
		if err != nil {
			if errors.Is(err, wire.ErrFrameTooLarge) {
				c.b.log.Debug("dropped connection: oversized frame", "err", err)
			}
			return // oversized, cut, or closed: silent destroy (spec §3.1)
		}
		if !c.frameIn(payload) {
			return
		}
	}
}

func (c *conn) goSend(frame []byte) {
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
	if !c.queue(frame) {
		c.wmu.Unlock()
		_ = c.nc.Close()
		return
	}
	c.wmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) goEnd() {
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

func (c *conn) goDestroy() {
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
				c.goDestroy()
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
