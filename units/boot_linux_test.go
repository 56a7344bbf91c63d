package units_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

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
// watches, even when nobody calls Stop (the booting process was killed),
// whether that process ends before the reaper starts or after. Neither case
// depends on how long the boot takes.
func TestBootedManagerReaped(t *testing.T) {
	if err := units.CanBootPrivateManager(); err != nil {
		unitstest.Unavailable(t, err)
	}
	t.Run("ends after the boot", func(t *testing.T) {
		watched := startWatched(t)
		pm := bootOrSkip(t, units.BootOptions{Name: "reaptest", Watch: watched.Process.Pid})
		require.NoError(t, watched.Process.Kill())
		_ = watched.Wait()
		requireReaped(t, pm.PID, pm.StartTime, pm.RuntimeDir, pm.CgroupDirs)
	})
	t.Run("ends before the reaper starts", func(t *testing.T) {
		watched := startWatched(t)
		removes := filepath.Join(t.TempDir(), "reaper-removes")
		require.NoError(t, os.WriteFile(removes, nil, 0o600))
		var pid int
		var startTime, runtimeDir string
		var cgroupDirs []string
		_, err := units.BootBeforeReaper(testCtx(t, 60*time.Second),
			units.BootOptions{Name: "reaptest", Watch: watched.Process.Pid, ReaperRemoves: []string{removes}},
			func(pm *units.PrivateManager) {
				pid, startTime, runtimeDir = pm.PID, pm.StartTime, pm.RuntimeDir
				cgroupDirs = slices.Clone(pm.CgroupDirs)
				// Dead but not reaped: a zombie, which has no start time.
				require.NoError(t, watched.Process.Kill())
				require.NoError(t, unix.Waitid(unix.P_PID, watched.Process.Pid, nil, unix.WEXITED|unix.WNOWAIT, nil))
			})
		require.ErrorContains(t, err, "exited while the manager booted")
		require.NotZero(t, pid, "the hook ran")
		require.NoFileExists(t, removes, "the reaper itself cleaned up, at once")
		_ = watched.Wait()
		requireReaped(t, pid, startTime, runtimeDir, cgroupDirs)
	})
}

// TestBootWatchNotRunning: a watched process that is already gone (here a
// zombie) is refused before anything is booted.
func TestBootWatchNotRunning(t *testing.T) {
	if err := units.CanBootPrivateManager(); err != nil {
		t.Skip(err)
	}
	gone := exec.Command("true")
	require.NoError(t, gone.Start())
	require.NoError(t, unix.Waitid(unix.P_PID, gone.Process.Pid, nil, unix.WEXITED|unix.WNOWAIT, nil))
	defer gone.Wait()
	_, err := units.BootPrivateManager(testCtx(t, 30*time.Second), units.BootOptions{Name: "reaptest", Watch: gone.Process.Pid})
	require.ErrorContains(t, err, "is not running")
}

// startWatched starts a process for a manager to watch; the test ends it.
func startWatched(t *testing.T) *exec.Cmd {
	t.Helper()
	watched := exec.Command("sleep", "3600")
	require.NoError(t, watched.Start())
	t.Cleanup(func() { _ = watched.Process.Kill(); _ = watched.Wait() })
	return watched
}

// requireReaped waits (generously: the machine may be loaded) until the
// manager pid/startTime is gone and its runtime and cgroup directories are
// removed.
func requireReaped(t *testing.T, pid int, startTime, runtimeDir string, cgroupDirs []string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Stat(runtimeDir)
		return units.ProcessStartTime(pid) != startTime && os.IsNotExist(err)
	}, 30*time.Second, 50*time.Millisecond, "the reaper stops the manager and removes its runtime dir")
	for _, d := range cgroupDirs {
		require.Eventually(t, func() bool { _, err := os.Stat(d); return os.IsNotExist(err) }, 15*time.Second, 50*time.Millisecond)
	}
}

func TestBootOptionsName(t *testing.T) {
	if err := units.CanBootPrivateManager(); err != nil {
		t.Skip(err)
	}
	_, err := units.BootPrivateManager(context.Background(), units.BootOptions{Name: "../x"})
	require.ErrorContains(t, err, "only letters, digits and '-'")
}

// TestBootRetriesAStuckManager: a manager that makes no sockets in time
// (here one stopped with SIGSTOP as soon as it started) is ended, with its
// directories, and one fresh manager is booted in its place.
func TestBootRetriesAStuckManager(t *testing.T) {
	if err := units.CanBootPrivateManager(); err != nil {
		unitstest.Unavailable(t, err)
	}
	var stuck int
	pm, err := units.BootStuckFirst(testCtx(t, 60*time.Second), units.BootOptions{Name: "stucktest"}, time.Second, &stuck)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pm.Stop() })
	require.NotZero(t, stuck, "the first manager started")
	require.NotEqual(t, stuck, pm.PID, "a second manager was booted")
	_, err = units.Probe(testCtx(t, 5*time.Second), units.Options{Bus: pm.Bus})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(stuck), "cmdline"))
		return err != nil || !strings.Contains(string(st), "agent-fleet-stucktest-manager")
	}, 30*time.Second, 50*time.Millisecond, "the stuck manager is gone")
}

// TestBootReportsWhereTheManagerIsStuck: when every attempt stays stuck,
// the error says so, attempt by attempt, with the manager's state.
func TestBootReportsWhereTheManagerIsStuck(t *testing.T) {
	if err := units.CanBootPrivateManager(); err != nil {
		unitstest.Unavailable(t, err)
	}
	_, err := units.BootAlwaysStuck(testCtx(t, 60*time.Second), units.BootOptions{Name: "stucktest"}, 500*time.Millisecond)
	require.Error(t, err)
	t.Logf("%v", err)
	require.Contains(t, err.Error(), "2 attempts failed")
	require.Equal(t, 2, strings.Count(err.Error(), "no user bus after 500ms"), err.Error())
	require.Contains(t, err.Error(), "state T", "a stopped manager is reported as such")
}
