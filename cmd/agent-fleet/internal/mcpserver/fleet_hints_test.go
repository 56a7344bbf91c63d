package mcpserver

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// The CLI commands fleet errors suggest reach an agent as the agent_fleet
// calls that do the same.
func TestToolHints(t *testing.T) {
	for err, want := range map[error]string{
		&fleet.OwnerError{ID: "wa", Owner: "m1", Caller: "m2", Op: "stop"}:                             `stop wa: it belongs to manager "m1", not "m2"; adopt it first (agent_fleet {action: "adopt", id: "wa"})`,
		&fleet.EndedError{ID: "x2", State: fleet.StateExited, Op: "pause"}:                             `x2 has exited; nothing to pause (forget it with agent_fleet {action: "forget", id: "x2", acknowledge: true})`,
		&fleet.EndedError{ID: "x2", State: fleet.StateStopped, Op: "adopt", Owner: "m1", Caller: "m2"}: `x2 was stopped; nothing to adopt (its record is manager "m1"'s to forget; the janitor prunes it a week after its end, and agent_fleet {action: "prune", all: true, acknowledge: true} deletes every manager's ended records now)`,
	} {
		require.Equal(t, want, toolHints(err.Error()))
	}
	require.Equal(t, `ask it, or adopt with force: true`, toolHints(`ask it, or adopt with --force`))
	for cli, tool := range map[string]string{
		"forget deletes history: confirm with --acknowledge (agent_fleet: acknowledge: true)":                                                "forget deletes history: confirm with acknowledge: true",
		"forget w1: deleting records needs --acknowledge":                                                                                    "forget w1: deleting records needs acknowledge: true",
		"--memory needs the memory controller, which it lacks: x (agent-fleet doctor shows its controllers)":                                 `memory needs the memory controller, which it lacks: x (agent_fleet {action: "doctor"} shows its controllers)`,
		"claude is not installed (not on your PATH); or name its executable after -- (agent-fleet spawn --kind claude … -- /path/to/claude)": `claude is not installed (not on your PATH); or name its executable in command (agent_fleet {action: "spawn", kind: "claude", command: ["/path/to/claude"], …})`,
		`you and "w1" share teams a, b; say which this message is for (--team, or team in the tool)`:                                         `you and "w1" share teams a, b; say which this message is for (pass team)`,
		"session s1 was started in team a's scope, so it cannot leave it; end it, then leave (agent-fleet teams leave a)":                    "session s1 was started in team a's scope, so it cannot leave it; only the CLI can make it leave once the session has ended (agent-fleet teams leave a)",
	} {
		require.Equal(t, tool, toolHints(cli))
	}
}
