//go:build !windows

package intercom

import (
	"errors"
	"syscall"
)

// ProcessAlive reports whether pid names a live process (kill(pid, 0) is
// not ESRCH). A process of another user counts as alive.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
