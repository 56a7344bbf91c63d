//go:build !windows

package broker

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// The broker's sockets are non-blocking, so reads and writes on them never
// wait in the kernel. They are issued as raw system calls: the runtime's
// entersyscall/exitsyscall bookkeeping (and the wake-up of its monitor
// thread it brings when the broker is idle) costs more than the call itself
// at the message rates agent sessions produce.

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	if len(b) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// writeNow writes as much of b as the socket takes without blocking and
// returns how much that was. Errors are left for the writer goroutine and
// the reader to find.
func writeNow(raw syscall.RawConn, b []byte) int {
	n := 0
	_ = raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, errno := rawWrite(fd, b[n:])
			switch {
			case errno == syscall.EINTR:
				continue
			case errno != 0 || m <= 0:
				return true // EAGAIN: the rest is queued
			}
			n += m
		}
		return true
	})
	return n
}

// connReader reads a connection through raw system calls, parking in the
// runtime's poller while nothing is there; deadlines and Close work as for
// net.Conn.Read.
type connReader struct {
	raw syscall.RawConn
}

func newConnReader(nc net.Conn, raw syscall.RawConn) io.Reader {
	if raw == nil {
		return nc
	}
	return &connReader{raw: raw}
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.raw.Read(func(fd uintptr) bool {
		for {
			n, errno = rawRead(fd, p)
			if errno != syscall.EINTR {
				return errno != syscall.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
