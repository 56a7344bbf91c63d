package units_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// The user manager says which controllers it can apply, and why not
// the others: every one of memory, cpu and pids is either.
func TestManagerControllers(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	sup, err := m.Controllers(testCtx(t, 30*time.Second))
	require.NoError(t, err)
	require.NotEmpty(t, sup.Root)
	for _, ctrl := range []string{"memory", "cpu", "pids"} {
		require.True(t, sup.Has(ctrl) != (sup.Why[ctrl] != ""), "%s: available %v, why %q", ctrl, sup.Available, sup.Why[ctrl])
	}
	t.Logf("user manager %s: controllers %v; missing: %v", sup.Root, sup.Available, sup.Why)
}

// A unit is frozen through systemd where it can, else through its cgroup2
// directory (hybrid hosts), and stays active; cgroup.events says frozen
// until it is thawed.
func TestFreezeUnit(t *testing.T) {
	t.Parallel()
	m := unitstest.Manager(t)
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	if cg.Unified == "" {
		t.Skip("legacy cgroup layout: no cgroup2 freezer")
	}
	name := unitstest.UnitName("agent-fleet-freeze")
	st := start(t, m, units.ServiceSpec{Name: name, Argv: []string{"/bin/sh", "-c", "while :; do :; done"}})
	ctx := testCtx(t, 30*time.Second)
	freeze := func(frozen bool) {
		t.Helper()
		op := m.ThawUnit
		if frozen {
			op = m.FreezeUnit
		}
		err := op(ctx, name)
		if errors.Is(err, units.ErrFreezeUnsupported) {
			err = cg.SetFrozen(ctx, st.ControlGroup, frozen)
		}
		require.NoError(t, err)
		u, err := cg.Usage(st.ControlGroup)
		require.NoError(t, err)
		require.NotNil(t, u.Frozen)
		require.Equal(t, frozen, *u.Frozen)
	}
	freeze(true)
	now, err := m.Unit(ctx, name)
	require.NoError(t, err)
	require.Equal(t, "active", now.ActiveState)
	freeze(false)
	require.NoError(t, m.StopUnit(ctx, name))
}
