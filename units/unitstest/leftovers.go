package unitstest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

// RequireOnlyExitRecord fails t unless cgroup holds no process but the
// exit record's ExecStopPost: a stop ends once the cgroup holds nothing of
// the worker's, and systemd may still run, or only then start, its own
// control process there (units.Manager.ControlPID).
func RequireOnlyExitRecord(t testing.TB, cgroup string) {
	t.Helper()
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	left, err := cg.Procs(cgroup)
	require.NoError(t, err)
	for _, pid := range left {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		comm, cerr := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || cerr != nil {
			continue // it ended meanwhile
		}
		// systemd names a child "(sh)" between its fork and the exec of
		// /bin/sh; an exiting one has no arguments left.
		name := strings.TrimSpace(string(comm))
		ok := strings.Contains(string(cmdline), "agent-fleet-exit-record") ||
			name == "(sh)" || name == "sh" && len(cmdline) == 0
		require.True(t, ok, "pid %d (%s, %q) in %s is the worker's", pid, name, cmdline, cgroup)
	}
}
