package output

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// A spawn whose main pid is unknown leaves the pid out rather than print
// "pid 0"; a known one is shown, on both surfaces.
func TestSpawnTextShowsOnlyAKnownPid(t *testing.T) {
	ended := &fleet.Worker{ID: "tw2", RunID: "0123456789ab", Unit: "u.service", State: fleet.StateExited, HasExit: true, ExitCode: "exited"}
	for _, s := range []Surface{CLI, Tool} {
		text := SpawnReport{W: ended}.Text(s)
		require.NotContains(t, text, "pid", "surface %d: %s", s, text)
		require.Contains(t, text, "unit u.service, exited (exit 0)", "surface %d", s)
		withPid := *ended
		withPid.MainPID = 4242
		require.Contains(t, SpawnReport{W: &withPid}.Text(s), "unit u.service, pid 4242, exited (exit 0)", "surface %d", s)
	}
}
