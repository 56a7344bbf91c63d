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

func (c *conn) send(frame []byte) { c.goSend(frame) }
func (c *conn) end()              { c.goEnd() }
func (c *conn) destroy()          { c.goDestroy() }
