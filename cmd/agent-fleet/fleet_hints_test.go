package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
)

// fakeCLI runs agent-fleet in process on e's fake user manager, as the
// session id caller; stdout and stderr apart.
func fakeCLI(t *testing.T, e *fleettest.Env, caller string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	f := testFactory(&factory.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb})
	f.ConnectUnits = e.Connect
	f.Getenv = func(k string) string {
		if k == "AGENT_INTERCOM_SESSION_ID" {
			return caller
		}
		return e.Getenv(k)
	}
	err = execCLI(context.Background(), f, args)
	return out.String(), errb.String(), err
}

// A list of one's own workers that comes out empty says that other
// managers have some, and how to see them; renew with nothing to renew
// says so instead of printing nothing.
func TestListAndRenewSayWhatIsLeftOut(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "operator-me")
	out, _, err := fakeCLI(t, e, "operator-me", "list")
	require.NoError(t, err, out)
	require.Equal(t, "No workers.\n", out, "nobody has any")
	out, _, err = fakeCLI(t, e, "operator-me", "renew")
	require.NoError(t, err, out)
	require.Equal(t, "No live workers of yours to renew.\n", out)

	for _, id := range []string{"hint-a", "hint-b"} {
		out, _, err := fakeCLI(t, e, "agent-other", "spawn", "--id", id, "--", "sleep", "300")
		require.NoError(t, err, out)
	}
	out, _, err = fakeCLI(t, e, "operator-me", "list")
	require.NoError(t, err, out)
	require.Equal(t, "No workers of yours (2 of other managers: list --all).\n", out)
	out, _, err = fakeCLI(t, e, "operator-me", "list", "--json")
	require.NoError(t, err, out)
	require.Equal(t, "[]\n", out, "the JSON stays the caller's (empty) list")
	out, _, err = fakeCLI(t, e, "operator-me", "list", "--all")
	require.NoError(t, err, out)
	require.Contains(t, out, "hint-a")
	out, _, err = fakeCLI(t, e, "operator-me", "renew")
	require.NoError(t, err, out)
	require.Equal(t, "No live workers of yours to renew.\n", out)

	s, _, _ := testStreams()
	f := testFactory(s)
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	call := mcptest.Caller(t, mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: f, Caller: "agent-me"})))
	r := call("agent_fleet", map[string]any{"action": "list"})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "You have no workers (2 workers of other managers: list with all: true shows them).", r.Text)
}
