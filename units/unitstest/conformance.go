package unitstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

// conformancePrefix starts the name of every unit the suite creates.
const conformancePrefix = "agent-fleet-conformance"

// RunConformance checks that a Manager behaves as a systemd user manager
// does, as far as the fleet relies on it: job results, state after start,
// stop, exit and kill, collection and reset of failed units, exit records,
// name clashes, unknown units and spec validation. It runs against the
// real manager and against Fake (with CommandBehavior), so the fake cannot
// drift from systemd. newManager is called once per subtest;
// the subtests run in parallel and clean up every unit they start.
func RunConformance(t *testing.T, newManager func(t *testing.T) units.Manager) {
	sleep, sh, trueCmd := lookPath(t, "sleep"), lookPath(t, "sh"), lookPath(t, "true")

	start := func(t *testing.T, m units.Manager, spec units.ServiceSpec) (units.UnitState, error) {
		t.Helper()
		Cleanup(t, m, spec.Name)
		return m.StartService(ctxFor(t), spec)
	}

	for _, typ := range []units.ServiceType{units.ServiceExec, units.ServiceSimple} {
		t.Run("StartAndStop/"+string(typ), func(t *testing.T) {
			t.Parallel()
			m, ctx := newManager(t), ctxFor(t)
			name, record := UnitName(conformancePrefix), filepath.Join(t.TempDir(), "exit")
			st, err := start(t, m, units.ServiceSpec{Name: name, Type: typ, Argv: []string{sleep, "300"},
				Description: "conformance " + name, ExitRecord: record})
			require.NoError(t, err)
			require.Equal(t, "loaded", st.LoadState)
			require.Equal(t, "active", st.ActiveState)
			require.Equal(t, "running", st.SubState)
			require.Positive(t, st.MainPID)
			require.True(t, strings.HasSuffix(st.ControlGroup, "/agent.slice/agent-fleet.slice/"+name), "ControlGroup %q", st.ControlGroup)
			require.Len(t, st.InvocationID, 32)
			require.Equal(t, "conformance "+name, st.Description)

			again, err := m.Unit(ctx, name)
			require.NoError(t, err)
			require.Equal(t, st.InvocationID, again.InvocationID)
			require.Equal(t, st.MainPID, again.MainPID)
			require.Contains(t, listed(t, m), units.UnitSummary{Name: name, Description: "conformance " + name,
				LoadState: "loaded", ActiveState: "active", SubState: "running"})

			queued := 0
			require.NoError(t, m.StopUnit(units.WithJobQueued(ctx, func() { queued++ }), name))
			require.Equal(t, 1, queued, "the stop job was queued, once")
			after, err := m.Unit(ctx, name)
			require.NoError(t, err)
			require.True(t, after.Gone(), "a stopped transient unit is collected: %+v", after)
			require.NotContains(t, names(listed(t, m)), name)
			rec := waitRecord(t, record)
			require.Equal(t, units.ExitRecord{Result: "success", Code: "killed", Status: "TERM", InvocationID: st.InvocationID}, rec)
		})
	}

	t.Run("StopTimeout", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"}, StopTimeout: 1500 * time.Millisecond})
		require.NoError(t, err)
		d, err := m.StopTimeout(ctx, name)
		require.NoError(t, err)
		require.Equal(t, 1500*time.Millisecond, d)
		d, err = m.StopTimeout(ctx, UnitName(conformancePrefix))
		require.NoError(t, err, "a unit that is not loaded has the manager's default")
		require.Positive(t, d)
	})

	// ControlPID names systemd's control process, the only process of its
	// own a unit's cgroup holds: fleet's stop proves a cgroup empty of a
	// worker's processes with it while the exit record's ExecStopPost runs.
	t.Run("ControlPID", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"}, StopPost: []string{sleep, "301"}})
		require.NoError(t, err)
		// Runs before Cleanup's stop job, which would wait out the
		// ExecStopPost's sleep if an assertion below failed first.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = m.KillUnit(ctx, name, syscall.SIGKILL)
		})
		pid, err := m.ControlPID(ctx, name)
		require.NoError(t, err)
		require.Zero(t, pid, "none while the main process runs")
		pid, err = m.ControlPID(ctx, UnitName(conformancePrefix))
		require.NoError(t, err)
		require.Zero(t, pid, "none for a unit that is not loaded")

		require.NoError(t, m.KillUnit(ctx, name, syscall.SIGTERM))
		st := waitUnit(t, m, name, func(s units.UnitState) bool { return s.SubState == "stop-post" || s.Gone() })
		pid, err = m.ControlPID(ctx, name)
		require.NoError(t, err)
		if st.Gone() {
			require.Zero(t, pid, "the fake runs no ExecStopPost: its unit ends at once")
			return
		}
		require.Positive(t, pid, "the ExecStopPost")
		// systemd names the control process at fork: under load its
		// cmdline is still systemd's until the child has exec'd.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			assert.NoError(c, err)
			assert.Equal(c, sleep+"\x00301\x00", string(cmdline), "the control process runs the ExecStopPost")
		}, 5*time.Second, 10*time.Millisecond)
		require.Zero(t, st.MainPID)
		// A stop job would wait for the ExecStopPost; a kill ends it.
		require.NoError(t, m.KillUnit(ctx, name, syscall.SIGKILL))
		waitUnit(t, m, name, units.UnitState.Gone)
		pid, err = m.ControlPID(ctx, name)
		require.NoError(t, err)
		require.Zero(t, pid, "none once the unit ended")
	})

	t.Run("LogFile", func(t *testing.T) {
		t.Parallel()
		m := newManager(t)
		log := filepath.Join(t.TempDir(), "unit.log")
		_, err := start(t, m, units.ServiceSpec{Name: UnitName(conformancePrefix), Argv: []string{sleep, "300"}, LogFile: log})
		require.NoError(t, err)
		fi, err := os.Stat(log)
		require.NoError(t, err, "the log file exists once the unit started, before it wrote anything")
		require.Zero(t, fi.Size())
	})

	t.Run("ServiceEnvironment", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"},
			Env: []string{"AGENT_INTERCOM_WORKER_ID=w1", "WITH_SPACE=a b", "DOLLAR=$HOME"}})
		require.NoError(t, err)
		env, err := m.ServiceEnvironment(ctx, name)
		require.NoError(t, err)
		require.Subset(t, env, []string{"AGENT_INTERCOM_WORKER_ID=w1", "WITH_SPACE=a b", "DOLLAR=$HOME"})
		require.NoError(t, m.StopUnit(ctx, name))
		_, err = m.ServiceEnvironment(ctx, name)
		require.ErrorIs(t, err, units.ErrUnitNotFound)
	})

	t.Run("ServiceCommand", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		before := time.Now().Add(-time.Second) // clocks in µs; systemd's may lag ours a little
		dir := t.TempDir()
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300", "1"}, WorkingDirectory: dir})
		require.NoError(t, err)
		ex, err := m.ServiceCommand(ctx, name)
		require.NoError(t, err)
		require.Equal(t, []string{sleep, "300", "1"}, ex.Argv)
		require.Equal(t, dir, ex.WorkingDirectory)
		require.True(t, ex.StartedAt.After(before), "started at %s", ex.StartedAt)
		require.False(t, ex.StartedAt.After(time.Now()), "started at %s", ex.StartedAt)
		require.NoError(t, m.StopUnit(ctx, name))
		_, err = m.ServiceCommand(ctx, name)
		require.ErrorIs(t, err, units.ErrUnitNotFound)
	})

	t.Run("Exit3KeptUntilReset", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sh, "-c", "exit 3"}, Collect: units.CollectInactive})
		requireDoneOrFailed(t, err)
		st := waitUnit(t, m, name, func(s units.UnitState) bool { return s.ActiveState == "failed" })
		require.Equal(t, "loaded", st.LoadState)
		require.Equal(t, "exit-code", st.Result)
		require.Equal(t, units.CodeExited, st.ExecMainCode)
		require.Equal(t, 3, st.ExecMainStatus)
		require.Zero(t, st.MainPID)
		require.Equal(t, "exited 3", st.ExitDescription())
		require.Contains(t, names(listed(t, m)), name)
		require.NoError(t, m.ResetFailed(ctx, name))
		st, err = m.Unit(ctx, name)
		require.NoError(t, err)
		require.True(t, st.Gone(), "reset-failed unloads it: %+v", st)
	})

	t.Run("Exit3CollectedWithRecord", func(t *testing.T) {
		t.Parallel()
		m := newManager(t)
		name, record := UnitName(conformancePrefix), filepath.Join(t.TempDir(), "exit")
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sh, "-c", "exit 3"}, ExitRecord: record})
		requireDoneOrFailed(t, err)
		waitUnit(t, m, name, units.UnitState.Gone)
		rec := waitRecord(t, record)
		require.Equal(t, "exit-code", rec.Result)
		require.Equal(t, "exited", rec.Code)
		status, ok := rec.ExitStatus()
		require.True(t, ok)
		require.Equal(t, 3, status)
		require.NotContains(t, names(listed(t, m)), name, "no failed unit piles up")
	})

	t.Run("ExitZeroCollected", func(t *testing.T) {
		t.Parallel()
		m := newManager(t)
		name, record := UnitName(conformancePrefix), filepath.Join(t.TempDir(), "exit")
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{trueCmd}, ExitRecord: record, Collect: units.CollectInactive})
		require.NoError(t, err)
		waitUnit(t, m, name, units.UnitState.Gone)
		rec := waitRecord(t, record)
		require.Equal(t, "success", rec.Result)
		require.Equal(t, "exited", rec.Code)
		require.Equal(t, "0", rec.Status)
	})

	t.Run("NameClash", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		first, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"}})
		require.NoError(t, err)
		_, err = m.StartService(ctx, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"}})
		require.ErrorIs(t, err, units.ErrUnitExists, "an active unit is never replaced")
		st, err := m.Unit(ctx, name)
		require.NoError(t, err)
		require.Equal(t, first.InvocationID, st.InvocationID)
		require.NoError(t, m.StopUnit(ctx, name))

		// A failed unit of the same name is reset by StartService.
		failed := UnitName(conformancePrefix)
		_, err = start(t, m, units.ServiceSpec{Name: failed, Argv: []string{sh, "-c", "exit 3"}, Collect: units.CollectInactive})
		requireDoneOrFailed(t, err)
		old := waitUnit(t, m, failed, func(s units.UnitState) bool { return s.ActiveState == "failed" })
		again, err := m.StartService(ctx, units.ServiceSpec{Name: failed, Argv: []string{sleep, "300"}})
		require.NoError(t, err)
		require.Equal(t, "active", again.ActiveState)
		require.NotEqual(t, old.InvocationID, again.InvocationID)
	})

	t.Run("ExecFailure", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{"/nonexistent/agent-fleet-conformance"}})
		require.ErrorIs(t, err, units.ErrJobFailed)
		var je *units.JobError
		require.True(t, errors.As(err, &je))
		require.Equal(t, "failed", je.Result)
		require.Equal(t, "start", je.Job)
		st, err := m.Unit(ctx, name)
		require.NoError(t, err)
		require.True(t, st.Gone(), "the failed unit is collected: %+v", st)
	})

	t.Run("KillUnit", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		_, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"}, Collect: units.CollectInactive})
		require.NoError(t, err)
		require.NoError(t, m.KillUnit(ctx, name, syscall.SIGKILL))
		st := waitUnit(t, m, name, func(s units.UnitState) bool { return s.ActiveState == "failed" })
		require.Equal(t, "signal", st.Result)
		require.Equal(t, units.CodeKilled, st.ExecMainCode)
		require.Equal(t, int(syscall.SIGKILL), st.ExecMainStatus)
		require.NoError(t, m.ResetFailed(ctx, name))
	})

	t.Run("UnknownUnit", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		require.ErrorIs(t, m.StopUnit(ctx, name), units.ErrUnitNotFound)
		require.ErrorIs(t, m.KillUnit(ctx, name, syscall.SIGTERM), units.ErrUnitNotFound)
		require.NoError(t, m.ResetFailed(ctx, name))
		st, err := m.Unit(ctx, name)
		require.NoError(t, err)
		require.True(t, st.Gone())
		require.Equal(t, "inactive", st.ActiveState)
	})

	t.Run("InvalidSpec", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		for _, spec := range []units.ServiceSpec{
			{Name: UnitName(conformancePrefix), Argv: []string{"sleep", "1"}},
			{Name: "no-suffix", Argv: []string{sleep, "1"}},
			{Name: UnitName(conformancePrefix)},
			{Name: UnitName(conformancePrefix), Argv: []string{sleep, "1"}, Env: []string{"NOEQUALS"}},
			{Name: UnitName(conformancePrefix), Argv: []string{sleep, "1"}, LogFile: "relative.log"},
			{Name: UnitName(conformancePrefix), Argv: []string{sleep, "1"}, Slice: "nope"},
		} {
			_, err := m.StartService(ctx, spec)
			require.ErrorIs(t, err, units.ErrInvalidSpec, "%+v", spec)
		}
	})

	// Freezing works (FreezerState says frozen, then running after the
	// thaw) or the manager says it is not supported (hybrid and legacy
	// hosts) and the unit runs on; an unknown unit is not found either way.
	t.Run("FreezeAndThaw", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		st, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"}})
		require.NoError(t, err)
		require.Equal(t, "running", st.FreezerState)
		err = m.FreezeUnit(ctx, name)
		if errors.Is(err, units.ErrFreezeUnsupported) {
			require.ErrorIs(t, m.ThawUnit(ctx, name), units.ErrFreezeUnsupported)
			st, err = m.Unit(ctx, name)
			require.NoError(t, err)
			require.Equal(t, "running", st.FreezerState)
			require.Equal(t, "active", st.ActiveState)
		} else {
			require.NoError(t, err)
			st, err = m.Unit(ctx, name)
			require.NoError(t, err)
			require.Equal(t, "frozen", st.FreezerState)
			require.Equal(t, "active", st.ActiveState, "a frozen unit is still active")
			require.NoError(t, m.ThawUnit(ctx, name))
			st, err = m.Unit(ctx, name)
			require.NoError(t, err)
			require.Equal(t, "running", st.FreezerState)
		}
		other := UnitName(conformancePrefix)
		require.ErrorIs(t, m.FreezeUnit(ctx, other), units.ErrUnitNotFound)
		require.ErrorIs(t, m.ThawUnit(ctx, other), units.ErrUnitNotFound)
	})

	// Limits are properties systemd takes (their names and D-Bus types are
	// right, or the start would fail), even where it cannot apply them.
	t.Run("Limits", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		name := UnitName(conformancePrefix)
		st, err := start(t, m, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"},
			Limits: units.Limits{MemoryMax: 64 << 20, CPUQuotaPercent: 50, TasksMax: 32}})
		require.NoError(t, err)
		require.Equal(t, "active", st.ActiveState)
		_, err = m.StartService(ctx, units.ServiceSpec{Name: UnitName(conformancePrefix), Argv: []string{sleep, "1"},
			Limits: units.Limits{CPUQuotaPercent: units.MaxCPUQuotaPercent + 1}})
		require.ErrorIs(t, err, units.ErrInvalidSpec)
	})

	t.Run("ManagerInfo", func(t *testing.T) {
		t.Parallel()
		m, ctx := newManager(t), ctxFor(t)
		require.NoError(t, m.Ping(ctx))
		v, err := m.Version(ctx)
		require.NoError(t, err)
		require.Greater(t, v.Major, 200, "version %q", v.Raw)
	})
}

