//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/bench"
)

// TestBenchBrokerAgainstTheFloorRelay runs contrib/bench/with-floor-relay.sh
// as the README's Performance section does: the C relay builds, serves the
// benchmark's frames, is measured as the other broker (its pid, CPU and
// memory), and is gone afterwards.
func TestBenchBrokerAgainstTheFloorRelay(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler to build contrib/bench/floor-relay.c (.ci/run installs gcc)")
	}
	script, err := filepath.Abs("../../contrib/bench/with-floor-relay.sh")
	require.NoError(t, err)
	bin := filepath.Join(binDir(t), "agent-fleet")
	cmd := exec.Command(script, `"$BIN" bench broker --against "$FLOOR_SOCKET" --against-pid "$FLOOR_PID" `+
		`--rounds 1 --json --pairs 2 --rate 100 --warmup 0s --messages 40; echo "$FLOOR_PID" >"$PID_FILE"`)
	pidFile := filepath.Join(shortDir(t), "pid")
	cmd.Env = append(os.Environ(), "BIN="+bin, "PI_CODING_AGENT_DIR="+shortDir(t), "PID_FILE="+pidFile)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	var res bench.BrokerComparison
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	require.Equal(t, "other", res.Against.Implementation)
	require.Len(t, res.Runs, 2)
	for _, r := range res.Runs {
		requireSaneMeasurement(t, r.Result, true)
		require.GreaterOrEqual(t, r.Result.Delivered, 40, r.Broker)
		require.Empty(t, r.Result.Failed, r.Broker)
	}
	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid := strings.TrimSpace(string(raw))
	require.Equal(t, pid, strconv.Itoa(res.Against.PID), "the relay's own pid is the one measured")
	_, err = os.Stat("/proc/" + pid)
	require.True(t, os.IsNotExist(err), "the script stopped its relay")
}
