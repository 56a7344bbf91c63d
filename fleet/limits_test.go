package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/units"
)

func TestParseLimits(t *testing.T) {
	for in, want := range map[string]uint64{
		"64M": 64 << 20, "64MiB": 64 << 20, "64MB": 64 << 20, "1.5G": 3 << 29, "2g": 2 << 30, "8388608": 8 << 20, " 1T ": 1 << 40, "4096K": 4 << 20,
	} {
		got, err := ParseMemoryLimit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "M", "abc", "-64M", "0", "1K", "3M", "64X", "NaN", "Inf", "1e30T"} {
		_, err := ParseMemoryLimit(in)
		require.ErrorIs(t, err, ErrInvalidLimit, in)
		require.Contains(t, err.Error(), "memory", in)
	}
	for in, want := range map[string]uint32{"50%": 50, "50": 50, "200%": 200, " 1 % ": 1, "10000": 10000} {
		got, err := ParseCPUQuota(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0", "0%", "1.5", "10001%", "-5", "half"} {
		_, err := ParseCPUQuota(in)
		require.ErrorIs(t, err, ErrInvalidLimit, in)
	}
	n, err := ParseTasksLimit("256")
	require.NoError(t, err)
	require.Equal(t, uint64(256), n)
	for _, in := range []string{"", "0", "-1", "ten", "19", "2.5"} {
		_, err := ParseTasksLimit(in)
		require.ErrorIs(t, err, ErrInvalidLimit, in)
	}
}

// A unit the OOM killer ended says so in its record and its end's words.
func TestOOMKillIsTheEndReason(t *testing.T) {
	r := &Worker{State: StateFailed, ReadyAt: time.Now()}
	applyExitRecord(r, units.ExitRecord{Result: "oom-kill", Code: "killed", Status: "KILL"})
	require.Equal(t, ReasonOOMKilled, r.StateReason)
	require.Equal(t, 9, r.ExitStatus)
	require.Contains(t, exitReason(r), "OOM killer")
	applyExitRecord(r, units.ExitRecord{Result: "signal", Code: "killed", Status: "KILL"})
	require.Equal(t, ReasonOOMKilled, r.StateReason, "a later record does not take it back")
}

func TestResumeMovesTheLeaseOn(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_000)
	r := &Worker{State: StateRunning, LeaseDeadline: at.Add(time.Hour), GraceDeadline: at.Add(2 * time.Hour), FrozenAt: at}
	resumed(r, at.Add(90*time.Minute))
	require.True(t, r.FrozenAt.IsZero())
	require.Equal(t, at.Add(150*time.Minute), r.LeaseDeadline)
	require.Equal(t, at.Add(210*time.Minute), r.GraceDeadline)
	none := &Worker{State: StateRunning, FrozenAt: at}
	resumed(none, at.Add(time.Hour))
	require.True(t, none.LeaseDeadline.IsZero(), "no lease stays no lease")
}
