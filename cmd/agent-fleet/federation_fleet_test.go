//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// remoteWorker is a worker as `list --all --json` shows it: the worker
// view plus its host.
type remoteWorker struct {
	ID           string `json:"id"`
	Host         string `json:"host"`
	State        string `json:"state"`
	Unit         string `json:"unit"`
	ControlGroup string `json:"controlGroup"`
	Manager      string `json:"manager"`
}

// A manager on host A spawns a worker on host B (`spawn --host b`): it
// runs in B's user manager under B's registry, `list --all` on A shows it
// with its host, and `stop` from A (which has no user manager, and finds
// the worker in B's published records) ends it with its cgroup proven empty —
// checked here on the cgroup files themselves, not only by the verb's
// word.
func TestFederationWorkerOnAnotherHost(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	env := append(inst.Env(), "PATH="+os.Getenv("PATH"))
	w := newFedWorld(t)
	// A has no user manager (a laptop's CLI in a container, say): its
	// verbs on B's worker need none.
	a := w.host("a", fedHostConfig{Env: []string{"PATH=" + os.Getenv("PATH")}})
	b := w.host("b", fedHostConfig{Env: env})
	w.waitJoined()
	const manager = "op-a"
	t.Cleanup(func() { _, _ = a.run(manager, "stop", "--host", "b", "far-worker") })

	out := a.must(manager, "spawn", "--host", "b", "--id", "far-worker", "--json", "--", "sleep", "300")
	var spawned remoteWorker
	require.NoError(t, json.Unmarshal([]byte(out), &spawned), out)
	require.Equal(t, "running", spawned.State, out)
	require.Equal(t, "b", spawned.Host, out)

	// B's own registry has it, under B's user manager.
	var local []remoteWorker
	out = b.must("", "list", "--all", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &local), out)
	var onB *remoteWorker
	for i := range local {
		if local[i].ID == "far-worker" && local[i].Host == "" || local[i].ID == "far-worker" && local[i].Host == "b" {
			onB = &local[i]
		}
	}
	require.NotNil(t, onB, "b's list --all has far-worker: %s", out)
	require.NotEmpty(t, onB.ControlGroup, out)
	cg, err := units.OpenCgroups("")
	require.NoError(t, err)
	procs, err := cg.Procs(onB.ControlGroup)
	require.NoError(t, err)
	require.NotEmpty(t, procs, "the worker's cgroup %s holds its processes", onB.ControlGroup)

	var all []remoteWorker
	out = a.must(manager, "list", "--all", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &all), out)
	found := false
	for _, x := range all {
		if x.ID == "far-worker" {
			found = true
			require.Equal(t, "b", x.Host, out)
			require.Equal(t, "running", x.State, out)
			require.Equal(t, manager, x.Manager, out)
		}
	}
	require.True(t, found, "a's list --all shows far-worker: %s", out)
	table := a.must(manager, "list", "--all")
	require.Regexp(t, `(?m)^b\s+far-worker\s`, table)

	// The same manager as an agent: agent_fleet with host, through a real
	// MCP server process on A.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(),
		&mcp.CommandTransport{Command: a.command(manager, "mcp"), TerminateDuration: 5 * time.Second}, nil)
	require.NoError(t, err)
	r := mcptest.Caller(t, cs)("agent_fleet", map[string]any{"action": "status", "id": "far-worker", "host": "b"})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "On host b", r.Text)
	require.Contains(t, r.Text, "running", r.Text)
	r = mcptest.Caller(t, cs)("agent_fleet", map[string]any{"action": "status", "id": "far-worker", "host": "nowhere"})
	require.True(t, r.IsError, "an unknown host is an error: %s", r.Text)
	require.NoError(t, cs.Close())

	// A worker on B that ends non-zero: wait --host prints how, as a
	// local wait does, and logs --host prints its lines as they are.
	a.must(manager, "spawn", "--host", "b", "--id", "far-exit", "--", "sh", "-c", "printf 'alpha\\nbeta\\n'; sleep 1; exit 7")
	out, err = a.run(manager, "wait", "far-exit", "--host", "b", "--timeout", "2m")
	requireExit(t, err, exitEndNonZero)
	require.Contains(t, out, "far-exit: exited with status 7", out)
	out = a.must(manager, "logs", "far-exit", "--host", "b")
	require.Equal(t, "alpha\nbeta\n", out)

	// Without --host: A's registry does not know far-worker, B's
	// published record does.
	out = a.must(manager, "stop", "far-worker")
	require.Contains(t, out, "nothing of it is left in its cgroup", out)
	unitstest.RequireOnlyExitRecord(t, onB.ControlGroup)
	fedWait(t, 30*time.Second, func() bool {
		out, err := a.run(manager, "list", "--all", "--json")
		return err == nil && !strings.Contains(out, `"state":"running"`)
	}, "a's list --all no longer shows far-worker running")
}
