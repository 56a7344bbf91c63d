package intercom

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// A temporary file a process killed mid-write left beside an outbox goes
// when the outbox is opened next; one of a live process stays.
func TestOpeningRemovesStaleTemps(t *testing.T) {
	p := NewPaths(t.TempDir())
	path := p.Outbox("s1")
	require.NoError(t, EnsureDir(filepath.Dir(path)))
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	stale := path + "." + strconv.Itoa(dead.Process.Pid) + ".00ff00ff00ff00ff.tmp"
	live := path + "." + strconv.Itoa(os.Getpid()) + ".00ff00ff00ff00ff.tmp"
	for _, f := range []string{stale, live} {
		require.NoError(t, os.WriteFile(f, []byte("{"), FileMode))
	}
	_, err := OpenOutbox(p, "s1")
	require.NoError(t, err)
	require.NoFileExists(t, stale)
	require.FileExists(t, live)
}
