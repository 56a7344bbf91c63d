package units_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func start(t *testing.T, m units.Manager, spec units.ServiceSpec) units.UnitState {
	t.Helper()
	unitstest.Cleanup(t, m, spec.Name)
	st, err := m.StartService(testCtx(t, 30*time.Second), spec)
	require.NoError(t, err)
	return st
}

func testBinary(t *testing.T) string {
	exe, err := os.Executable()
	require.NoError(t, err)
	return exe
}

// pidfds opens a pidfd per pid, so their end is observed without any risk
// from pid reuse.
func pidfds(t *testing.T, pids []int) map[int]int {
	fds := map[int]int{}
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		require.NoError(t, err, "pid %d", pid)
		fds[pid] = fd
		t.Cleanup(func() { unix.Close(fd) })
	}
	return fds
}

// requireExited waits up to 5 s for every pidfd to report its process's end.
func requireExited(t *testing.T, fds map[int]int) {
	t.Helper()
	for pid, fd := range fds {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 60000)    // a hang guard only
		for errors.Is(err, unix.EINTR) { // the runtime's preemption signals
			n, err = unix.Poll(p, 60000)
		}
		require.NoError(t, err)
		require.Equal(t, 1, n, "process %d still runs", pid)
	}
}

// TestDescendantsGoneAfterStop: processes that escape with setsid, a double
// fork or nohup stay in the unit's cgroup (read from cgroup.procs, in both
// hierarchies on hybrid hosts) and are all gone after a stop.
func TestDescendantsGoneAfterStop(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	name := unitstest.UnitName("agent-fleet-descendants")
	script := `setsid sleep 301 & (sleep 302 &) ; nohup sleep 303 >/dev/null 2>&1 & exec sleep 304`
	began := time.Now()
	st := start(t, m, units.ServiceSpec{Name: name, Argv: []string{"/bin/sh", "-c", script}, StopTimeout: 5 * time.Second})
	started := time.Since(began)
	require.NotEmpty(t, st.ControlGroup)

	var procs []units.Process
	require.Eventually(t, func() bool {
		pids, err := cg.Procs(st.ControlGroup)
		require.NoError(t, err)
		procs = cg.Processes(pids)
		sleeps := 0
		for _, p := range procs {
			if p.Name == "sleep" {
				sleeps++
			}
		}
		return sleeps == 4 && len(procs) == 4
	}, 5*time.Second, 10*time.Millisecond, "expected four sleeps in %s, got %v", st.ControlGroup, procs)
	var pids []int
	for _, p := range procs {
		pids = append(pids, p.PID)
		mem, err := cg.Membership(p.PID)
		require.NoError(t, err)
		require.Equal(t, name, mem.Unit, "pid %d", p.PID)
	}
	require.Contains(t, pids, st.MainPID)
	populated, err := cg.Populated(st.ControlGroup)
	require.NoError(t, err)
	require.True(t, populated)
	fds := pidfds(t, pids)

	began = time.Now()
	require.NoError(t, m.StopUnit(testCtx(t, 30*time.Second), name))
	stopped := time.Since(began)
	requireExited(t, fds)
	left, err := cg.Procs(st.ControlGroup)
	require.NoError(t, err)
	require.Empty(t, left)
	populated, err = cg.Populated(st.ControlGroup)
	require.NoError(t, err)
	require.False(t, populated)
	t.Logf("start %s, stop with 4 processes %s", started.Round(time.Millisecond), stopped.Round(time.Millisecond))
}

// TestCgroupKill kills a live unit's whole cgroup from the file system:
// once with cgroup.kill (where the kernel has it), once pid by pid as on a
// legacy host.
func TestCgroupKill(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	legacy := *cg
	legacy.Unified, legacy.Layout = "", units.LayoutLegacy

	for _, view := range []*units.Cgroups{cg, &legacy} {
		t.Run(string(view.Layout), func(t *testing.T) {
			if view.Named == "" && view.Unified == "" {
				t.Skip("no such hierarchy here")
			}
			name := unitstest.UnitName("agent-fleet-cgkill")
			script := `trap "" TERM; setsid sh -c 'trap "" TERM; exec sleep 305' & (sleep 306 &); exec sleep 307`
			st := start(t, m, units.ServiceSpec{Name: name, Argv: []string{"/bin/sh", "-c", script}, Collect: units.CollectInactive})
			var pids []int
			// Generous hang guards: the three processes start, and die, at
			// the pace of a busy machine.
			require.Eventually(t, func() bool {
				pids, err = view.Procs(st.ControlGroup)
				return err == nil && len(pids) == 3
			}, 60*time.Second, 10*time.Millisecond)
			fds := pidfds(t, pids)
			rep, err := view.Kill(testCtx(t, 60*time.Second), st.ControlGroup)
			require.NoError(t, err)
			requireExited(t, fds)
			require.Empty(t, rep.Survivors)
			if view.KillFile(st.ControlGroup) != "" || view == cg && cg.HasKill() {
				require.True(t, rep.UsedKillFile)
			} else {
				require.False(t, rep.UsedKillFile)
				require.ElementsMatch(t, pids, rep.Signalled)
			}
			final := unitstest.WaitUnit(t, m, name, func(s units.UnitState) bool { return s.ActiveState == "failed" })
			require.Equal(t, "signal", final.Result)
			require.Equal(t, int(syscall.SIGKILL), final.ExecMainStatus)
			t.Logf("%s: killed %d processes in %s (cgroup.kill %v)", view.Layout, len(pids), rep.Elapsed, rep.UsedKillFile)
		})
	}
}

