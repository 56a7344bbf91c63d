package bench

import (
	"os"
	"syscall"
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

func TestCPUDelta(t *testing.T) {
	a := procUsage{CPU: 100 * time.Millisecond, Exec: 104 * time.Millisecond, threads: []int{1, 2}, exact: true, ok: true}
	b := procUsage{CPU: 150 * time.Millisecond, Exec: 147300 * time.Microsecond, threads: []int{1, 2, 3}, exact: true, ok: true}
	require.Equal(t, 43300*time.Microsecond, cpuDelta(a, b), "every thread of a is still there: schedstat")
	b.threads = []int{1, 3}
	require.Equal(t, 50*time.Millisecond, cpuDelta(a, b), "thread 2 exited, its time with it: ticks")
	b.threads, b.exact = []int{1, 2}, false
	require.Equal(t, 50*time.Millisecond, cpuDelta(a, b), "a thread could not be read: ticks")

	ns, err := parseSchedstat([]byte("454237 200876 4\n"))
	require.NoError(t, err)
	require.Equal(t, 454237*time.Nanosecond, ns)
	_, err = parseSchedstat([]byte("\n"))
	require.Error(t, err)
}

// TestReadProcUsageOfThisProcess: this process's threads' run time is read
// to the nanosecond and agrees with utime+stime to the tick.
func TestReadProcUsageOfThisProcess(t *testing.T) {
	before, err := readProcUsage(os.Getpid())
	require.NoError(t, err)
	require.True(t, before.exact, "schedstat is readable")
	require.NotEmpty(t, before.threads)
	// Spin until the kernel says this process ran 31 ms more, however long
	// that takes on a busy machine: the wall time says nothing of it.
	start := selfCPU(t)
	for selfCPU(t)-start < 31*time.Millisecond {
	}
	after, err := readProcUsage(os.Getpid())
	require.NoError(t, err)
	d := cpuDelta(before, after)
	require.GreaterOrEqual(t, d, 30*time.Millisecond, "the busy loop ran at least 30 ms of CPU")
	// Go's threads do not exit, so the same ones are read twice and the
	// two clocks agree within two ticks of utime+stime.
	require.InDelta(t, float64(after.CPU-before.CPU), float64(d), float64(2*time.Second/clockTicks)+float64(5*time.Millisecond))
}

// selfCPU is this process's CPU time from getrusage (the scheduler's
// run time, to the microsecond).
func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
