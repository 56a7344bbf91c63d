package bench

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestKeepAwakeRunsIdlePriorityLoopsAndStopsThem: every loop is its own
// process at SCHED_IDLE while it runs, and none is left after stop.
func TestKeepAwakeRunsIdlePriorityLoopsAndStopsThem(t *testing.T) {
	loops, err := keepAwake(context.Background(), 2)
	require.NoError(t, err)
	t.Cleanup(loops.stop)
	pids := loops.pids()
	require.Len(t, pids, 2)
	for _, pid := range pids {
		attr, err := unix.SchedGetAttr(pid, 0)
		require.NoError(t, err)
		require.EqualValues(t, unix.SCHED_IDLE, attr.Policy, "pid %d", pid)
		require.NoError(t, syscall.Kill(pid, 0), "pid %d runs", pid)
	}
	loops.stop()
	for _, pid := range pids {
		require.True(t, errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), "pid %d is gone (killed and reaped)", pid)
	}
	loops.stop() // twice is harmless
}

// TestKeepAwakeStartsNothingOnACancelledContext.
func TestKeepAwakeStartsNothingOnACancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	loops, err := keepAwake(ctx, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, loops)
}
