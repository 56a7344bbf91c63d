package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/bench"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// TestBenchFleet runs a small `bench fleet --json` on the shared user
// manager: every figure of every size is there, and no unit of the run is
// left.
func TestBenchFleet(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	cmd := agentFleet(t, shortDir(t), "bench", "fleet", "--sizes", "2,4", "--managers", "2", "--parallel", "2", "--samples", "2", "--json")
	cmd.Env = append(cmd.Env, inst.Env()...)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)

	var res bench.FleetResult
	require.NoError(t, json.Unmarshal(out, &res))
	require.Equal(t, []int{2, 4}, res.Sizes)
	require.Equal(t, "user", res.Manager)
	require.Equal(t, 250.0, res.ReadyGraceMs)
	require.Len(t, res.Steps, 2)
	for i, st := range res.Steps {
		require.Equal(t, res.Sizes[i], st.Workers)
		require.Equal(t, 1, st.SpawnSequential.Workers, "half of the two new workers one at a time")
		require.Equal(t, 1, st.SpawnConcurrent.Workers)
		require.Positive(t, st.SpawnSequential.PerSecond)
		require.Positive(t, st.SpawnConcurrent.PerSecond)
		for name, l := range map[string]bench.Latency{"listMine": st.ListMine, "listAll": st.ListAll, "status": st.Status,
			"unitsList": st.UnitsList, "bareStart": st.BareStart} {
			require.Positive(t, l.N, name)
			require.Positive(t, l.P50Ms, name)
			require.GreaterOrEqual(t, l.P99Ms, l.P50Ms, name)
		}
		require.Equal(t, 3, st.ListProcess.N, "a tenth of the samples, at least 3")
		require.Equal(t, 3, st.Janitor.N)
		require.Positive(t, st.RegistryBytes)
		require.Positive(t, st.ViewBytes)
		require.Equal(t, st.Workers+2, st.BrokerSessions, "the workers and the managers")
		require.Positive(t, st.Broker.RSSMiB)
		require.Positive(t, st.WorkerTasks)
	}
	require.NotNil(t, res.Growth)
	require.Contains(t, res.Growth.Exponents, "listAll")
	require.Len(t, res.Growth.PerWorkerKiB["broker"], 1)
	require.Equal(t, 4, res.Teardown.Workers)
	require.Equal(t, bench.ListAim, res.Aim.ListAllP50Ms)

	m := unitstest.Connect(t, inst)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := m.ListUnits(ctx, res.UnitPatterns...)
	require.NoError(t, err)
	require.Empty(t, left, "units left behind by the benchmark")
}
