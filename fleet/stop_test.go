//go:build linux

package fleet_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// A stop whose shim recorded its workload's end returns once the cgroup
// holds nothing of the worker's, without waiting for the exit record's
// ExecStopPost, which still runs and writes the record. The record file
// is a FIFO here: its writer blocks until the test reads it, so a stop
// that waited for the ExecStopPost would wait for its timeout and find
// it killed, and the read below would hear nothing.
func TestStopEndsBeforeTheExitRecordIsWritten(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("recorded", "sleep", "300")
	record := filepath.Join(w.p.OrchestratorDir(), "exits", wk.ID+"-"+wk.RunID+".exit")
	require.NoError(t, syscall.Mkfifo(record, 0o600))
	t.Cleanup(func() { releaseFIFO(record) })
	sleeper := processNamed(t, w, wk.ID, "sleep")

	res, err := w.f.Stop(ctx, wk.ID)
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.True(t, res.Worker.HasExit, "the shim recorded the end: %+v", res.Worker)
	require.Equal(t, "killed", res.Worker.ExitCode)
	require.Equal(t, int(syscall.SIGTERM), res.Worker.ExitStatus)
	require.Empty(t, res.Survivors)
	unitstest.RequireEnded(t, sleeper, "the workload")
	unitstest.RequireOnlyExitRecord(t, wk.ControlGroup)

	got := make(chan string, 1)
	go func() {
		fh, err := os.Open(record) // blocks until the ExecStopPost opens it
		if err != nil {
			got <- err.Error()
			return
		}
		defer fh.Close()
		data, _ := io.ReadAll(fh)
		got <- string(data)
	}()
	select {
	case data := <-got:
		require.Contains(t, data, "SERVICE_RESULT=")
		require.Contains(t, data, "INVOCATION_ID="+wk.InvocationID+"\n", "the ExecStopPost of this run wrote it")
	case <-time.After(20 * time.Second):
		t.Fatal("no ExecStopPost wrote the exit record")
	}
	requireCollected(t, w.m, wk) // once its ExecStopPost ended
}

// A process of the worker's that ignores SIGTERM keeps the cgroup from
// being proven empty at the shim's exit: the stop waits for the unit,
// SIGKILLs at the grace and proves the cgroup empty then.
func TestStopKillsWhatOutlivesTheShim(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("stubborn", "sh", "-c", `(trap "" TERM; exec sleep 301) & exec sleep 300`)
	stubborn := processNamed(t, w, wk.ID, "sleep", "301")
	var steps []string
	res, err := w.f.StopWith(ctx, wk.ID, fleet.StopOptions{Grace: time.Second, Progress: func(s fleet.StopStep) {
		steps = append(steps, fmt.Sprintf("%s %s", s.Signal, s.Grace))
	}})
	require.NoError(t, err)
	require.Equal(t, []string{"SIGTERM 1s", "SIGKILL 1s"}, steps)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.Zero(t, res.Control, "proven once the unit was inactive")
	unitstest.RequireEnded(t, stubborn)
	cg, err := units.OpenCgroups("/")
	require.NoError(t, err)
	left, err := cg.Procs(wk.ControlGroup)
	require.NoError(t, err)
	require.Empty(t, left)
}

// A worker that ended left a process that ignores SIGTERM in its unit
// (systemd's own stop of the unit waits for the unit's stop timeout): a
// stop of the ended worker SIGKILLs it once the grace has passed since
// the end, proves the cgroup empty, and keeps the record's end.
func TestStopOfAnEndedWorkerEndsWhatItLeft(t *testing.T) {
	w := newWorld(t, func(c *fleet.Config) { c.StopTimeout = 2 * time.Minute })
	wk := w.spawn("leaver", "sh", "-c", `(trap "" TERM HUP; exec sleep 303) </dev/null >/dev/null 2>&1 & sleep 1`)
	left := processNamed(t, w, wk.ID, "sleep", "303")
	require.Eventually(t, func() bool {
		r, err := w.reg.Get(ctx, "leaver")
		return err == nil && r.State.Terminal()
	}, time.Minute, 20*time.Millisecond, "the worker's command ended")
	var steps []string
	res, err := w.f.StopWith(ctx, "leaver", fleet.StopOptions{Grace: 500 * time.Millisecond, Progress: func(s fleet.StopStep) {
		steps = append(steps, s.Signal)
	}})
	require.NoError(t, err)
	require.True(t, res.AlreadyEnded)
	require.Equal(t, fleet.StateExited, res.Worker.State, "the record keeps how the worker ended")
	require.Equal(t, []string{"SIGTERM", "SIGKILL"}, steps)
	require.Contains(t, res.Killed, left)
	unitstest.RequireEnded(t, left)
	cg, err := units.OpenCgroups("/")
	require.NoError(t, err)
	procs, err := cg.Procs(wk.ControlGroup)
	require.NoError(t, err)
	if len(procs) == 1 { // the exit record's ExecStopPost, systemd's own
		control, err := w.m.ControlPID(ctx, wk.Unit)
		require.NoError(t, err)
		require.Equal(t, control, procs[0])
	} else {
		require.Empty(t, procs)
	}
}

