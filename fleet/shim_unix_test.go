//go:build !windows

package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The command gets neither systemd's notify variables (they are the shim's)
// nor the shim's keep list.
func TestCommandEnv(t *testing.T) {
	got := commandEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/n", "MAINPID=1", EnvShimKeep + "=A", "A=1"})
	require.Equal(t, []string{"PATH=/bin", "A=1"}, got)
}
