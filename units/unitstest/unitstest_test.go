package unitstest_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// TestRequire: the shared manager answers, is the same on every call, and
// (when booted here) runs in its own cgroup with the boot marker gone.
func TestRequire(t *testing.T) {
	inst := unitstest.Require(t)
	t.Logf("user manager: pid %d (0: not booted by the tests), bus %s, cgroup %q", inst.PID, inst.Bus.Address, inst.Cgroup)
	require.Equal(t, inst, unitstest.Require(t))
	m := unitstest.Manager(t)
	require.NoError(t, m.Ping(t.Context()))
	if inst.PID == 0 {
		return
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(inst.PID) + "/comm")
	require.NoError(t, err)
	require.Equal(t, "systemd", strings.TrimSpace(string(comm)))
	// Other test packages may be booting managers of their own right now
	// (each keeps the marker only while it boots): it must not linger.
	require.Eventually(t, func() bool {
		_, err := os.Stat("/run/systemd/system/.agent-fleet-test-boot")
		return os.IsNotExist(err)
	}, 20*time.Second, 5*time.Millisecond, "the boot marker is removed right after boot")
	if inst.Cgroup != "" {
		cg, err := units.OpenCgroups("")
		require.NoError(t, err)
		mem, err := cg.Membership(inst.PID)
		require.NoError(t, err)
		require.True(t, units.InCgroup(mem.Path, inst.Cgroup), "manager in %s, not %s", mem.Path, inst.Cgroup)
	}
	require.Contains(t, inst.Env(), "DBUS_SESSION_BUS_ADDRESS="+inst.Bus.Address)
}
