//go:build linux

package broker

import (
	"encoding/binary"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// The event loop transport (Linux). One goroutine reads every connection of
// a broker through an epoll instance of its own, which itself waits in the
// Go runtime's poller, so an idle broker parks like any goroutine and a
// frame costs one wake-up: no goroutine per connection, no hand-off, and no
// wake-ups for write space. The runtime poller registers every socket for
// writability too, and a peer reading what the broker wrote would wake it
// once per frame for nothing; this epoll instance asks for write readiness
// only while output is queued.
//
// Only the loop goroutine reads and closes a connection's descriptor. Other
// goroutines write to it under wmu, and ask the loop to close it.

// loopConn is a connection's event loop state.
type loopConn struct {
	loop    *eventLoop // nil: the goroutine transport
	fd      int        // our own descriptor of the socket, owned by the loop
	id      uint64     // epoll data; never reused, unlike descriptor numbers
	partial []byte     // the start of a frame not yet complete

	// Guarded by wmu.
	events   uint32 // registered epoll events
	finished bool   // the descriptor is closed

	// Loop goroutine only.
	readDone bool // connClosed ran: input is discarded
	eof      bool // the peer shut its side
	draining bool // output flushed and write side shut: waiting for the peer's EOF
	timers   []*time.Timer
}

const (
	loopReadBytes = 64 << 10
	loopBatch     = 128
	wakeID        = 0 // epoll data of the loop's eventfd
	readEvents    = syscall.EPOLLIN | syscall.EPOLLRDHUP
)

// eventLoop serves the connections of one broker. It runs while it has
// connections: the first connection starts it, and it exits (closing its
// epoll instance) when the last one is gone, so a broker that stops leaves
// nothing behind.
type eventLoop struct {
	b *Broker

	mu        sync.Mutex
	running   bool
	epfd      int
	evfd      int
	file      *os.File // epfd in the runtime poller
	raw       syscall.RawConn
	conns     map[uint64]*conn
	attention []*conn // connections other goroutines asked the loop to look at
	nextID    uint64

	// Loop goroutine only.
	events []syscall.EpollEvent
	buf    []byte
	more   bool // events handled may have left input to poll for at once
}

// send, end and destroy: see conn.go.
func (c *conn) send(frame []byte) {
	if c.loop != nil {
		c.loopSend(frame)
		return
	}
	if !c.proxy {
		c.goSend(frame)
	}
}

func (c *conn) end() {
	if c.loop != nil {
		c.loopEnd()
		return
	}
	if !c.proxy {
		c.goEnd()
	}
}

func (c *conn) destroy() {
	if c.loop != nil {
		c.loopDestroy()
		return
	}
	if !c.proxy {
		c.goDestroy()
	}
}

// serveConn hands nc to the broker's event loop, or to a goroutine pair
// when Config asks for goroutines or the loop cannot take it. It runs on
// the accept loop.
func (b *Broker) serveConn(nc net.Conn) {
	uc, ok := nc.(*net.UnixConn)
	if b.cfg.goroutineIO || !ok {
		b.serveConnGoroutines(nc)
		return
	}
	c := b.admit(nc)
	if c == nil {
		return
	}
	fd, err := ownDescriptor(uc)
	if err != nil {
		b.log.Warn("event loop: falling back to goroutines", "err", err)
		b.startGoroutines(c, nc)
		return
	}
	_ = nc.Close() // leaves the runtime poller; fd keeps the socket open
	b.mu.Lock()
	if b.loop == nil {
		b.loop = &eventLoop{b: b, conns: make(map[uint64]*conn)}
	}
	lp := b.loop
	b.mu.Unlock()
	c.loop, c.fd = lp, fd
	if err := lp.add(c); err != nil {
		b.log.Warn("event loop: cannot serve a connection", "err", err)
		_ = syscall.Close(fd)
		return
	}
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		c.loopDestroy()
		return
	}
	b.conns[c] = struct{}{}
	b.armRegistration(c)
	b.mu.Unlock()
}

// ownDescriptor duplicates the socket's descriptor (close-on-exec,
// non-blocking like the original).
func ownDescriptor(uc *net.UnixConn) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			derr = e
			return
		}
		nfd = int(r)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := syscall.SetNonblock(nfd, true); err != nil {
		_ = syscall.Close(nfd)
		return -1, err
	}
	return nfd, nil
}

// add registers c, starting the loop if it is not running.
func (lp *eventLoop) add(c *conn) error {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if !lp.running {
		if err := lp.start(); err != nil {
			return err
		}
	}
	lp.nextID++
	c.id = lp.nextID
	c.events = readEvents
	if err := syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_ADD, c.fd, epollEvent(c.events, c.id)); err != nil {
		return err
	}
	lp.conns[c.id] = c
	return nil
}

