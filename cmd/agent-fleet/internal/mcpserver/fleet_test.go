package mcpserver

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
	"github.com/agent-fleet/agent-fleet/units"
)

// agent_fleet in process, on the fake user manager: the verbs' reports as
// tool results, refusals as isError results that say what to change.
func TestAgentFleetOnTheFake(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "boss")
	f := testFactory()
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	call := mcptest.Caller(t, mcptest.Connect(t, New(nil, Options{Fleet: f, Caller: "boss"})))
	fleet := func(args map[string]any) mcptest.Result { t.Helper(); return call("agent_fleet", args) }

	r := fleet(map[string]any{"action": "spawn", "id": "w1", "command": []any{"sleep", "300"}, "maxRuntime": "1h", "env": map[string]any{"K": "v"}})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, `Spawned worker w1 (run `)
	require.Equal(t, "boss", r.Structured["manager"])
	require.Equal(t, []any{"K"}, r.Structured["envKeys"], "values are never recorded")

	r = fleet(map[string]any{"action": "list"})
	require.Contains(t, r.Text, "- w1 [running]")
	require.Len(t, r.Structured["workers"], 1)

	r = fleet(map[string]any{"action": "status", "id": "w1"})
	require.Contains(t, r.Text, "Worker w1 (run ")
	require.Equal(t, "active", r.Structured["unitActiveState"])

	r = fleet(map[string]any{"action": "stop", "id": "w1"})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Stopped w1; nothing of it is left in its cgroup.", r.Text)
	require.Equal(t, []any{}, r.Structured["killed"], "what stop had to kill, as the CLI's --json says: none, not null")
	require.Equal(t, []any{}, r.Structured["survivors"])
	require.Equal(t, false, r.Structured["alreadyEnded"])

	r = fleet(map[string]any{"action": "spawn", "id": "w2", "command": []any{"/bin/false"}})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "spawn w2")
	require.Equal(t, false, r.Structured["ok"])
	failed, _ := r.Structured["result"].(map[string]any)
	require.Equal(t, "w2", failed["id"], "a failed spawn carries its record")

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"action": "status"}, "status needs a worker id"},
		{map[string]any{"action": "list", "lease": "1h"}, "agent_fleet list does not take lease"},
		{map[string]any{"action": "spawn", "id": "w3", "command": []any{"sleep", "1"}, "lease": "soon"}, "lease must be a duration such as 30m"},
		{map[string]any{"action": "forget", "id": "w1"}, "forget deletes history: confirm with acknowledge: true"},
		{map[string]any{"action": "stop", "id": "nobody"}, "worker not found"},
	} {
		r = fleet(c.args)
		require.True(t, r.IsError, "%v", c.args)
		require.Contains(t, r.Text, c.want, "%v", c.args)
		require.NotContains(t, r.Text, "--", "%v: no CLI flags for an MCP caller", c.args)
		require.Equal(t, false, r.Structured["ok"], "%v", c.args)
	}
	r = fleet(map[string]any{"action": "fly"})
	require.True(t, r.IsError, "the schema refuses unknown actions")

	r = fleet(map[string]any{"action": "forget", "id": "w1", "acknowledge": true})
	require.False(t, r.IsError, r.Text)
	require.EqualValues(t, 1, r.Structured["deleted"])
}

// Without a user manager, agent_fleet's read-only actions answer from the
// registry and say that live states are unknown; the others fail.
func TestAgentFleetWithoutUserManager(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "boss")
	f := testFactory()
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	call := mcptest.Caller(t, mcptest.Connect(t, New(nil, Options{Fleet: f, Caller: "boss"})))
	fleet := func(args map[string]any) mcptest.Result { t.Helper(); return call("agent_fleet", args) }
	r := fleet(map[string]any{"action": "spawn", "id": "w1", "command": []any{"sleep", "300"}})
	require.False(t, r.IsError, r.Text)

	f.ConnectUnits = func(context.Context) (units.Manager, error) {
		return nil, fmt.Errorf("%w: no user D-Bus bus", factory.ErrNoSystemd)
	}
	r = fleet(map[string]any{"action": "list"})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "whether live workers still run is unknown")
	require.Contains(t, r.Text, "- w1 [running]")
	ws, _ := r.Structured["workers"].([]any)
	require.Len(t, ws, 1)
	require.Equal(t, "unknown", ws[0].(map[string]any)["liveState"])
	r = fleet(map[string]any{"action": "status", "id": "w1"})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "unknown", r.Structured["unitActiveState"])
	r = fleet(map[string]any{"action": "stop", "id": "w1"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "systemd user manager unavailable")
}
