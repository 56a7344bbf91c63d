package units_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

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
