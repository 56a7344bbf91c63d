//go:build !windows

package mcpserver

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/history"
	"github.com/agent-fleet/agent-fleet/teams"
)

// Every tool carries the hints of the Claude adapter's (spec A.2), and
// every argument naming a team has the team-name pattern.
func TestToolAnnotations(t *testing.T) {
	t.Setenv(teams.EnvScope, "")
	t.Setenv(teams.EnvManagerTarget, "")
	p := intercom.NewPaths(shortDir(t))
	startTestBroker(t, p)
	boss := sessionFor(t, p, "boss")
	st, release, err := testFactory().SessionTeam(p, boss.Client().Identity())
	require.NoError(t, err)
	t.Cleanup(release)
	ops, _ := st.Hold(p, boss, discard)
	server := New(ops, Options{Team: st, Fleet: testFactory(), Caller: "boss",
		History: func(context.Context, verbs.HistoryArgs) ([]history.Entry, error) { return nil, nil }})
	tools := mcptest.Tools(t, mcptest.Connect(t, server))

	type hints struct{ readOnly, idempotent, destructive, openWorld bool }
	want := map[string]hints{
		"intercom_whoami":      {readOnly: true, idempotent: true},
		"intercom_status":      {readOnly: true, idempotent: true, openWorld: true},
		"intercom_list":        {readOnly: true, idempotent: true, openWorld: true},
		"intercom_team":        {readOnly: true, idempotent: true, openWorld: true},
		"intercom_history":     {readOnly: true, idempotent: true},
		"intercom_join":        {destructive: true},
		"intercom_send":        {openWorld: true},
		"intercom_ask":         {openWorld: true},
		"intercom_set_summary": {destructive: true, openWorld: true},
		"intercom_pending":     {destructive: true, openWorld: true},
		"intercom_reply":       {destructive: true, openWorld: true},
		"agent_fleet":          {destructive: true, openWorld: true},
	}
	require.Len(t, tools, len(want))
	for name, h := range want {
		tool := tools[name]
		require.NotNil(t, tool, name)
		a := tool.Annotations
		require.NotNil(t, a, "%s has no annotations", name)
		// Unset hints mean MCP's defaults: destructive and open-world.
		got := hints{readOnly: a.ReadOnlyHint, idempotent: a.IdempotentHint,
			destructive: a.DestructiveHint == nil || *a.DestructiveHint, openWorld: a.OpenWorldHint == nil || *a.OpenWorldHint}
		if got.readOnly {
			got.destructive = false // meaningless for a read-only tool
		}
		require.Equal(t, h, got, name)
	}

	for _, c := range []struct{ tool, arg string }{
		{"intercom_send", "team"}, {"intercom_ask", "team"}, {"intercom_reply", "team"},
		{"intercom_history", "team"}, {"intercom_team", "team"}, {"intercom_join", "name"},
	} {
		data, err := json.Marshal(tools[c.tool].InputSchema)
		require.NoError(t, err)
		var s struct {
			Properties map[string]map[string]any `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(data, &s))
		require.Equal(t, teams.TeamNamePattern, s.Properties[c.arg]["pattern"], "%s.%s", c.tool, c.arg)
	}
}
