package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A unit's keep list names the strip list's variables the unit sets itself:
// its identity and --env entries, nothing else (the shim's half is
// fleet/shim's TestInheritedStripped).
func TestShimKeep(t *testing.T) {
	unit := []string{"PATH=/bin", EnvWorkerID + "=w1", EnvSessionID + "=w1", "MY_INTERCOM_TOKEN=x"}
	unit = append(unit, EnvShimKeep+"="+shimKeep(unit))
	require.Equal(t, EnvShimKeep+"="+EnvWorkerID+","+EnvSessionID+",MY_INTERCOM_TOKEN", unit[len(unit)-1])
}
