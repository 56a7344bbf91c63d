package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
)

// stop takes several ids or --all (one's own live workers), stops them
// and reports each; the exit status is the most serious failure's; --kill
// sends SIGKILL at once; the agent_fleet stop action takes the same.
func TestStopSeveralAllAndKill(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "operator-me")
	run := func(caller string, args ...string) (string, string, error) {
		t.Helper()
		return fakeCLI(t, e, caller, args...)
	}
	for _, id := range []string{"st-a", "st-b", "st-c", "st-d"} {
		out, _, err := run("operator-me", "spawn", "--id", id, "--", "sleep", "300")
		require.NoError(t, err, out)
	}
	out, _, err := run("operator-other", "spawn", "--id", "st-theirs", "--", "sleep", "300")
	require.NoError(t, err, out)

	// Usage mistakes, refused before anything is stopped.
	for _, args := range [][]string{{"stop"}, {"stop", "--all", "st-a"}, {"stop", "st-a", "--kill", "--timeout", "3s"}, {"stop", "st-a", "--timeout", "-1s"}} {
		_, _, err := run("operator-me", args...)
		require.Equal(t, exitUsage, exitCode(err), "%v: %v", args, err)
	}

	// Several ids: each is reported, in the order given; the conflict (4)
	// is more serious than the unknown id (3).
	stdout, stderr, err := run("operator-me", "stop", "st-a", "st-nobody", "st-theirs", "st-b", "--json")
	require.Equal(t, exitConflict, exitCode(err), "%v\n%s", err, stderr)
	var outcomes []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &outcomes), stdout)
	require.Len(t, outcomes, 4)
	for i, want := range []struct {
		id string
		ok bool
	}{{"st-a", true}, {"st-nobody", false}, {"st-theirs", false}, {"st-b", true}} {
		require.Equal(t, want.id, outcomes[i]["id"])
		require.Equal(t, want.ok, outcomes[i]["ok"], "%v", outcomes[i])
		if want.ok {
			require.Equal(t, "stopped", outcomes[i]["worker"].(map[string]any)["state"])
			require.NotContains(t, outcomes[i], "error")
		} else {
			require.Contains(t, outcomes[i]["error"], want.id)
			require.NotContains(t, outcomes[i], "worker")
		}
	}
	require.NotContains(t, stderr, "SIGTERM sent", "progress is for a terminal only")

	// Text: a line per worker on stdout, the failed ones with their
	// reason; the error (stderr) only counts them, so no reason is told
	// twice.
	stdout, _, err = run("operator-me", "stop", "st-a", "st-nobody")
	require.Equal(t, exitNotFound, exitCode(err))
	require.Regexp(t, `^Worker st-a had already ended \(stopped.*\)\.\nNot stopped: stop st-nobody: .*\n$`, stdout)
	require.EqualError(t, err, "1 of 2 workers not stopped")
	_, _, err = run("operator-me", "stop", "st-nobody", "st-nobody2", "--json")
	require.EqualError(t, err, "2 of 2 workers not stopped", "the array on stdout has each error")

	// --all: every live worker of the caller, not another manager's; --kill
	// reaches the unit as SIGKILL.
	stdout, _, err = run("operator-me", "stop", "--all", "--kill")
	require.NoError(t, err, stdout)
	require.Equal(t, "Stopped st-c; nothing of it is left in its cgroup.\nStopped st-d; nothing of it is left in its cgroup.\n", stdout)
	for _, id := range []string{"st-c", "st-d"} {
		stdout, _, err = run("operator-me", "status", id, "--json")
		require.NoError(t, err, stdout)
		var st output.Status
		require.NoError(t, json.Unmarshal([]byte(stdout), &st))
		require.Equal(t, "killed", st.Worker.ExitKind)
		require.Equal(t, 9, *st.Worker.ExitStatus, "--kill sends SIGKILL, not SIGTERM")
	}
	stdout, _, err = run("operator-other", "status", "st-theirs", "--json")
	require.NoError(t, err, stdout)
	require.Contains(t, stdout, `"state":"running"`, "--all stops only the caller's workers")
	stdout, _, err = run("operator-me", "stop", "--all")
	require.NoError(t, err, stdout)
	require.Equal(t, "No live workers of yours to stop.\n", stdout)
	stdout, _, err = run("operator-me", "stop", "--all", "--json")
	require.NoError(t, err, stdout)
	require.Equal(t, "[]\n", stdout)

	// agent_fleet: ids, all, timeout and kill.
	s, _, _ := testStreams()
	f := testFactory(s)
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	call := mcptest.Caller(t, mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: f, Caller: "operator-other"})))
	r := call("agent_fleet", map[string]any{"action": "stop", "ids": []any{"st-theirs", "st-a"}, "timeout": "3s"})
	require.True(t, r.IsError, "st-a is not operator-other's: %s", r.Text)
	require.Regexp(t, `^Stopped st-theirs; nothing of it is left in its cgroup\.\nNot stopped: stop st-a: .*\n1 of 2 workers not stopped\.$`, r.Text,
		"a line per worker, then the count")
	require.Equal(t, "1 of 2 workers not stopped", r.Structured["error"])
	stops := r.Structured["result"].(map[string]any)["stops"].([]any)
	require.Len(t, stops, 2)
	require.Equal(t, true, stops[0].(map[string]any)["ok"])
	require.Equal(t, false, stops[1].(map[string]any)["ok"])
	r = call("agent_fleet", map[string]any{"action": "stop", "all": true, "kill": true})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "You have no live workers to stop.", r.Text)
	require.Equal(t, map[string]any{"stops": []any{}}, r.Structured)
	r = call("agent_fleet", map[string]any{"action": "stop", "id": "st-a", "ids": []any{"st-b"}})
	require.True(t, r.IsError)
	r = call("agent_fleet", map[string]any{"action": "stop", "id": "st-a", "kill": true, "timeout": "1s"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "no timeout")
	r = call("agent_fleet", map[string]any{"action": "list", "kill": true})
	require.True(t, r.IsError, "kill is stop's alone")
}