// A shim killed outside a stop records nothing: the exit record its unit's
// ExecStopPost wrote says how it ended.
func TestAShimKilledUnseenLeavesItsEnd(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("killed", "sleep", "300")
	require.NoError(t, syscall.Kill(wk.MainPID, syscall.SIGKILL)) // the shim this test's fleet started
	requireCollected(t, w.m, wk)
	ws, err := w.f.List(ctx, false)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.True(t, ws[0].HasExit, "%+v", ws[0])
	require.Equal(t, "killed", ws[0].ExitCode)
	require.Equal(t, int(syscall.SIGKILL), ws[0].ExitStatus)
}

// processNamed waits for the worker's process running name (with the
// given arguments) and returns its pid.
func processNamed(t *testing.T, w *world, id, name string, args ...string) int {
	t.Helper()
	want := "\x00" + strings.Join(args, "\x00")
	pid := 0
	require.Eventually(t, func() bool {
		st, err := w.f.Status(ctx, id)
		if err != nil {
			return false
		}
		for _, p := range st.Processes {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
			argv := strings.TrimSuffix(string(cmdline), "\x00")
			if p.Name == name && (len(args) == 0 || strings.HasSuffix(argv, want)) {
				pid = p.PID
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "no %s %v in the worker", name, args)
	return pid
}

// releaseFIFO lets a writer blocked on the FIFO at path go (it opens it
// for reading without waiting) and removes it.
func releaseFIFO(path string) {
	if fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
		_ = syscall.Close(fd)
	}
	_ = os.Remove(path)
}

// stopTimeoutReads counts the user manager reads of a unit's stop timeout.
type stopTimeoutReads struct {
	units.Manager
	n atomic.Int32
}

func (r *stopTimeoutReads) StopTimeout(ctx context.Context, name string) (time.Duration, error) {
	r.n.Add(1)
	return r.Manager.StopTimeout(ctx, name)
}

// Spawn records the stop timeout it gives the unit, so that a stop's fence
// need not ask the user manager for it; a record without one (from schema
// 8, or recovered from a unit) is stopped as before, with the unit's read.
func TestStopUsesTheRecordedStopTimeout(t *testing.T) {
	reads := &stopTimeoutReads{}
	w := newWorld(t, func(c *fleet.Config) { reads.Manager, c.Units = c.Units, reads })
	wk := w.spawn("recorded", "sleep", "300")
	require.Equal(t, 3*time.Second, wk.StopTimeout)
	onUnit, err := w.m.StopTimeout(ctx, wk.Unit)
	require.NoError(t, err)
	require.Equal(t, wk.StopTimeout, onUnit, "what the unit has")
	rec, err := w.reg.Get(ctx, "recorded")
	require.NoError(t, err)
	require.Equal(t, wk.StopTimeout, rec.StopTimeout, "what the registry keeps")
	res, err := w.f.Stop(ctx, "recorded")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.Zero(t, reads.n.Load(), "the stop asked the manager for a timeout it had")

	old := w.spawn("unrecorded", "sleep", "300")
	_, err = w.reg.Update(ctx, old.ID, old.RunID, func(r *fleet.Worker) error { r.StopTimeout = 0; return nil })
	require.NoError(t, err)
	res, err = w.f.Stop(ctx, "unrecorded")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.Empty(t, res.Survivors)
	require.EqualValues(t, 1, reads.n.Load(), "read from the unit")
}

// A worker stopped while its spawn waits out the readiness grace: the
// spawn says it was stopped, not that it exited 143 (its shim's status),
// and the record keeps the command's end as the shim saw it.
func TestStopDuringTheReadinessGrace(t *testing.T) {
	w := newWorld(t, func(c *fleet.Config) { c.ReadyGrace = 30 * time.Second })
	spawned := make(chan error, 1)
	go func() {
		_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "prov", Command: []string{"sleep", "600"}})
		spawned <- err
	}()
	processNamed(t, w, "prov", "sleep", "600")
	_, err := w.f.Stop(ctx, "prov")
	require.NoError(t, err)
	select {
	case err = <-spawned:
	case <-time.After(time.Minute):
		t.Fatal("the spawn did not return")
	}
	require.ErrorContains(t, err, "stopped before it was ready")
	rec, err := w.reg.Get(ctx, "prov")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, rec.State)
	require.Equal(t, "killed", rec.ExitCode, "%+v", rec)
	require.Equal(t, int(syscall.SIGTERM), rec.ExitStatus)
}