// start creates the epoll instance and its eventfd and runs the loop.
// Called with mu held.
func (lp *eventLoop) start() error {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	r, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if e != 0 {
		_ = syscall.Close(epfd)
		return e
	}
	evfd := int(r)
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, evfd, epollEvent(syscall.EPOLLIN, wakeID)); err != nil {
		_ = syscall.Close(epfd)
		_ = syscall.Close(evfd)
		return err
	}
	// A non-blocking epoll descriptor is pollable: the runtime poller
	// wakes the loop when any of its connections has something.
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		_ = syscall.Close(evfd)
		return err
	}
	file := os.NewFile(uintptr(epfd), "broker-epoll")
	raw, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		_ = syscall.Close(evfd)
		return err
	}
	lp.epfd, lp.evfd, lp.file, lp.raw = epfd, evfd, file, raw
	if lp.events == nil {
		lp.events = make([]syscall.EpollEvent, loopBatch)
		lp.buf = make([]byte, loopReadBytes)
	}
	lp.running = true
	lp.b.wg.Add(1)
	go func() {
		defer lp.b.wg.Done()
		lp.run()
	}()
	return nil
}

func epollEvent(events uint32, id uint64) *syscall.EpollEvent {
	return &syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

func eventID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// waitEvents collects ready events without blocking.
func (lp *eventLoop) waitEvents() (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(lp.epfd),
		uintptr(unsafe.Pointer(&lp.events[0])), uintptr(len(lp.events)), 0, 0, 0)
	return int(r), e
}

// run serves events until the loop has no connection left. It polls its
// epoll instance only when the runtime poller says it has something, and
// not once more before parking when the events it handled left nothing
// behind: a frame costs one poll, not two. The runtime watches the epoll
// descriptor edge-triggered, and every new event on any connection is a
// new edge, so parking cannot miss one; what a level-triggered event
// would report again with no new edge (a read that filled the buffer, a
// full batch, a peer's end that came with its last frame, input left
// behind by a frame that ended reading) is polled for at once.
func (lp *eventLoop) run() {
	for {
		var errno syscall.Errno
		idle := false
		err := lp.raw.Read(func(uintptr) bool {
			for {
				var n int
				n, errno = lp.waitEvents()
				switch {
				case errno == syscall.EINTR:
					continue
				case errno != 0:
					return true
				case n == 0:
					return false // park until the next edge
				}
				lp.more = n == len(lp.events)
				lp.handle(n)
				if idle = lp.idle(); idle {
					return true // closing the epoll file waits for Read
				}
				if !lp.more {
					return false
				}
			}
		})
		if err != nil || errno != 0 {
			lp.b.log.Error("event loop failed", "err", err, "errno", errno)
			lp.abort()
			return
		}
		if idle && lp.idleExit() {
			return
		}
	}
}

// handle acts on n events, then on what other goroutines asked for.
func (lp *eventLoop) handle(n int) {
	for i := range n {
		ev := &lp.events[i]
		id := eventID(ev)
		if id == wakeID {
			var b [8]byte
			_, _ = rawRead(uintptr(lp.evfd), b[:])
			continue
		}
		lp.mu.Lock()
		c := lp.conns[id]
		lp.mu.Unlock()
		if c == nil {
			continue // closed earlier in this batch
		}
		if ev.Events&syscall.EPOLLOUT != 0 {
			lp.flush(c)
		}
		if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
			lp.readable(c)
		}
		if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
			// The end came with the last frame, before the poll: one read
			// took the frame, the end needs another, and no new edge
			// will come for it.
			lp.more = true
		}
	}
	lp.mu.Lock()
	todo := lp.attention
	lp.attention = nil
	lp.mu.Unlock()
	for _, c := range todo {
		lp.settle(c)
	}
}

// idle reports whether the loop has no connection left.
func (lp *eventLoop) idle() bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return len(lp.conns) == 0 && len(lp.attention) == 0
}

// idleExit stops the loop when it has no connection left.
func (lp *eventLoop) idleExit() bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if len(lp.conns) > 0 || len(lp.attention) > 0 {
		return false
	}
	lp.running = false
	_ = lp.file.Close()
	_ = syscall.Close(lp.evfd)
	return true
}

// abort closes every connection after the epoll instance failed.
func (lp *eventLoop) abort() {
	lp.mu.Lock()
	conns := make([]*conn, 0, len(lp.conns))
	for _, c := range lp.conns {
		conns = append(conns, c)
	}
	lp.mu.Unlock()
	for _, c := range conns {
		c.loopDestroy()
		lp.finish(c)
	}
	lp.mu.Lock()
	lp.attention = nil
	lp.mu.Unlock()
	lp.idleExit()
}

