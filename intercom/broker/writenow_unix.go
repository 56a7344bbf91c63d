//go:build !windows

package broker

import (
	"errors"
	"syscall"
)

// writeNow writes as much of b as the socket takes without blocking and
// returns how much that was. Errors are left for the writer goroutine and
// the reader to find.
func writeNow(raw syscall.RawConn, b []byte) int {
	n := 0
	_ = raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := syscall.Write(int(fd), b[n:])
			if m > 0 {
				n += m
			}
			if err == nil && m <= 0 {
				break
			}
			if err != nil {
				if errors.Is(err, syscall.EINTR) {
					continue
				}
				break // EAGAIN: the rest is queued
			}
		}
		return true
	})
	return n
}
