package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses; utime 250, stime 150.
	stat := []byte("4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 7 0 12345 1000000 2000 18446744073709551615\n")
	cpu, err := parseProcStatCPU(stat)
	require.NoError(t, err)
	require.Equal(t, 4*time.Second, cpu)
	_, err = parseProcStatCPU([]byte("4242 (x) S 1 2"))
	require.Error(t, err)

	status := []byte("Name:\tagent-fleet\nVmHWM:\t   20480 kB\nVmRSS:\t   18432 kB\nThreads:\t5\n")
	require.Equal(t, int64(18432), parseProcStatusKiB(status, "VmRSS:"))
	require.Equal(t, int64(20480), parseProcStatusKiB(status, "VmHWM:"))
	require.Zero(t, parseProcStatusKiB(status, "VmSwap:"))
}
