// Package fleettest gives tests fleet state without systemd: worker
// records written straight into a registry, as a manager's spawns would
// leave them. Only tests import it.
package fleettest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// RecordWorkers records running exec workers ids (role builder, command
// /bin/true) of manager in the registry of p, and returns the registry,
// closed when the test ends.
func RecordWorkers(t testing.TB, p intercom.Paths, manager string, ids ...string) *fleet.Registry {
	t.Helper()
	ctx := context.Background()
	reg, err := fleet.OpenRegistry(ctx, fleet.RegistryPath(p))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	for _, id := range ids {
		w := &fleet.Worker{ID: id, Kind: "exec", Role: "builder", Manager: manager, FirstManager: manager, Command: []string{"/bin/true"}}
		require.NoError(t, reg.Reserve(ctx, w))
		_, err := reg.Update(ctx, w.ID, w.RunID, func(r *fleet.Worker) error { r.State = fleet.StateRunning; return nil })
		require.NoError(t, err)
	}
	return reg
}
