package unitstest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

// RequireEnded fails t unless pid is no live process: gone, or a zombie,
// which has exited and waits for its parent to reap it. A stop proves a
// cgroup empty, where an exited process is no longer listed, and may return
// before the user manager (the parent of a worker's orphans) has reaped it.
// msgAndArgs is testify's: a format and its arguments.
func RequireEnded(t testing.TB, pid int, msgAndArgs ...any) {
	t.Helper()
	ended, state, err := processEnded(pid)
	require.NoError(t, err)
	if !ended {
		msg := fmt.Sprintf("pid %d is alive (state %s)", pid, state)
		if len(msgAndArgs) > 0 {
			if format, ok := msgAndArgs[0].(string); ok {
				msg += ": " + fmt.Sprintf(format, msgAndArgs[1:]...)
			}
		}
		require.Fail(t, msg)
	}
}

// processEnded reports whether pid is gone or a zombie, and its state
// from /proc (units.ProcessState; "" when gone).
func processEnded(pid int) (bool, string, error) {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true, "", nil
	}
	switch state := units.ProcessState(pid); state {
	case "Z", "X":
		return true, state, nil
	case "":
		// Unreadable: gone since the kill, or not ours to read.
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return true, "", nil
		}
		return false, "", fmt.Errorf("/proc/%d/stat: unreadable", pid)
	default:
		return false, state, nil
	}
}
