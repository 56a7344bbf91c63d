//go:build linux

package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// A paused worker's lease does not run down: the janitor leaves it however
// long it stays paused, and resume moves its deadline on by the time it
// was paused; once that has run out too, the janitor stops it as usual.
func TestPausedWorkerOutlivesItsLease(t *testing.T) {
	t.Parallel()
	c := newClock()
	w := newWorld(t, withClock(c))
	wk := w.spawn("w1", "sleep", "300")
	require.False(t, wk.LeaseDeadline.IsZero(), "an agent manager's worker has an idle lease")
	deadline := wk.LeaseDeadline

	paused, err := w.f.Pause(ctx, "w1")
	require.NoError(t, err)
	require.True(t, paused.Paused())
	requireFrozen(t, w, paused, true)
	again, err := w.f.Pause(ctx, "w1")
	require.NoError(t, err, "pausing a paused worker changes nothing")
	requireSameTime(t, paused.FrozenAt, again.FrozenAt)

	c.Advance(3 * time.Hour) // past the lease and its grace
	rep, err := w.f.Cleanup(ctx, fleet.CleanupOptions{Execute: true})
	require.NoError(t, err)
	for _, a := range rep.Actions {
		require.NotEqual(t, "w1", a.ID, "the janitor leaves a paused worker: %+v", a)
	}
	st, err := w.f.Status(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, fleet.StateRunning, st.Worker.State)
	require.True(t, st.Worker.Paused())
	require.True(t, st.Unit.Running())

	resumed, err := w.f.Resume(ctx, "w1")
	require.NoError(t, err)
	require.False(t, resumed.Paused())
	requireFrozen(t, w, resumed, false)
	requireSameTime(t, deadline.Add(3*time.Hour), resumed.LeaseDeadline, "the deadline moved on by the paused time")
	again, err = w.f.Resume(ctx, "w1")
	require.NoError(t, err, "resuming a running worker changes nothing")
	require.False(t, again.Paused())
	requireSameTime(t, resumed.LeaseDeadline, again.LeaseDeadline, "a second resume moves no deadline")

	c.Advance(3 * time.Hour)
	rep, err = w.f.Cleanup(ctx, fleet.CleanupOptions{Execute: true})
	require.NoError(t, err)
	require.Len(t, rep.Actions, 1, "%+v", rep.Actions)
	require.Equal(t, "stop", rep.Actions[0].Kind)
	require.True(t, rep.Actions[0].Done, rep.Actions[0].Error)
}

// A paused worker stops: it is thawed first, and its cgroup is proven
// empty as for any stop. Pause and resume are the manager's alone.
func TestPausedWorkerStops(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	wk := w.spawn("w1", "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done")
	_, err := w.f.Pause(ctx, "w1")
	require.NoError(t, err)
	other := w.fleet("someone-else")
	_, err = other.Pause(ctx, "w1")
	require.ErrorIs(t, err, fleet.ErrNotOwner)
	_, err = other.Resume(ctx, "w1")
	require.ErrorIs(t, err, fleet.ErrNotOwner)

	res, err := w.f.Stop(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.False(t, res.Worker.Paused())
	require.Empty(t, res.Survivors)
	require.Empty(t, res.Killed)
	require.True(t, res.Worker.HasExit)
	require.Equal(t, "exited", res.Worker.ExitCode, "thawed, its trap ran on SIGTERM (a frozen one would have been SIGKILLed)")
	require.Equal(t, 0, res.Worker.ExitStatus)
	unitstest.RequireOnlyExitRecord(t, wk.ControlGroup)

	_, err = w.f.Pause(ctx, "w1")
	require.ErrorIs(t, err, fleet.ErrEnded)
	_, err = w.f.Pause(ctx, "nobody")
	require.ErrorIs(t, err, fleet.ErrNotFound)
}

func cgroups(t *testing.T) *units.Cgroups {
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	return cg
}

// requireFrozen checks the kernel's word (cgroup.events) where cgroup2
// tracks the worker, else systemd's FreezerState.
func requireFrozen(t *testing.T, w *world, wk *fleet.Worker, frozen bool) {
	t.Helper()
	u, err := cgroups(t).Usage(wk.ControlGroup)
	require.NoError(t, err)
	if u.Frozen != nil {
		require.Equal(t, frozen, *u.Frozen, "cgroup.events of %s", wk.ControlGroup)
		return
	}
	st, err := w.m.Unit(ctx, wk.Unit)
	require.NoError(t, err)
	want := map[bool]string{true: "frozen", false: "running"}[frozen]
	require.Equal(t, want, st.FreezerState)
}