// requireDoneOrFailed accepts both outcomes systemd gives a Type=exec
// command that exits non-zero at once: the start job is "done" (execve
// succeeded first) or "failed" (the exit was seen first). Either way the
// unit then fails.
func requireDoneOrFailed(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		var je *units.JobError
		require.ErrorAs(t, err, &je)
		require.Equal(t, "failed", je.Result)
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err)
	abs, err := filepath.Abs(p)
	require.NoError(t, err)
	return abs
}

// ctxFor is a context that ends with the test, bounded to 60 s.
func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func listed(t *testing.T, m units.Manager) []units.UnitSummary {
	t.Helper()
	list, err := m.ListUnits(ctxFor(t), conformancePrefix+"-*")
	require.NoError(t, err)
	return list
}

func names(list []units.UnitSummary) []string {
	var out []string
	for _, u := range list {
		out = append(out, u.Name)
	}
	return out
}

// WaitUnit polls the unit's state (every 20 ms, up to 15 s) until ok
// holds, and returns that state.
func WaitUnit(t testing.TB, m units.Manager, name string, ok func(units.UnitState) bool) units.UnitState {
	t.Helper()
	return waitUnit(t, m, name, ok)
}

func waitUnit(t testing.TB, m units.Manager, name string, ok func(units.UnitState) bool) units.UnitState {
	t.Helper()
	ctx := ctxFor(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := m.Unit(ctx, name)
		require.NoError(t, err)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("unit %s never reached the awaited state; last %+v", name, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRecord waits up to 10 s for an exit record to appear.
func waitRecord(t testing.TB, path string) units.ExitRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := units.ReadExitRecord(path)
		if err == nil {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exit record at %s: %v", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
