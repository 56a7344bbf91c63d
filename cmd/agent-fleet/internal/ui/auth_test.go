package ui

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
)

func TestHostCheck(t *testing.T) {
	tcp := hostCheck{port: 8377}
	for host, ok := range map[string]bool{
		"127.0.0.1:8377": true, "localhost:8377": true, "[::1]:8377": true,
		"127.0.0.1:8378": false, "127.0.0.1": false, "evil.example:8377": false, "localhost.evil.example:8377": false, "": false,
	} {
		require.Equal(t, ok, tcp.ok(host), host)
	}
	other := hostCheck{port: 8377, ip: "127.0.0.2"}
	for host, ok := range map[string]bool{"127.0.0.2:8377": true, "127.0.0.1:8377": true, "127.0.0.3:8377": false} {
		require.Equal(t, ok, other.ok(host), "the loopback address it serves on: %s", host)
	}
	sock := hostCheck{socket: true}
	for host, ok := range map[string]bool{"localhost": true, "localhost:8080": true, "127.0.0.1:9": true, "evil.example": false} {
		require.Equal(t, ok, sock.ok(host), host)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:8377", "[::1]:0", "127.0.0.2:80"} {
		require.NoError(t, loopbackOnly(addr), addr)
	}
	for _, addr := range []string{"0.0.0.0:0", ":8377", "192.168.1.2:80", "example.com:80", "127.0.0.1", "127.0.0.1:99999", "127.0.0.1:http"} {
		require.Error(t, loopbackOnly(addr), addr)
	}
}

// A --socket path the kernel cannot bind is refused naming the path given,
// not the agent directory.
func TestListenSocketTooLong(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	path := filepath.Join(dir, strings.Repeat("z", 110)+".sock")
	_, err := listenSocket(path)
	var ue *factory.UsageError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, err.Error(), "give a shorter path")
	require.NotContains(t, err.Error(), "PI_CODING_AGENT_DIR")
}

// The chart stacks a paused worker as paused, after running, as list and
// status show it.
func TestChartStates(t *testing.T) {
	require.Equal(t, []string{"provisioning", "running", "paused", "stopping", "stopped", "exited", "failed", "lost"}, chartStates)
	require.Equal(t, "paused", output.ViewState(&fleet.Worker{State: fleet.StateRunning, FrozenAt: time.Now()}))
	require.Equal(t, "running", output.ViewState(&fleet.Worker{State: fleet.StateRunning}))
	require.Equal(t, "stopped", output.ViewState(&fleet.Worker{State: fleet.StateStopped, FrozenAt: time.Now()}))
}
