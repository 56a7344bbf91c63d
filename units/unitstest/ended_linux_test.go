package unitstest

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A live process has not ended; one that exited has, while a zombie and
// once reaped.
func TestProcessEnded(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	ended, state, err := processEnded(pid)
	require.NoError(t, err)
	require.False(t, ended, "state %s", state)

	require.NoError(t, cmd.Process.Kill())
	require.Eventually(t, func() bool {
		ended, state, err = processEnded(pid)
		return err == nil && ended
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "Z", state, "not reaped yet: a zombie")
	_ = cmd.Wait()
	ended, state, err = processEnded(pid)
	require.NoError(t, err)
	require.True(t, ended)
	require.Empty(t, state, "reaped: gone")
}
