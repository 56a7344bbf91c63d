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

// --env may set a variable the worker would get from its caller (HOME),
// or one name twice: the unit environment names each once, the --env
// value (the last one) winning.
func TestWorkerEnvOverrides(t *testing.T) {
	caller := map[string]string{"PATH": "/bin", "HOME": "/home/u", "LANG": "C"}
	env := workerEnv(func(k string) string { return caller[k] }, "/agent",
		[]string{"HOME=/tmp/w", "A=1", "B=2", "A=3"}, map[string]string{EnvWorkerID: "w1"})
	require.Equal(t, []string{"PATH=/bin", "LANG=C", EnvAgentDir + "=/agent", "HOME=/tmp/w", "B=2", "A=3", EnvWorkerID + "=w1"}, env)
}
