package unitstest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireEnded fails t unless pid is no live process: gone, or a zombie,
// which has exited and waits for its parent to reap it. A stop proves a
// cgroup empty, where an exited process is no longer listed, and may return
// before the user manager (the parent of a worker's orphans) has reaped it.
func RequireEnded(t testing.TB, pid int, msgAndArgs ...any) {
	t.Helper()
	ended, state, err := processEnded(pid)
	require.NoError(t, err)
	require.True(t, ended, append([]any{"pid %d is alive (state %c): ", pid, state}, msgAndArgs...)...)
}

// processEnded reports whether pid is gone or a zombie, and its state
// letter from /proc (0 when gone).
func processEnded(pid int) (bool, byte, error) {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true, 0, nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return true, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	// The state follows the command name in parentheses, which may itself
	// hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false, 0, fmt.Errorf("/proc/%d/stat: no state in %q", pid, stat)
	}
	state := stat[i+2]
	return state == 'Z' || state == 'X', state, nil
}