// TestWaitExit: WaitExit returns once a unit's main process has ended,
// at once for a pid that is gone or lives in another cgroup, and with
// ctx's error while the process runs on.
func TestWaitExit(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	name := unitstest.UnitName("agent-fleet-waitexit")
	st := start(t, m, units.ServiceSpec{Name: name, Argv: []string{"/bin/sleep", "300"}, Collect: units.CollectInactive})
	require.NotZero(t, st.MainPID)

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, cg.WaitExit(short, st.MainPID, st.ControlGroup), context.DeadlineExceeded, "it runs on")
	require.NoError(t, cg.WaitExit(testCtx(t, 5*time.Second), os.Getpid(), st.ControlGroup), "not a member: nothing to wait for")

	waited := make(chan error, 1)
	go func() { waited <- cg.WaitExit(testCtx(t, 30*time.Second), st.MainPID, st.ControlGroup) }()
	require.NoError(t, m.KillUnit(testCtx(t, 10*time.Second), name, syscall.SIGTERM))
	require.NoError(t, <-waited)
	require.Eventually(t, func() bool { return syscall.Kill(st.MainPID, 0) == syscall.ESRCH }, 10*time.Second, 10*time.Millisecond,
		"systemd reaps it")
	require.NoError(t, cg.WaitExit(testCtx(t, 5*time.Second), st.MainPID, st.ControlGroup), "a gone pid has exited")

	fixture := *cg
	fixture.Root = t.TempDir()
	require.ErrorIs(t, fixture.WaitExit(testCtx(t, time.Second), st.MainPID, st.ControlGroup), units.ErrUnsupported)
}

// TestNotifyService: a Type=notify start returns only after READY=1, and an
// exit before READY=1 fails the start job.
func TestNotifyService(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	exe := testBinary(t)

	name := unitstest.UnitName("agent-fleet-notify")
	began := time.Now()
	st := start(t, m, units.ServiceSpec{Name: name, Type: units.ServiceNotify, Argv: []string{exe},
		Env: []string{"AGENT_FLEET_UNITS_TEST_HELPER=notify:300"}})
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "returned before READY=1")
	require.Equal(t, "active", st.ActiveState)
	require.Equal(t, "running", st.SubState)
	require.NoError(t, m.StopUnit(testCtx(t, 10*time.Second), name))

	failed := unitstest.UnitName("agent-fleet-notify")
	record := filepath.Join(t.TempDir(), "exit")
	unitstest.Cleanup(t, m, failed)
	_, err := m.StartService(testCtx(t, 10*time.Second), units.ServiceSpec{Name: failed, Type: units.ServiceNotify, Argv: []string{exe},
		Env: []string{"AGENT_FLEET_UNITS_TEST_HELPER=exit:4"}, ExitRecord: record})
	var je *units.JobError
	require.ErrorAs(t, err, &je)
	require.Equal(t, "failed", je.Result)
	rec, err := units.ReadExitRecord(record)
	require.NoError(t, err, "ExecStopPost ran before the job finished")
	status, ok := rec.ExitStatus()
	require.True(t, ok)
	require.Equal(t, 4, status)
	require.Equal(t, "exit-code", rec.Result)
}

