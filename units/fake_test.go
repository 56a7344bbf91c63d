package units_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

func TestFakeFaults(t *testing.T) {
	f := units.NewFake(units.FakeOptions{})
	spec := units.ServiceSpec{Name: "agent-fleet-worker-w1-r1.service", Argv: []string{"/bin/sleep", "300"}}

	f.SetWedged(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	began := time.Now()
	_, err := f.StartService(ctx, spec)
	cancel()
	require.ErrorIs(t, err, units.ErrTimeout, "a wedged fake times out like a stopped manager")
	require.Less(t, time.Since(began), time.Second)
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

// TestNoUserBus: without a bus address Connect and Probe fail at once with
// ErrNoUserBus and say how to fix it; nothing runs dbus-launch.
func TestNoUserBus(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // a dbus-launch could not even be found
	noEnv := func(string) string { return "" }
	_, err := units.Connect(context.Background(), units.Options{Getenv: noEnv})
	if errors.Is(err, units.ErrUnsupported) {
		t.Skip("not Linux")
	}
	require.ErrorIs(t, err, units.ErrNoUserBus)
	require.Contains(t, err.Error(), "XDG_RUNTIME_DIR")
	require.Contains(t, err.Error(), "never starts a bus with dbus-launch")
	_, err = units.Probe(context.Background(), units.Options{Getenv: noEnv})
	require.ErrorIs(t, err, units.ErrNoUserBus)
}
