//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// openPTY is a new pseudo-terminal: its master, and its slave for a child
// process's stream (closed when the test ends).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0), "unlockpt")
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(t, err, "ptsname")
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// onTerminal runs cmd with its stderr on a fresh pty (stdout to stdout)
// and returns what the terminal showed and how cmd ended.
func onTerminal(t *testing.T, cmd *exec.Cmd, stdout io.Writer) (string, error) {
	t.Helper()
	master, slave := openPTY(t)
	cmd.Stdout, cmd.Stderr = stdout, slave
	require.NoError(t, cmd.Start())
	slave.Close()
	shown := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, master) // until the last writer closes (EIO)
		shown <- b.String()
	}()
	err := cmd.Wait()
	master.SetReadDeadline(time.Now().Add(5 * time.Second))
	return <-shown, err
}

// A stop of two workers that ignore SIGTERM, with stderr on a terminal:
// both are stopped at once, each signal is shown as it is sent, and the
// grace is --timeout's.
func TestStopShowsItsSignalsOnATerminal(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	ids := []string{"tty-a", "tty-b"}
	for _, id := range ids {
		trapped := filepath.Join(dir, id+".trapped") // the trap is set: SIGTERM is ignored from here
		out, err := fleetAs(t, dir, "agent-tty", nil, "spawn", "--id", id, "--",
			"sh", "-c", `trap "" TERM; : > "$0"; while :; do sleep 1; done`, trapped).CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Cleanup(func() { _ = fleetAs(t, dir, "agent-tty", nil, "stop", id, "--kill").Run() })
		require.Eventually(t, func() bool { _, err := os.Stat(trapped); return err == nil }, 30*time.Second, 10*time.Millisecond)
	}

	var stdout bytes.Buffer
	text, err := onTerminal(t, fleetAs(t, dir, "agent-tty", nil, "stop", "tty-a", "tty-b", "--timeout", "2s"), &stdout)
	require.NoError(t, err, "stdout:\n%s\nterminal:\n%s", stdout.String(), text)
	for _, id := range ids {
		require.Contains(t, text, id+": SIGTERM sent; SIGKILL in 2 s")
		require.Contains(t, text, id+": still running 2 s after SIGTERM; SIGKILL sent")
		require.Contains(t, stdout.String(), "Stopped "+id+"; nothing of it is left in its cgroup.")
		require.NotContains(t, stdout.String(), "SIGTERM", "progress goes to the terminal on stderr, not stdout")

		out, err := fleetAs(t, dir, "agent-tty", nil, "status", id, "--json").Output()
		require.NoError(t, err, "%s", out)
		var st output.Status
		require.NoError(t, json.Unmarshal(out, &st), "%s", out)
		require.Equal(t, "stopped", st.Worker.State)
		require.Equal(t, "killed", st.Worker.ExitKind, "the SIGKILL ended it")
		require.Equal(t, 9, *st.Worker.ExitStatus)
		require.Zero(t, st.ProcessCount)
	}
}

// logs of a worker that wrote nothing prints nothing on stdout, as tail
// does; with stderr on a terminal, a person is told that the log is empty,
// and a pipe gets no note.
func TestEmptyLogIsNotedOnATerminal(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	out, err := fleetAs(t, dir, "agent-tty", nil, "spawn", "--id", "tty-quiet", "--", "sleep", "300").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = fleetAs(t, dir, "agent-tty", nil, "stop", "tty-quiet", "--kill").Run() })

	var stdout bytes.Buffer
	text, err := onTerminal(t, fleetAs(t, dir, "agent-tty", nil, "logs", "tty-quiet"), &stdout)
	require.NoError(t, err, "stdout:\n%s\nterminal:\n%s", stdout.String(), text)
	require.Empty(t, stdout.String())
	require.Equal(t, "agent-fleet: the log of tty-quiet is empty\r\n", text)

	cmd := fleetAs(t, dir, "agent-tty", nil, "logs", "tty-quiet")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run())
	require.Empty(t, stdout.String())
	require.Empty(t, stderr.String(), "no note for a pipe")
}
