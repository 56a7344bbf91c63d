package broker

import (
	"io"
	"net"
	"syscall"
)

// writeNow never writes directly on Windows: named pipe connections are
// written by the writer goroutine only.
func writeNow(syscall.RawConn, []byte) int { return 0 }

func newConnReader(nc net.Conn, _ syscall.RawConn) io.Reader { return nc }
