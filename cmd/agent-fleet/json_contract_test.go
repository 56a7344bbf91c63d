package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
)

// How a worker ended is numbers in JSON: exitCode as a shell reports it
// (128 + the signal when killed), exitStatus systemd's, and the kind of
// ending a string of its own — the same on the CLI and in agent_fleet's
// structuredContent (issue 22, finding 8).
func TestWorkerEndingIsNumbersInJSON(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "operator-me")
	s, _, _ := testStreams()
	f := testFactory(s)
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	call := mcptest.Caller(t, mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: f, Caller: "operator-me"})))
	worker := func(id string) (cli, tool map[string]any) {
		t.Helper()
		out, _, err := fakeCLI(t, e, "operator-me", "status", id, "--json")
		require.NoError(t, err, out)
		var st map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		r := call("agent_fleet", map[string]any{"action": "status", "id": id})
		require.False(t, r.IsError, r.Text)
		return st["worker"].(map[string]any), r.Structured["worker"].(map[string]any)
	}

	out, _, err := fakeCLI(t, e, "operator-me", "spawn", "--id", "end-killed", "--", "sleep", "300")
	require.NoError(t, err, out)
	out, _, err = fakeCLI(t, e, "operator-me", "stop", "end-killed")
	require.NoError(t, err, out)
	cli, tool := worker("end-killed")
	for _, w := range []map[string]any{cli, tool} {
		require.Equal(t, float64(128+15), w["exitCode"], "killed by SIGTERM: %v", w)
		require.Equal(t, "killed", w["exitKind"])
		require.Equal(t, float64(15), w["exitStatus"])
	}

	_, _, err = fakeCLI(t, e, "operator-me", "spawn", "--id", "end-exited", "--", "false")
	require.Error(t, err, "a command that fails at once fails the spawn")
	cli, tool = worker("end-exited")
	for _, w := range []map[string]any{cli, tool} {
		require.Equal(t, float64(1), w["exitCode"], "%v", w)
		require.Equal(t, "exited", w["exitKind"])
		require.Equal(t, float64(1), w["exitStatus"])
	}
}
