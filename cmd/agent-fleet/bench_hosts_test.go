//go:build linux

package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/bench"
)

// TestBenchHostsMeasuresBothPlacements runs `bench hosts --json` as a
// process: two nodes joined through its NATS server carry the load on one
// host and across the two, every message of both placements is delivered,
// both nodes' CPU is read, and nothing of the run is left (its nodes are
// gone, its directories removed).
func TestBenchHostsMeasuresBothPlacements(t *testing.T) {
	t.Parallel()
	tmp := shortDir(t) // short: the nodes' sockets live below it
	cmd := agentFleet(t, shortDir(t), "bench", "hosts", "--json", "--pairs", "1", "--rate", "50",
		"--warmup", "200ms", "--duration", "1s", "--rounds", "1")
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var res bench.HostsResult
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.Len(t, res.Nodes, 2)
	require.Len(t, res.Runs, 2)
	placements := map[string]bool{}
	for _, r := range res.Runs {
		placements[r.Placement] = true
		requireSaneMeasurement(t, r.Result, true)
		require.Empty(t, r.Result.Failed, "%s: %v", r.Placement, r.Result.Failed)
	}
	require.Equal(t, map[string]bool{"same-host": true, "cross-host": true}, placements)
	require.NotNil(t, res.Medians["cross-host"])
	require.NotNil(t, res.CrossOverSame.P50)
	for _, n := range res.Nodes {
		require.ErrorIs(t, syscall.Kill(n.PID, 0), syscall.ESRCH, "node %s (pid %d) was stopped", n.Name, n.PID)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "afbh*"))
	require.Empty(t, left)
}

// bench hosts refuses a load over the v4 rate limit a node's broker keeps,
// naming the flag, before starting anything.
func TestBenchHostsRefusesARateOverTheLimit(t *testing.T) {
	t.Parallel()
	out, err := agentFleet(t, shortDir(t), "bench", "hosts", "--rate", "500").CombinedOutput()
	requireExit(t, err, 2)
	require.True(t, strings.Contains(string(out), "--rate"), "%s", out)
}
