package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/bench"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// TestBenchSpawn runs `bench spawn --workers 3 --json` on the shared user
// manager: every figure is there and positive, and no unit of the run is
// left.
func TestBenchSpawn(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	cmd := agentFleet(t, shortDir(t), "bench", "spawn", "--workers", "3", "--json")
	cmd.Env = append(cmd.Env, inst.Env()...)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)

	var raw map[string]any
	require.NoError(t, json.Unmarshal(out, &raw))
	for _, k := range []string{"workers", "command", "manager", "systemdVersion", "spawn", "stop", "bareStart", "bareStop",
		"shimStartup", "shimUnitStart", "shimUnitStop", "recordUnitStop", "stopSteps", "ratios", "target", "includes", "unitPatterns"} {
		require.Contains(t, raw, k)
	}
	var res bench.SpawnResult
	require.NoError(t, json.Unmarshal(out, &res))
	require.Equal(t, 3, res.Workers)
	require.Equal(t, "user", res.Manager)
	require.Equal(t, "86400", res.Command[1])
	for name, l := range map[string]bench.Latency{"spawn": res.Spawn, "stop": res.Stop, "bareStart": res.BareStart, "bareStop": res.BareStop,
		"shimStartup": res.ShimStartup, "shimUnitStart": res.ShimUnitStart, "shimUnitStop": res.ShimUnitStop,
		"recordUnitStop": res.RecordUnitStop, "stopSteps.end": res.StopSteps.End} {
		require.Equal(t, 3, l.N, name)
		require.Positive(t, l.P50Ms, name)
		require.GreaterOrEqual(t, l.P99Ms, l.P50Ms, name)
		require.GreaterOrEqual(t, l.MaxMs, l.P99Ms, name)
		require.LessOrEqual(t, l.MinMs, l.P50Ms, name)
	}
	require.Positive(t, res.Ratios.SpawnToBare.P50)
	require.InDelta(t, res.Spawn.P50Ms/(res.BareStart.P50Ms+res.ShimStartup.P50Ms), res.Ratios.SpawnToBarePlusStartup.P50, 1e-9)
	require.Equal(t, bench.SpawnTarget, res.Target.SpawnToBarePlusStartup)
	require.Equal(t, res.Ratios.SpawnToBarePlusStartup.P50 <= bench.SpawnTarget, res.Target.MetAtP50)
	require.InDelta(t, res.Stop.P50Ms/res.BareStop.P50Ms, res.Ratios.StopToBare.P50, 1e-9)
	require.Equal(t, bench.StopTarget, res.Target.StopToBare)
	require.Equal(t, res.Ratios.StopToBare.P50 <= bench.StopTarget, res.Target.StopMetAtP50)
	require.InDelta(t, res.ShimUnitStop.P50Ms/res.BareStop.P50Ms, res.Ratios.ShimUnitStopToBare.P50, 1e-9)
	for name, l := range map[string]bench.Latency{"fence": res.StopSteps.Fence, "proof": res.StopSteps.Proof, "record": res.StopSteps.Record} {
		require.Equal(t, 3, l.N, name)
		require.LessOrEqual(t, l.P50Ms, res.Stop.MaxMs, "a step of the stop takes no longer than a stop: %s", name)
	}
	require.Len(t, res.UnitPatterns, 2)

	m := unitstest.Connect(t, inst)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := m.ListUnits(ctx, res.UnitPatterns...)
	require.NoError(t, err)
	require.Empty(t, left, "units left behind by the benchmark")

	// The shim probes ran as this benchmark's children until its stop
	// phase: none may outlive it.
	tag := strings.TrimSuffix(strings.TrimPrefix(res.UnitPatterns[1], "agent-fleet-bench-"), "-*.service")
	require.NotEmpty(t, tag)
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	for _, f := range procs {
		argv, _ := os.ReadFile(f)
		require.NotContains(t, string(argv), "bench-"+tag+"-probe", "a shim probe outlived the benchmark: %s", f)
	}
}
