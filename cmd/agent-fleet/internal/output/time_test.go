package output

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// humanStamp is an instant in people's text: local time with its zone.
var humanStamp = `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+`

func TestSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 45 * time.Second: "45s", 3 * time.Minute: "3m", 3*time.Minute + 5*time.Second: "3m05s",
		57*time.Minute + 20*time.Second: "57m", time.Hour + 5*time.Minute: "1h05m", 51 * time.Hour: "2d03h",
	} {
		require.Equal(t, want, Span(d), d.String())
	}
}

// People's text shows local time with its zone and its distance from now;
// never an RFC 3339 stamp, never a bare time of day.
func TestHumanWhen(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 10, 0, 0, time.UTC)
	past := HumanWhen(now.Add(-3*time.Minute), now)
	require.Regexp(t, "^"+humanStamp+` \(3m ago\)$`, past)
	require.Equal(t, now.Add(-3*time.Minute).Local().Format("2006-01-02 15:04:05 MST")+" (3m ago)", past)
	require.Regexp(t, "^"+humanStamp+` \(in 57m\)$`, HumanWhen(now.Add(57*time.Minute), now))
	require.NotContains(t, past, "T12:")
}

func TestShellQuote(t *testing.T) {
	require.Equal(t, "sleep 600", ShellJoin([]string{"sleep", "600"}))
	require.Equal(t, `sh -c 'echo hi; exit 3'`, ShellJoin([]string{"sh", "-c", "echo hi; exit 3"}))
	require.Equal(t, `printf '%s\n' 'it'\''s' ''`, ShellJoin([]string{"printf", `%s\n`, "it's", ""}))
	require.Equal(t, "--env=K=V /usr/bin/x", ShellJoin([]string{"--env=K=V", "/usr/bin/x"}))
	require.Equal(t, `'$HOME' '*.go'`, ShellJoin([]string{"$HOME", "*.go"}))
}

// An ended worker's status says when it started, when it ended and how
// long it ran; a live one how long it has run; the command is quoted so it
// can be pasted back.
func TestStatusTextTimesAndCommand(t *testing.T) {
	now := time.Now()
	w := &fleet.Worker{ID: "w1", RunID: "0123456789ab", State: fleet.StateExited, HasExit: true, ExitCode: "exited", ExitStatus: 3,
		Manager: "operator-me", FirstManager: "operator-me", Command: []string{"sh", "-c", "echo hi; exit 3"}, Cwd: "/tmp",
		CreatedAt: now.Add(-5 * time.Minute), ReadyAt: now.Add(-5*time.Minute + 20*time.Millisecond), EndedAt: now.Add(-2 * time.Minute)}
	text := WorkerStatusText(&fleet.Status{Worker: w})
	require.Regexp(t, `(?m)^  started:  `+humanStamp+` \(5m ago\)$`, text)
	require.Regexp(t, `(?m)^  ended:    `+humanStamp+` \(2m ago\), ran 3m$`, text)
	require.Contains(t, text, "  command:  sh -c 'echo hi; exit 3'\n")
	require.NotRegexp(t, `\d\dT\d\d:`, text, "no RFC 3339 stamp in people's text")

	w.State, w.HasExit, w.EndedAt = fleet.StateRunning, false, time.Time{}
	w.LeaseDuration, w.LeaseDeadline = time.Hour, now.Add(57*time.Minute+20*time.Second)
	text = WorkerStatusText(&fleet.Status{Worker: w})
	require.Regexp(t, `(?m)^  running:  for 5m$`, text)
	require.Regexp(t, `(?m)^  lease:    1h00m idle lease, until `+humanStamp+` \(in 57m\)`, text)
	require.NotContains(t, text, "ended:")

	table := WorkersTable([]*fleet.Worker{w})
	require.Regexp(t, `(?m)^w1 .*running .* 5m +57m left +- +sh -c 'echo hi; exit 3'$`, table, "an exec worker has no usage")
	require.False(t, regexp.MustCompile(`\d\d:\d\d:\d\d`).MatchString(table), "no bare time of day in list:\n%s", table)
	require.True(t, strings.HasPrefix(table, "ID "))
}

// Fleet JSON has its times in RFC 3339 UTC, also a coding-agent worker's
// turns, which its shim records in its own local time.
func TestStatusJSONTimesAreUTC(t *testing.T) {
	zone := time.FixedZone("CET", 3600)
	at := time.Date(2026, 12, 1, 12, 7, 31, 0, zone)
	st := &fleet.Status{
		Worker: &fleet.Worker{ID: "w1", Kind: "claude", State: fleet.StateRunning, CreatedAt: at},
		Turns: &harness.TurnState{Kind: "claude", NextTurnAt: at,
			Current: &harness.TurnRecord{N: 2, StartedAt: at},
			Last:    &harness.TurnRecord{N: 1, StartedAt: at.Add(-time.Minute), EndedAt: at.Add(-time.Second)},
			Held:    []harness.HeldMessage{{To: "m", HeldAt: at}}},
	}
	data, err := json.Marshal(ViewStatus(st))
	require.NoError(t, err)
	require.NotContains(t, string(data), "+01:00")
	for _, want := range []string{`"createdAt":"2026-12-01T11:07:31Z"`, `"nextTurnAt":"2026-12-01T11:07:31Z"`,
		`"startedAt":"2026-12-01T11:07:31Z"`, `"endedAt":"2026-12-01T11:07:30Z"`, `"heldAt":"2026-12-01T11:07:31Z"`} {
		require.Contains(t, string(data), want)
	}
	require.Equal(t, zone, st.Turns.Current.StartedAt.Location(), "the status itself is left as it is")
}

// The janitor's reasons show their times as the rest of the text does,
// in local time with its zone; JSON keeps them in UTC.
func TestCleanupReasonsInLocalTime(t *testing.T) {
	ends := time.Date(2026, 12, 7, 15, 17, 53, 0, time.UTC)
	w := &fleet.Worker{ID: "lt", RunID: "r1"}
	rep := CleanupReport{Rep: &fleet.CleanupReport{Actions: []fleet.CleanupAction{
		fleet.TimedCleanupAction("checkpoint", w, "lease ends %s; stop at %s unless renewed", ends, ends.Add(15*time.Minute)),
		fleet.TimedCleanupAction("stop", w, "idle since %s; lease ended %s", time.Time{}, ends),
	}}}
	text := rep.Text(CLI)
	require.Contains(t, text, "lease ends "+HumanTime(ends)+"; stop at "+HumanTime(ends.Add(15*time.Minute))+" unless renewed")
	require.Contains(t, text, "idle since spawn; lease ended "+HumanTime(ends))
	require.Equal(t, "lease ends 2026-12-07T15:17:53Z; stop at 2026-12-07T15:32:53Z unless renewed", rep.Rep.Actions[0].Reason)
}

// An ask's wait is said as given: 1500 ms is 1.5 seconds, not 2.
func TestWaitText(t *testing.T) {
	for d, want := range map[time.Duration]string{500 * time.Millisecond: "500 ms", 1500 * time.Millisecond: "1.5 seconds",
		time.Second: "1 second", 45 * time.Second: "45 seconds", 90 * time.Second: "90 seconds"} {
		require.Equal(t, want, WaitText(d), "%s", d)
	}
}
