//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// A worker's shim, once ready, lets go of the pages of agent-fleet that
// its start-up mapped, as the broker does: a process's exit unmaps what it
// has resident, on every stop's path. An `intercom listen` that did the
// same start-up (a session and its holder) and keeps its pages is the
// measure, in the same run.
func TestWorkerShimReleasesItsStartupPages(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "lean")
		stopBroker(t, dir)
	})
	out, err := fleetCLI(t, dir, "spawn", "--id", "lean", "--json", "--", "sleep", "300")
	require.NoError(t, err, "%s", out)
	var w output.Worker
	require.NoError(t, json.Unmarshal(out, &w), "%s", out)
	require.Positive(t, w.MainPID)
	l := startListener(t, dir, "measure")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		shim, listen := rssFile(t, w.MainPID), rssFile(t, l.cmd.Process.Pid)
		assert.Less(c, shim*2, listen, "RssFile: the shim's %d kB, a listener's %d kB", shim, listen)
	}, 20*time.Second, 50*time.Millisecond)
}

// rssFile is the resident file-backed memory (RssFile, kB) of pid.
func rssFile(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no RssFile in /proc/%d/status", pid)
	return 0
}
