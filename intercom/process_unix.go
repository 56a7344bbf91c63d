//go:build !windows

package intercom

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// ProcessAlive reports whether pid names a live process (kill(pid, 0) is
// not ESRCH). A process of another user counts as alive; a zombie — a
// process that exited and that its parent has not reaped yet (a broker
// killed under a parent that does not reap) — does not, where /proc says.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !exited(pid)
}

// exited reports whether /proc/<pid>/stat gives pid's state as zombie
// (Z) or dead (X); false where it cannot be read (no procfs).
func exited(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state == 'Z' || state == 'X'
}