// TestServiceSettings: argv reaches the command verbatim ("$" unexpanded),
// environment, unset variables, working directory and the log file work;
// the runtime limit and the stop timeout are applied.
func TestServiceSettings(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "unit.log")
	name := unitstest.UnitName("agent-fleet-settings")
	script := `echo "argv:$0:$1"; echo "A=$A"; echo "LANG=${LANG-unset}"; echo "pwd=$(pwd)"; echo "to stderr" >&2`
	start(t, m, units.ServiceSpec{Name: name, Argv: []string{"/bin/sh", "-c", script, "$HOME", "${A}"},
		Env: []string{"A=x y"}, UnsetEnv: []string{"LANG"}, WorkingDirectory: dir, LogFile: log})
	unitstest.WaitUnit(t, m, name, units.UnitState.Gone)
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, "argv:$HOME:${A}\nA=x y\nLANG=unset\npwd="+dir+"\nto stderr\n", string(data))

	// RuntimeMaxSec ends a unit that runs too long, as a timeout.
	limited := unitstest.UnitName("agent-fleet-settings")
	start(t, m, units.ServiceSpec{Name: limited, Argv: []string{"/bin/sleep", "300"}, MaxRuntime: 300 * time.Millisecond,
		Collect: units.CollectInactive})
	st := unitstest.WaitUnit(t, m, limited, func(s units.UnitState) bool { return s.ActiveState == "failed" })
	require.Equal(t, "timeout", st.Result)

	// A process that ignores SIGTERM is killed after the stop timeout. The
	// marker says the trap is set: a busy machine may run the shell after
	// the stop is sent.
	stubborn := unitstest.UnitName("agent-fleet-settings")
	trapped := filepath.Join(t.TempDir(), "trapped")
	start(t, m, units.ServiceSpec{Name: stubborn, Argv: []string{"/bin/sh", "-c", `trap "" TERM; : > "$0"; sleep 300 & wait; wait`, trapped},
		StopTimeout: 300 * time.Millisecond})
	require.Eventually(t, func() bool { _, err := os.Stat(trapped); return err == nil }, 30*time.Second, 10*time.Millisecond)
	began := time.Now()
	require.NoError(t, m.StopUnit(testCtx(t, 10*time.Second), stubborn))
	took := time.Since(began)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 20*time.Second, "killed after its stop timeout, not the default 90 s")
}