// readable reads what c has (one read per event: the level-triggered epoll
// reports the rest) and handles every complete frame.
func (lp *eventLoop) readable(c *conn) {
	if c.finished || c.eof {
		return
	}
	var n int
	var errno syscall.Errno
	for {
		n, errno = rawRead(uintptr(c.fd), lp.buf)
		if errno != syscall.EINTR {
			break
		}
	}
	if errno == syscall.EAGAIN {
		return
	}
	if n == len(lp.buf) {
		lp.more = true // the socket may hold more
	}
	switch {
	case errno != 0 || n <= 0:
		lp.peerClosed(c)
		return
	case c.readDone || c.stopped.Load():
		// Input after the end (a replaced socket's late frame, spec §4.4)
		// is discarded with the socket: closed once queued output is
		// written, as the reference destroys it.
		lp.peerClosed(c)
		return
	}
	data := lp.buf[:n]
	if len(c.partial) > 0 {
		c.partial = append(c.partial, data...)
		data = c.partial
	}
	for len(data) >= wire.HeaderBytes {
		size := int(binary.BigEndian.Uint32(data))
		if size > wire.MaxFrameBytes {
			// Silent destroy as soon as the header is read (spec §1.2).
			lp.b.log.Debug("dropped connection: oversized frame", "declared", size)
			c.loopDestroy()
			lp.stopReading(c)
			lp.finish(c)
			return
		}
		if len(data) < wire.HeaderBytes+size {
			if cap(c.partial) < wire.HeaderBytes+size {
				// Room for the whole frame, so the rest is appended
				// without copying it again.
				grown := make([]byte, len(data), wire.HeaderBytes+size)
				copy(grown, data)
				c.partial, data = grown, grown
			}
			break
		}
		payload := data[wire.HeaderBytes : wire.HeaderBytes+size]
		data = data[wire.HeaderBytes+size:]
		if !c.frameIn(payload) {
			lp.readEnded(c)
			return
		}
	}
	switch {
	case len(data) == 0:
		if cap(c.partial) > loopReadBytes {
			c.partial = nil
		} else {
			c.partial = c.partial[:0]
		}
	case len(c.partial) > 0 && &data[0] == &c.partial[0]:
		// The incomplete frame already starts the buffer.
	default:
		c.partial = append(c.partial[:0], data...)
	}
}

// peerClosed handles the peer's EOF (or a read error).
func (lp *eventLoop) peerClosed(c *conn) {
	c.eof = true
	c.wmu.Lock()
	flushing := c.ending && !c.dead && len(c.out) > 0
	if flushing {
		// Finish a graceful end: write what is queued, read no more.
		lp.setEvents(c, syscall.EPOLLOUT)
	} else if !c.dead {
		c.dead = true
		c.out = nil
	}
	c.wmu.Unlock()
	lp.stopReading(c)
	if !flushing {
		lp.finish(c)
	}
}

// readEnded is a frame ending c's input (refused, malformed, or after an
// end): unless a graceful end is flushing, c is destroyed.
func (lp *eventLoop) readEnded(c *conn) {
	lp.more = true // input may be left behind, with no edge to come
	lp.stopReading(c)
	c.wmu.Lock()
	graceful := c.ending && !c.dead
	c.wmu.Unlock()
	if !graceful {
		c.loopDestroy()
	}
	lp.settle(c)
}

// stopReading runs connClosed once: no frame of c is handled any more.
func (lp *eventLoop) stopReading(c *conn) {
	if c.readDone {
		return
	}
	c.readDone = true
	c.stopped.Store(true)
	lp.b.connClosed(c)
}

// settle acts on what another goroutine (or a frame) decided for c: close
// a destroyed connection, or half-close an ending one whose output is out.
func (lp *eventLoop) settle(c *conn) {
	if c.finished {
		return
	}
	c.wmu.Lock()
	dead := c.dead
	halfClose := c.ending && !c.dead && len(c.out) == 0 && !c.draining
	if halfClose {
		lp.halfClose(c)
	}
	c.wmu.Unlock()
	if dead {
		lp.stopReading(c)
		lp.finish(c)
		return
	}
	if halfClose && c.eof {
		lp.stopReading(c)
		lp.finish(c)
	}
}

