//go:build !windows

package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// Where a user manager is reachable, the broker a client starts runs as
// its own transient unit, not in the caller's cgroup (docs/architecture.md "Broker
// placement"), and is collected once it exits.
func TestAutoStartedBrokerRunsInItsOwnUnit(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	m := unitstest.Connect(t, inst)
	dir := shortDir(t)
	unit := factory.BrokerUnitName(dir)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.StopUnit(ctx, unit)
		_ = m.ResetFailed(ctx, unit)
	})
	cmd := as(t, dir, "placed", "intercom", "list")
	cmd.Env = append(cmd.Env, inst.Env()...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	pid := brokerPID(t, dir)
	ctx := context.Background()
	st, err := m.Unit(ctx, unit)
	require.NoError(t, err)
	require.True(t, st.Running(), "broker unit %s: %+v", unit, st)
	require.EqualValues(t, pid, st.MainPID)
	cg, err := units.OpenCgroups("/")
	require.NoError(t, err)
	mem, err := cg.Membership(pid)
	require.NoError(t, err)
	require.Equal(t, unit, mem.Unit, "the broker lives in its own unit")
	self, err := cg.Membership(os.Getpid())
	require.NoError(t, err)
	require.NotEqual(t, self.Unit, mem.Unit)

	// Idle exit ends the unit, which is collected.
	require.Eventually(t, func() bool {
		st, err := m.Unit(ctx, unit)
		return err == nil && st.Gone()
	}, 15*time.Second, 50*time.Millisecond)
	_, err = os.Stat(filepath.Join(dir, "intercom", "broker.sock"))
	require.True(t, os.IsNotExist(err))
	log, _ := os.ReadFile(intercom.NewPaths(dir).BrokerLog())
	require.Contains(t, string(log), "Intercom broker started")
}