// TestWedgedManager: a stopped (SIGSTOP) user manager makes calls fail
// within their deadline with a clear error instead of hanging. It uses a
// manager of its own and does not run in parallel.
func TestWedgedManager(t *testing.T) {
	inst := unitstest.OwnManager(t)
	m := unitstest.Connect(t, inst)
	require.NoError(t, m.Ping(testCtx(t, 5*time.Second)))
	name := unitstest.UnitName("agent-fleet-wedged")
	unitstest.Cleanup(t, m, name)

	require.NoError(t, syscall.Kill(inst.PID, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(inst.PID, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	const deadline = time.Second
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	_, err := m.StartService(ctx, units.ServiceSpec{Name: name, Argv: []string{"/bin/sleep", "300"}})
	cancel()
	took := time.Since(began)
	require.ErrorIs(t, err, units.ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "may be stopped or overloaded")
	require.Less(t, took, deadline+4*time.Second, "returned %s after a %s deadline (the connection default is 30 s)", took, deadline)
	t.Logf("wedged start failed after %s: %v", took.Round(time.Millisecond), err)

	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	require.ErrorIs(t, m.Ping(ctx), units.ErrTimeout)
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = units.Probe(ctx, units.Options{Bus: inst.Bus})
	cancel()
	require.ErrorIs(t, err, units.ErrTimeout, "a fresh connection sees the bus but not the manager")

	// Resumed, the manager answers again on the same connection.
	resume()
	require.Eventually(t, func() bool { return m.Ping(testCtx(t, time.Second)) == nil }, 10*time.Second, 20*time.Millisecond)
}

// TestReconnectAfterBusDrop: when the user bus goes away under a
// connection (here: dbus-daemon is killed and socket-activated again), the
// next call reconnects and succeeds (BUG-06). Own manager, not parallel.
func TestReconnectAfterBusDrop(t *testing.T) {
	inst := unitstest.OwnManager(t)
	m := unitstest.Connect(t, inst)
	ctx := testCtx(t, 20*time.Second)
	bus, err := m.Unit(ctx, "dbus.service")
	require.NoError(t, err)
	require.Positive(t, bus.MainPID)
	require.NoError(t, syscall.Kill(bus.MainPID, syscall.SIGKILL))
	unitstest.WaitUnit(t, m2(t, inst), "dbus.service", func(s units.UnitState) bool { return s.MainPID != bus.MainPID })

	require.NoError(t, m.Ping(ctx), "the dropped connection is replaced and the call retried once")
	name := unitstest.UnitName("agent-fleet-reconnect")
	st := start(t, m, units.ServiceSpec{Name: name, Argv: []string{"/bin/sleep", "300"}})
	require.Equal(t, "active", st.ActiveState)
	require.NoError(t, m.StopUnit(ctx, name))
}

// m2 is a second, independent connection (it reconnects on its own).
func m2(t *testing.T, inst unitstest.Instance) units.Manager { return unitstest.Connect(t, inst) }

// TestManagerGone: once the manager has exited, calls fail fast with
// ErrManagerUnreachable rather than waiting for their deadline.
func TestManagerGone(t *testing.T) {
	b, err := unitstest.Boot(unitstest.BootOptions{})
	if err != nil {
		unitstest.Unavailable(t, err)
	}
	t.Cleanup(func() { b.Stop() })
	m := unitstest.Connect(t, b.Instance)
	require.NoError(t, b.Stop())
	began := time.Now()
	err = m.Ping(testCtx(t, 10*time.Second))
	require.True(t, errors.Is(err, units.ErrManagerUnreachable) || errors.Is(err, units.ErrNoUserBus), "%v", err)
	require.Less(t, time.Since(began), 5*time.Second)
	require.NotContains(t, err.Error(), "dbus-launch")
	t.Logf("after the manager exited: %v", err)
}

// TestManyShortUnits: 50 units whose command exits 0 and 50 whose command
// exits 3, started concurrently on one connection, all end in a definite,
// recorded state and leave no unit behind (BUG-05; failed units never pile
// up).
func TestManyShortUnits(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	dir := t.TempDir()
	prefix := "agent-fleet-many-" + filepath.Base(dir)
	type result struct {
		name, record string
		status       int
		err          error
	}
	results := make(chan result, 100)
	began := time.Now()
	for i := range 100 {
		status := 0
		if i%2 == 1 {
			status = 3
		}
		go func() {
			name := unitstest.UnitName(prefix)
			record := filepath.Join(dir, name)
			_, err := m.StartService(testCtx(t, 30*time.Second), units.ServiceSpec{Name: name, ExitRecord: record,
				Argv: []string{"/bin/sh", "-c", "exit " + strconv.Itoa(status)}})
			results <- result{name, record, status, err}
		}()
	}
	for range 100 {
		r := <-results
		unitstest.Cleanup(t, m, r.name)
		if r.err != nil {
			var je *units.JobError
			require.ErrorAs(t, r.err, &je, "only a start job failure is acceptable")
			require.NotZero(t, r.status, "a command exiting 0 never fails its start: %v", r.err)
		}
		var rec units.ExitRecord
		require.Eventually(t, func() bool {
			var err error
			rec, err = units.ReadExitRecord(r.record)
			return err == nil
		}, 10*time.Second, 10*time.Millisecond, "no exit record for %s", r.name)
		status, ok := rec.ExitStatus()
		require.True(t, ok, "%+v", rec)
		require.Equal(t, r.status, status)
	}
	took := time.Since(began)
	require.Eventually(t, func() bool {
		left, err := m.ListUnits(testCtx(t, 5*time.Second), prefix+"-*")
		require.NoError(t, err)
		return len(left) == 0
	}, 10*time.Second, 20*time.Millisecond, "units left behind")
	t.Logf("100 short units started and ended in %s", took.Round(time.Millisecond))
}

// TestProbeSandbox: every property is probed with a real unit and says
// what was seen; NoNewPrivileges needs no namespace, so every manager
// enforces it; a second probe of the same manager reads the cache; no
// probe unit is left.
func TestProbeSandbox(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	cache := filepath.Join(t.TempDir(), "sandbox-probe.json")
	sup, err := m.ProbeSandbox(testCtx(t, 30*time.Second), units.ProbeSandboxOptions{CacheFile: cache})
	require.NoError(t, err)
	require.False(t, sup.Cached)
	require.Len(t, sup.Checks, len(units.SandboxProperties))
	for i, c := range sup.Checks {
		require.Equal(t, units.SandboxProperties[i], c.Property)
		require.NotEmpty(t, c.Detail, c.Property)
		t.Logf("%s enforced=%v: %s", c.Property, c.Enforced, c.Detail)
	}
	nnp, _ := sup.Check(units.PropNoNewPrivileges)
	require.True(t, nnp.Enforced, nnp.Detail)

	again, err := m.ProbeSandbox(testCtx(t, 30*time.Second), units.ProbeSandboxOptions{CacheFile: cache})
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.Equal(t, sup.Checks, again.Checks)
	left, err := m.ListUnits(testCtx(t, 10*time.Second), "agent-fleet-probe-*")
	require.NoError(t, err)
	require.Empty(t, left)
}