// halfClose shuts the write side once everything is written, so the peer
// reads it all, then waits a second for the peer's EOF (closing with unread
// input would reset the peer). Called with wmu held.
func (lp *eventLoop) halfClose(c *conn) {
	c.draining = true
	_ = syscall.Shutdown(c.fd, syscall.SHUT_WR)
	if c.events&syscall.EPOLLOUT != 0 {
		lp.setEvents(c, c.events&^syscall.EPOLLOUT)
	}
	c.timers = append(c.timers, time.AfterFunc(drainWait, c.loopDestroy))
}

// flush writes queued output when the socket has room again.
func (lp *eventLoop) flush(c *conn) {
	c.wmu.Lock()
	if c.finished || c.dead {
		c.wmu.Unlock()
		return
	}
	if len(c.out) > 0 {
		n, errno := writeFD(c.fd, c.out)
		lp.b.stats.bytesOut.Add(uint64(n))
		if errno != 0 && errno != syscall.EAGAIN {
			c.dead = true
			c.out = nil
			c.wmu.Unlock()
			lp.stopReading(c)
			lp.finish(c)
			return
		}
		c.out = c.out[:copy(c.out, c.out[n:])]
	}
	done := false
	if len(c.out) == 0 {
		if cap(c.out) > loopReadBytes {
			c.out = nil
		}
		if c.ending && !c.draining {
			lp.halfClose(c)
			done = c.eof
		} else {
			lp.setEvents(c, c.events&^syscall.EPOLLOUT)
		}
	}
	c.wmu.Unlock()
	if done {
		lp.stopReading(c)
		lp.finish(c)
	}
}

// finish closes c's descriptor and forgets it. Loop goroutine only.
func (lp *eventLoop) finish(c *conn) {
	if c.finished {
		return
	}
	lp.stopReading(c)
	c.wmu.Lock()
	c.finished = true
	c.dead = true
	c.out = nil
	_ = syscall.Close(c.fd)
	timers := c.timers
	c.timers = nil
	c.wmu.Unlock()
	for _, t := range timers {
		t.Stop()
	}
	c.partial = nil
	lp.mu.Lock()
	delete(lp.conns, c.id)
	lp.mu.Unlock()
}

// setEvents changes c's registered events. Called with wmu held.
func (lp *eventLoop) setEvents(c *conn, events uint32) {
	if c.finished || events == c.events {
		return
	}
	c.events = events
	_ = syscall.EpollCtl(lp.epfd, syscall.EPOLL_CTL_MOD, c.fd, epollEvent(events, c.id))
}

// notify asks the loop to settle c.
func (lp *eventLoop) notify(c *conn) {
	lp.mu.Lock()
	lp.attention = append(lp.attention, c)
	evfd := lp.evfd
	running := lp.running
	lp.mu.Unlock()
	if running {
		one := [8]byte{1}
		_, _ = rawWrite(uintptr(evfd), one[:])
	}
}

// writeFD writes as much of b as the socket takes now.
func writeFD(fd int, b []byte) (int, syscall.Errno) {
	n := 0
	for n < len(b) {
		m, errno := rawWrite(uintptr(fd), b[n:])
		switch {
		case errno == syscall.EINTR:
			continue
		case errno != 0:
			return n, errno
		case m <= 0:
			return n, syscall.EAGAIN
		}
		n += m
	}
	return n, 0
}

func (c *conn) loopSend(frame []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.dead || c.ending || c.finished {
		return
	}
	c.b.stats.framesOut.Add(1)
	if len(c.out) == 0 {
		n, errno := writeFD(c.fd, frame)
		c.b.stats.bytesOut.Add(uint64(n))
		if n == len(frame) {
			return
		}
		if errno != syscall.EAGAIN {
			// The peer is gone; its EOF tells the loop.
			c.dead = true
			c.out = nil
			_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
			c.loop.notify(c)
			return
		}
		frame = frame[n:]
	}
	if !c.queue(frame) {
		_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
		c.loop.notify(c)
		return
	}
	c.loop.setEvents(c, c.events|syscall.EPOLLOUT)
}

func (c *conn) loopEnd() {
	c.stopped.Store(true)
	c.wmu.Lock()
	if c.dead || c.ending || c.finished {
		c.wmu.Unlock()
		return
	}
	c.ending = true
	// A peer that does not read cannot hold the flush open for long.
	c.timers = append(c.timers, time.AfterFunc(5*time.Second, c.loopDestroy))
	empty := len(c.out) == 0
	c.wmu.Unlock()
	if empty {
		c.loop.notify(c)
	}
}

func (c *conn) loopDestroy() {
	c.stopped.Store(true)
	c.wmu.Lock()
	if c.dead || c.finished {
		c.wmu.Unlock()
		return
	}
	c.dead = true
	c.out = nil
	// The peer sees the end at once; the loop closes the descriptor.
	_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	c.wmu.Unlock()
	c.loop.notify(c)
}
