package output

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// Counts are worded for their number: "1 turn", "2 turns".
func TestTurnCountsArePlural(t *testing.T) {
	for turns, want := range map[int]string{1: "; 1 turn, 0 failed\n", 2: "; 2 turns, 1 failed\n"} {
		var b strings.Builder
		writeTurns(&b, &fleet.Worker{ID: "w"}, &harness.TurnState{Kind: "claude", Turns: turns, Failures: turns - 1})
		require.Contains(t, b.String(), "  harness:  claude, no conversation yet"+want)
	}
}
