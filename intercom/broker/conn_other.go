//go:build !linux

package broker

import "net"

// Without Linux's epoll every connection has its reader and writer
// goroutines (conn_goroutine.go).

// eventLoop and loopConn hold the Linux event loop's state; there is none
// here.
type (
	eventLoop struct{}
	loopConn  struct{}
)

func (b *Broker) serveConn(nc net.Conn) { b.serveConnGoroutines(nc) }

func (c *conn) send(frame []byte) {
	if !c.proxy {
		c.goSend(frame)
	}
}

func (c *conn) end() {
	if !c.proxy {
		c.goEnd()
	}
}

func (c *conn) destroy() {
	if !c.proxy {
		c.goDestroy()
	}
}
