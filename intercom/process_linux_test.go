package intercom

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A process that exited and was not reaped yet — a broker killed under a
// parent that does not reap — is not alive: it cannot hold the agent
// directory's broker.
func TestZombieIsNotAlive(t *testing.T) {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	var info unix.Siginfo
	require.NoError(t, unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil), "exited, not reaped")
	require.False(t, ProcessAlive(pid), "a zombie")
	require.NoError(t, cmd.Wait())
	require.False(t, ProcessAlive(pid), "reaped")
}
