//go:build linux

package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/units"
)

// countingUnits counts the calls of a fleet to its user manager whose
// number could grow with the fleet: unit reads (by unit) and listings.
type countingUnits struct {
	units.Manager
	mu    sync.Mutex
	reads map[string]int
	lists int
	// limit, when set, is the task limit the manager reports.
	limit *units.TaskLimit
}

func (c *countingUnits) Unit(ctx context.Context, name string) (units.UnitState, error) {
	c.mu.Lock()
	c.reads[name]++
	c.mu.Unlock()
	return c.Manager.Unit(ctx, name)
}

func (c *countingUnits) ListUnits(ctx context.Context, patterns ...string) ([]units.UnitSummary, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Manager.ListUnits(ctx, patterns...)
}

func (c *countingUnits) TaskLimit(context.Context) (units.TaskLimit, error) {
	if c.limit == nil {
		return units.TaskLimit{}, nil
	}
	return *c.limit, nil
}

// counted returns the reads and listings since the last call.
func (c *countingUnits) counted() (reads map[string]int, lists int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reads, lists = c.reads, c.lists
	c.reads, c.lists = map[string]int{}, 0
	return reads, lists
}

func counting(cu *countingUnits) func(*fleet.Config) {
	return func(c *fleet.Config) {
		cu.Manager, cu.reads = c.Units, map[string]int{}
		c.Units = cu
	}
}

// List and the janitor read the worker units with one listing however
// many run, and a verb's reconcile shares its listing with the list after
// it; only a worker whose unit disagrees with its record is read on its
// own, and settled.
func TestListReadsTheUnitsOnce(t *testing.T) {
	t.Parallel()
	cu := &countingUnits{}
	w := newWorld(t, counting(cu))
	var ws []*fleet.Worker
	for i := range 4 {
		ws = append(ws, w.spawn(fmt.Sprintf("n%d", i), "sleep", "300"))
	}
	// Its unit ends behind the fleet's back, its shim killed before it can
	// record the end; the unit has ended once its exit record's
	// ExecStopPost has (deactivating is still ending).
	require.NoError(t, w.m.KillUnit(ctx, ws[3].Unit, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		st, err := w.m.Unit(ctx, ws[3].Unit)
		return errors.Is(err, units.ErrUnitNotFound) || err == nil && !st.Running() && st.ActiveState != "deactivating"
	}, 10*time.Second, 20*time.Millisecond)

	cu.counted()
	listed, err := w.f.List(ctx, false)
	require.NoError(t, err)
	reads, lists := cu.counted()
	require.Equal(t, 1, lists)
	// It is read on its own unless systemd collected its unit already (the
	// listing and its exit record then say it ended); no other one is.
	for unit := range reads {
		require.Equal(t, ws[3].Unit, unit, "only the disagreeing worker is read on its own")
	}
	require.Len(t, listed, 4)
	for _, wk := range listed {
		require.Equal(t, wk.ID != "n3", wk.State.Live(), "%s is %s", wk.ID, wk.State)
	}

	_, err = w.f.List(ctx, true)
	require.NoError(t, err)
	reads, lists = cu.counted()
	require.Equal(t, 1, lists)
	require.Empty(t, reads, "the ended worker is settled for good")

	_, err = w.f.Reconcile(ctx)
	require.NoError(t, err)
	listed, err = w.f.List(ctx, false)
	require.NoError(t, err)
	reads, lists = cu.counted()
	require.Equal(t, 1, lists, "the list right after a reconcile uses its listing")
	require.Empty(t, reads)
	require.Len(t, listed, 4)

	rep, err := w.f.Cleanup(ctx, fleet.CleanupOptions{Execute: true})
	require.NoError(t, err)
	require.Empty(t, rep.Actions, "every lease is fresh")
	reads, lists = cu.counted()
	require.Equal(t, 1, lists, "the janitor lists once: its reconcile's listing settles")
	require.Empty(t, reads)
}

// A spawn that fails while the user manager is at its task limit says so
// and what to do; one that fails with room to spare does not blame it.
func TestFailedSpawnNamesTheTaskLimit(t *testing.T) {
	t.Parallel()
	cu := &countingUnits{limit: &units.TaskLimit{Where: "/user.slice/user-1000.slice", Current: 10810, Max: 10813}}
	w := newWorld(t, counting(cu))
	_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "full", Command: []string{"false"}})
	require.ErrorIs(t, err, fleet.ErrSpawnFailed)
	require.Contains(t, err.Error(), "started; it has already exited (exit 1); the user manager is at its task limit: "+
		"10810 of 10813 tasks (pids.max of /user.slice/user-1000.slice), and a worker needs about 10")

	cu.limit.Current = 4000
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "room", Command: []string{"false"}})
	require.ErrorIs(t, err, fleet.ErrSpawnFailed)
	require.NotContains(t, err.Error(), "task limit")
}
