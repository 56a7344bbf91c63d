package federationtest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a host's NATS link as a test owns it: it accepts connections on
// its listener and relays each to the address target gives at the time
// (the Server's current address), byte for byte. Cut breaks the link:
// every relayed connection is closed and new ones are refused until
// Restore.
type Proxy struct {
	ln     net.Listener
	target func() string

	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	// Accepted counts the connections relayed so far, for a test to see
	// that a host reconnected.
	accepted int
}

// NewProxy relays connections accepted on ln to target(); it closes when
// the test ends.
func NewProxy(t testing.TB, ln net.Listener, target func() string) *Proxy {
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// ListenProxy is NewProxy on a new listener at 127.0.0.1:random.
func ListenProxy(t testing.TB, target func() string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return NewProxy(t, ln, target)
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy as a nats:// URL.
func (p *Proxy) URL() string { return "nats://" + p.Addr() }

// Cut closes every relayed connection and refuses new ones (accepted and
// closed at once, as a reset) until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Accepted is how many connections the proxy relayed so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops the proxy and closes what it relays.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.relay(c)
		}()
	}
}

// track registers c as relayed; false when the link is cut or closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *Proxy) relay(c net.Conn) {
	defer c.Close()
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	addr := p.target()
	if addr == "" {
		return // the server is down: a refused connection
	}
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	p.mu.Lock()
	p.accepted++
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One direction ended: end both, as a dropped TCP connection.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
