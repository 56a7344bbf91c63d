package unitstest_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

func TestFakeFaults(t *testing.T) {
	f := unitstest.NewFake(unitstest.FakeOptions{})
	spec := units.ServiceSpec{Name: "agent-fleet-worker-w1-r1.service", Argv: []string{"/bin/sleep", "300"}}

	f.SetWedged(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	began := time.Now()
	_, err := f.StartService(ctx, spec)
	cancel()
	require.ErrorIs(t, err, units.ErrTimeout, "a wedged fake times out like a stopped manager")
	require.Less(t, time.Since(began), 5*time.Second, "within its deadline, not the 30 s default")
	f.SetWedged(false)

	f.SetUnreachable(true)
	require.ErrorIs(t, f.Ping(context.Background()), units.ErrManagerUnreachable)
	f.SetUnreachable(false)

	record := filepath.Join(t.TempDir(), "exit")
	spec.ExitRecord = record
	st, err := f.StartService(context.Background(), spec)
	require.NoError(t, err)
	require.Equal(t, "/agent.slice/agent-fleet.slice/"+spec.Name, st.ControlGroup)
	require.NoError(t, f.Exit(spec.Name, 3), "tests make the main process exit when they like")
	st, err = f.Unit(context.Background(), spec.Name)
	require.NoError(t, err)
	require.True(t, st.Gone(), "collected: inactive-or-failed")
	rec, err := units.ReadExitRecord(record)
	require.NoError(t, err)
	require.Equal(t, units.ExitRecord{Result: "exit-code", Code: "exited", Status: "3", InvocationID: rec.InvocationID}, rec)
	require.ErrorIs(t, f.Exit(spec.Name, 0), units.ErrUnitNotFound)

	require.NoError(t, f.Close())
	_, err = f.Unit(context.Background(), spec.Name)
	require.ErrorIs(t, err, units.ErrManagerUnreachable)
}

// A connection to the fake acts on the fake's units; closing it ends the
// connection alone, as with a real manager.
func TestFakeConnections(t *testing.T) {
	f := unitstest.NewFake(unitstest.FakeOptions{})
	ctx := context.Background()
	a, b := f.Connect(), f.Connect()
	spec := units.ServiceSpec{Name: "agent-fleet-worker-w2-r1.service", Argv: []string{"/bin/sleep", "300"}}
	_, err := a.StartService(ctx, spec)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "safe twice")
	_, err = a.Unit(ctx, spec.Name)
	require.ErrorIs(t, err, units.ErrManagerUnreachable)
	st, err := b.Unit(ctx, spec.Name)
	require.NoError(t, err)
	require.True(t, st.Running(), "the other connection sees the unit the closed one started")
	require.NoError(t, b.StopUnit(ctx, spec.Name))
	require.NoError(t, f.Ping(ctx), "the manager itself is still there")
}
