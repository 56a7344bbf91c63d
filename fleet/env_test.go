package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The shim removes the strip list's variables its unit did not set: the
// user manager's, whatever their values; its own identity, --env entries
// and systemd's service variables stay.
func TestInheritedStripped(t *testing.T) {
	unit := []string{"PATH=/bin", EnvWorkerID + "=w1", EnvSessionID + "=w1", "MY_INTERCOM_TOKEN=x"}
	unit = append(unit, EnvShimKeep+"="+shimKeep(unit))
	require.Equal(t, EnvShimKeep+"="+EnvWorkerID+","+EnvSessionID+",MY_INTERCOM_TOKEN", unit[len(unit)-1])

	inherited := append(unit, EnvRole+"=leaked", "CODEX_INTERCOM_SESSION_ID=leaked", "TMUXDECK_TEAM=leaked",
		"HARMLESS=kept", "NOTIFY_SOCKET=/run/notify", "MAINPID=1", "INVOCATION_ID=abc", "SYSTEMD_EXEC_PID=2")
	require.Equal(t, []string{EnvRole, "CODEX_INTERCOM_SESSION_ID", "TMUXDECK_TEAM"}, inheritedStripped(inherited))

	// Without the list (a shim not started by spawn), nothing of the strip
	// list is its own.
	require.Equal(t, []string{EnvWorkerID, EnvSessionID, "MY_INTERCOM_TOKEN"}, inheritedStripped(unit[:len(unit)-1]))
}
