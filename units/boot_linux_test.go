package units_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// bootOrSkip boots a private manager or ends the test through
// unitstest.Unavailable (a failure in CI).
func bootOrSkip(t *testing.T, opts units.BootOptions) *units.PrivateManager {
	t.Helper()
	if err := units.CanBootPrivateManager(); err != nil {
		unitstest.Unavailable(t, err)
	}
	pm, err := units.BootPrivateManager(testCtx(t, 30*time.Second), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pm.Stop() })
	return pm
}

// TestBootPrivateManager: the booted manager answers on its bus, runs in
// its own named cgroup, and Stop (twice) leaves no process, cgroup or
// runtime directory behind. Not parallel: it boots a manager.
func TestBootPrivateManager(t *testing.T) {
	pm := bootOrSkip(t, units.BootOptions{Name: "boottest"})
	require.Equal(t, []string{"DBUS_SESSION_BUS_ADDRESS=" + pm.Bus.Address, "XDG_RUNTIME_DIR=" + pm.RuntimeDir}, pm.Env())
	_, err := units.Probe(testCtx(t, 5*time.Second), units.Options{Bus: pm.Bus})
	require.NoError(t, err)
	require.NotEmpty(t, pm.StartTime)
	require.Equal(t, pm.StartTime, units.ProcessStartTime(pm.PID))
	if pm.Cgroup != "" {
		require.True(t, strings.HasPrefix(pm.Cgroup, "/agent-fleet-boottest-"), pm.Cgroup)
		cg, err := units.OpenCgroups("")
		require.NoError(t, err)
		mem, err := cg.Membership(pm.PID)
		require.NoError(t, err)
		require.True(t, units.InCgroup(mem.Path, pm.Cgroup), "manager in %s, not %s", mem.Path, pm.Cgroup)
	}
	dirs := pm.CgroupDirs
	pid := pm.PID
	require.NoError(t, pm.Stop())
	require.NoError(t, pm.Stop(), "Stop is safe twice")
	require.Empty(t, units.ProcessStartTime(pid), "the manager is gone")
	require.NoDirExists(t, pm.RuntimeDir)
	for _, d := range dirs {
		require.NoDirExists(t, d)
	}
}

// TestBootedManagerReaped: a manager never outlives the process it
// watches, even when nobody calls Stop (the booting process was killed).
func TestBootedManagerReaped(t *testing.T) {
	watched := exec.Command("sleep", "0.5")
	require.NoError(t, watched.Start())
	pm := bootOrSkip(t, units.BootOptions{Name: "reaptest", Watch: watched.Process.Pid})
	require.NoError(t, watched.Wait())
	require.Eventually(t, func() bool {
		_, err := os.Stat(pm.RuntimeDir)
		return units.ProcessStartTime(pm.PID) != pm.StartTime && os.IsNotExist(err)
	}, 10*time.Second, 50*time.Millisecond, "the reaper stops the manager and removes its runtime dir")
	for _, d := range pm.CgroupDirs {
		require.Eventually(t, func() bool { _, err := os.Stat(d); return os.IsNotExist(err) }, 5*time.Second, 50*time.Millisecond)
	}
}

func TestBootOptionsName(t *testing.T) {
	if err := units.CanBootPrivateManager(); err != nil {
		t.Skip(err)
	}
	_, err := units.BootPrivateManager(context.Background(), units.BootOptions{Name: "../x"})
	require.ErrorContains(t, err, "only letters, digits and '-'")
}
