//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// cpuUsage reads usage_usec from a cgroup's cpu.stat in the cgroup2
// hierarchy, as the kernel counts it.
func cpuUsage(t *testing.T, cgroup string) time.Duration {
	t.Helper()
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	require.NotEmpty(t, cg.Unified, "cgroup2 tracks units")
	data, err := os.ReadFile(filepath.Join(cg.Dirs(cgroup)[0], "cpu.stat"))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			require.NoError(t, err)
			return time.Duration(n) * time.Microsecond
		}
	}
	t.Fatalf("no usage_usec in %s", data)
	return 0
}

// waitCPU waits (a hang guard, not a timing assertion) until the cgroup
// has used more than beyond.
func waitCPU(t *testing.T, cgroup string, beyond time.Duration, why string) time.Duration {
	t.Helper()
	var now time.Duration
	require.Eventually(t, func() bool { now = cpuUsage(t, cgroup); return now > beyond }, 2*time.Minute, 20*time.Millisecond,
		"%s: cpu usage stayed at %s", why, now)
	return now
}

// Pause stops a busy loop's CPU use and resume restarts it, read from
// the worker's cgroup; list, status and JSON show it paused meanwhile.
// Frozen, the cgroup gets no CPU time however busy the machine is, so
// the paused reading is exact but for a margin; the running readings
// only wait for growth.
func TestPauseFreezesABusyLoop(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "busy", "--kill")
		stopBroker(t, dir)
	})
	out, err := fleetCLI(t, dir, "spawn", "--id", "busy", "--lease", "1h", "--json", "--", "sh", "-c", "while :; do :; done")
	require.NoError(t, err, "%s", out)
	var w output.Worker
	require.NoError(t, json.Unmarshal(out, &w), "%s", out)
	require.NotEmpty(t, w.ControlGroup)
	waitCPU(t, w.ControlGroup, cpuUsage(t, w.ControlGroup)+50*time.Millisecond, "the loop runs")

	out, err = fleetCLI(t, dir, "pause", "busy")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Paused busy")
	require.Contains(t, string(out), "its idle lease is held")
	frozen := cpuUsage(t, w.ControlGroup)
	time.Sleep(500 * time.Millisecond) // time a running loop would spend on the CPU
	out, err = fleetCLI(t, dir, "status", "busy", "--json")
	require.NoError(t, err, "%s", out)
	var st output.Status
	require.NoError(t, json.Unmarshal(out, &st), "%s", out)
	require.Equal(t, "paused", st.Worker.State)
	require.NotEmpty(t, st.Worker.PausedAt)
	require.NotNil(t, st.Resources)
	require.NotNil(t, st.Resources.Frozen)
	require.True(t, *st.Resources.Frozen, "cgroup.events says frozen")
	require.Equal(t, "active", st.UnitActive, "a frozen unit is still active")
	after := cpuUsage(t, w.ControlGroup)
	require.LessOrEqual(t, after-frozen, 2*time.Millisecond, "a frozen loop uses no CPU: %s then %s", frozen, after)

	out, err = fleetCLI(t, dir, "list")
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `busy\s+\S+\s+paused\s`, string(out))
	require.Contains(t, string(out), "held (paused)")
	out, err = fleetCLI(t, dir, "status", "busy")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "state:    paused")
	require.Contains(t, string(out), "its processes are frozen")

	out, err = fleetCLI(t, dir, "resume", "busy")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Resumed busy")
	waitCPU(t, w.ControlGroup, after+50*time.Millisecond, "the resumed loop runs again")
	out, err = fleetCLI(t, dir, "status", "busy", "--json")
	require.NoError(t, err, "%s", out)
	require.NoError(t, json.Unmarshal(out, &st), "%s", out)
	require.Equal(t, "running", st.Worker.State)
	require.False(t, *st.Resources.Frozen)
	out, err = fleetCLI(t, dir, "resume", "busy")
	require.NoError(t, err, "resuming a running worker changes nothing: %s", out)

	// A paused worker still stops, its cgroup proven empty.
	_, err = fleetCLI(t, dir, "pause", "busy")
	require.NoError(t, err)
	out, err = fleetCLI(t, dir, "stop", "busy")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "nothing of it is left in its cgroup")
	_, err = fleetCLI(t, dir, "pause", "busy")
	requireExit(t, err, exitConflict)
}

// A worker limited to 64 MiB that allocates more is reported OOM-killed
// where the user manager has the memory controller. Where it has not (the
// hybrid test hosts: systemd would take MemoryMax= and enforce nothing),
// spawn refuses the limit and doctor and capabilities say so.
func TestMemoryLimitEndsAWorkerThatAllocatesMore(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "hog", "--kill")
		stopBroker(t, dir)
	})
	out, err := fleetCLI(t, dir, "spawn", "--id", "hog", "--memory", "64Q", "--", "true")
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), `memory "64Q" is not a size`)

	out, err = fleetCLI(t, dir, "capabilities", "--json")
	require.NoError(t, err, "%s", out)
	var caps struct {
		ResourceLimits []string `json:"resourceLimits"`
	}
	require.NoError(t, json.Unmarshal(out, &caps), "%s", out)
	// tail keeps its whole input, one line without a newline, in memory.
	hog := []string{"spawn", "--id", "hog", "--memory", "64M", "--json", "--", "sh", "-c", "sleep 1; head -c 400m /dev/zero | tail; sleep 300"}

	if !slices.Contains(caps.ResourceLimits, "memory") {
		out, err = fleetCLI(t, dir, hog...)
		requireExit(t, err, exitUnsupported)
		require.Contains(t, string(out), "--memory needs the memory controller")
		_, err = fleetCLI(t, dir, "status", "hog")
		requireExit(t, err, exitNotFound)
		out, err = fleetCLI(t, dir, "doctor", "--json")
		require.NoError(t, err, "%s", out)
		var doc struct {
			Checks []struct{ Name, Status, Detail string } `json:"checks"`
		}
		require.NoError(t, json.Unmarshal(out, &doc), "%s", out)
		found := false
		for _, c := range doc.Checks {
			if c.Name == "resource limits" {
				found = true
				require.Equal(t, "warn", c.Status)
				require.Contains(t, c.Detail, "spawn refuses --memory")
				t.Logf("this user manager cannot apply MemoryMax=: %s", c.Detail)
			}
		}
		require.True(t, found, "doctor has a resource limits check: %s", out)
		return
	}

	out, err = fleetCLI(t, dir, hog...)
	require.NoError(t, err, "%s", out)
	var w output.Worker
	require.NoError(t, json.Unmarshal(out, &w), "%s", out)
	require.Equal(t, uint64(64<<20), w.Limits.MemoryMax)
	var st output.Status
	require.Eventually(t, func() bool {
		out, err := fleetCLI(t, dir, "status", "hog", "--json")
		return err == nil && json.Unmarshal(out, &st) == nil && st.Worker.State != "running"
	}, 2*time.Minute, 100*time.Millisecond, "the OOM killer ends it")
	require.Equal(t, "oom-killed", st.Worker.StateReason, "%+v", st.Worker)
	out, err = fleetCLI(t, dir, "list")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "OOM-killed")
}
