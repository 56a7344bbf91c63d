//go:build !windows

package shim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// The shim removes the strip list's variables its unit did not set: the
// user manager's, whatever their values; its own identity, --env entries
// and systemd's service variables stay.
func TestInheritedStripped(t *testing.T) {
	unit := []string{"PATH=/bin", fleet.EnvWorkerID + "=w1", fleet.EnvSessionID + "=w1", "MY_INTERCOM_TOKEN=x"}
	unit = append(unit, fleet.EnvShimKeep+"="+fleet.EnvWorkerID+","+fleet.EnvSessionID+",MY_INTERCOM_TOKEN") // as spawn writes it

	inherited := append(unit, fleet.EnvRole+"=leaked", "CODEX_INTERCOM_SESSION_ID=leaked", "TMUXDECK_TEAM=leaked",
		"HARMLESS=kept", "NOTIFY_SOCKET=/run/notify", "MAINPID=1", "INVOCATION_ID=abc", "SYSTEMD_EXEC_PID=2")
	require.Equal(t, []string{fleet.EnvRole, "CODEX_INTERCOM_SESSION_ID", "TMUXDECK_TEAM"}, inheritedStripped(inherited))

	// Without the list (a shim not started by spawn), nothing of the strip
	// list is its own.
	require.Equal(t, []string{fleet.EnvWorkerID, fleet.EnvSessionID, "MY_INTERCOM_TOKEN"}, inheritedStripped(unit[:len(unit)-1]))
}

// The command gets neither systemd's notify variables (they are the shim's)
// nor the shim's keep list, nor fleet's note of the spawn lease.
func TestCommandEnv(t *testing.T) {
	got := commandEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/n", "MAINPID=1", fleet.EnvShimKeep + "=A", fleet.EnvLease + "=30m0s", "A=1"})
	require.Equal(t, []string{"PATH=/bin", "A=1"}, got)
}
