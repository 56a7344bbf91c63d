//go:build !windows

package main

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// perIncarnation are the worker fields that name one incarnation or one
// moment; two workers spawned alike differ only there.
var perIncarnation = []string{"id", "runId", "unit", "mainPid", "controlGroup", "createdAt", "readyAt", "endedAt",
	"logPath", "leaseDeadline", "lastActivity", "pausedAt"}

// alike drops the per-incarnation fields of every worker in v (a worker,
// a list of them, or a result holding them under "worker"/"workers").
func alike(v any) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = alike(e)
		}
		return out
	case map[string]any:
		out := maps.Clone(v)
		if _, ok := out["runId"]; ok {
			for _, k := range perIncarnation {
				delete(out, k)
			}
			return out
		}
		for k, e := range out {
			out[k] = alike(e)
		}
		return out
	}
	return v
}

// TestEveryFleetVerbAgreesWithAgentFleet runs every fleet verb on the CLI
// with --json and as the matching agent_fleet action, on the same workers
// of one manager, and compares what they say: the CLI's JSON is the tool's
// structuredContent (a list sits under "workers", as MCP wants an object).
func TestEveryFleetVerbAgreesWithAgentFleet(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	dir := shortDir(t)
	in := cliIn{env: withEnv(nil, append(inst.Env(), "PI_CODING_AGENT_DIR="+dir, "AGENT_INTERCOM_SESSION_ID=cmp-boss")...)}
	t.Cleanup(func() { stopBroker(t, dir) })
	s, _, _ := testStreams()
	call := mcptest.Caller(t, mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: in.factory(s), Caller: "cmp-boss"})))
	t.Cleanup(func() {
		for _, id := range []string{"cmp-a", "cmp-b", "cmp-c", "cmp-d", "cmp-e", "cmp-f"} {
			_, _ = in.run(t, "stop", id, "--kill")
		}
	})
	tool := func(args map[string]any) any {
		t.Helper()
		r := call("agent_fleet", args)
		require.False(t, r.IsError, "%v: %s", args, r.Text)
		return any(r.Structured)
	}
	cli := func(args ...string) any {
		t.Helper()
		if i := slices.Index(args, "--"); i >= 0 {
			args = slices.Insert(args, i, "--json")
		} else {
			args = append(args, "--json")
		}
		out, err := in.run(t, args...)
		require.NoError(t, err, "%v: %s", args, out)
		var v any
		require.NoError(t, json.Unmarshal([]byte(out), &v), "%v: %s", args, out)
		return v
	}
	workers := func(v any) any { return v.(map[string]any)["workers"] }
	covered := map[string]bool{}
	same := func(action string, cliJSON, toolJSON any) {
		t.Helper()
		covered[action] = true
		require.Equal(t, cliJSON, toolJSON, action)
	}

	byTool := tool(map[string]any{"action": "spawn", "id": "cmp-a", "command": []any{"sleep", "300"}, "role": "cmp"})
	byCLI := cli("spawn", "--id", "cmp-b", "--role", "cmp", "--", "sleep", "300")
	require.Equal(t, "cmp-boss", byCLI.(map[string]any)["manager"])
	same("spawn", alike(byCLI), alike(byTool))

	// The cgroup's CPU time and memory change between the two reads.
	cpuless := func(v any) any {
		if r, ok := v.(map[string]any)["resources"].(map[string]any); ok {
			delete(r, "cpuUsageUsec")
			delete(r, "memoryBytes")
		}
		return v
	}
	same("status", cpuless(cli("status", "cmp-a")), cpuless(tool(map[string]any{"action": "status", "id": "cmp-a"})))
	same("list", cli("list"), workers(tool(map[string]any{"action": "list"})))
	same("logs", cli("logs", "cmp-a", "-n", "5"), tool(map[string]any{"action": "logs", "id": "cmp-a", "lines": 5}))
	same("usage", cli("usage", "--by", "kind", "--since", "2000-01-01"), tool(map[string]any{"action": "usage", "by": "kind", "since": "2000-01-01"}))
	same("renew", alike(cli("renew", "cmp-a")), alike(workers(tool(map[string]any{"action": "renew", "id": "cmp-a"}))))
	same("pause", alike(cli("pause", "cmp-b")), alike(workers(tool(map[string]any{"action": "pause", "id": "cmp-a"}))))
	same("resume", alike(cli("resume", "cmp-b")), alike(workers(tool(map[string]any{"action": "resume", "id": "cmp-a"}))))
	same("adopt", alike(cli("adopt", "cmp-a")), alike(workers(tool(map[string]any{"action": "adopt", "id": "cmp-a"}))))
	same("cleanup", cli("cleanup"), tool(map[string]any{"action": "cleanup"}))
	same("capabilities", cli("capabilities"), tool(map[string]any{"action": "capabilities"}))
	// Doctor's details carry measurements (round trips); its verdicts agree.
	verdicts := func(v any) any {
		m := v.(map[string]any)
		var out []any
		for _, c := range m["checks"].([]any) {
			c := c.(map[string]any)
			out = append(out, c["name"].(string)+"="+c["status"].(string))
		}
		return []any{m["ok"], out}
	}
	same("doctor", verdicts(cli("doctor")), verdicts(tool(map[string]any{"action": "doctor"})))

	stoppedByCLI := cli("stop", "cmp-b")
	stoppedByTool := tool(map[string]any{"action": "stop", "id": "cmp-a"})
	require.Contains(t, stoppedByTool, "killed", "stop says what it had to kill, on both surfaces")
	require.Contains(t, stoppedByTool, "survivors")
	same("stop", alike(stoppedByCLI), alike(stoppedByTool))
	// A wait on a stopped worker: the CLI exits 12 with the same JSON the
	// tool returns as an ordinary result.
	waitedCLI, err := in.run(t, "wait", "cmp-b", "--json")
	require.Equal(t, exitEndStopped, exitCode(err), "%v: %s", err, waitedCLI)
	var waitedByCLI any
	first, _, _ := strings.Cut(waitedCLI, "\n")
	require.NoError(t, json.Unmarshal([]byte(first), &waitedByCLI), waitedCLI)
	waitedByTool := tool(map[string]any{"action": "wait", "id": "cmp-a"})
	require.Equal(t, "stopped", waitedByTool.(map[string]any)["workers"].([]any)[0].(map[string]any)["end"])
	same("wait", alike(waitedByCLI), alike(waitedByTool))
	same("forget", cli("forget", "cmp-b", "--acknowledge"), tool(map[string]any{"action": "forget", "id": "cmp-a", "acknowledge": true}))
	same("prune", cli("prune", "--acknowledge"), tool(map[string]any{"action": "prune", "acknowledge": true}))

	// A stop of several ids (one unknown) with a timeout, and of all
	// one's workers with --kill: each reported, the same on both surfaces
	// but for the worker ids.
	cliFails := func(args ...string) any {
		t.Helper()
		out, err := in.run(t, append(args, "--json")...)
		require.Error(t, err, "%v: %s", args, out)
		var v any
		require.NoError(t, json.Unmarshal([]byte(out), &v), "%v: %s", args, out)
		return v
	}
	noIDs := func(v any) any {
		out := slices.Clone(v.([]any))
		for i, o := range out {
			o := maps.Clone(o.(map[string]any))
			delete(o, "id")
			out[i] = alike(o)
		}
		return out
	}
	stops := func(v any) any { return v.(map[string]any)["stops"] }
	cli("spawn", "--id", "cmp-c", "--", "sleep", "300")
	tool(map[string]any{"action": "spawn", "id": "cmp-d", "command": []any{"sleep", "300"}})
	r := call("agent_fleet", map[string]any{"action": "wait", "id": "cmp-d", "timeout": "200ms"})
	require.True(t, r.IsError, "a wait that timed out is an error result: %s", r.Text)
	require.Contains(t, r.Text, `cmp-d still running; call agent_fleet {action: "wait"} again to wait on`)
	byCLI = cliFails("stop", "cmp-c", "cmp-nobody", "--timeout", "5s")
	r = call("agent_fleet", map[string]any{"action": "stop", "ids": []any{"cmp-d", "cmp-nobody"}, "timeout": "5s"})
	require.True(t, r.IsError, r.Text)
	same("stop", noIDs(byCLI), noIDs(stops(r.Structured["result"])))
	require.Len(t, byCLI, 2)
	cli("spawn", "--id", "cmp-e", "--", "sleep", "300")
	byCLI = cli("stop", "--all", "--kill")
	tool(map[string]any{"action": "spawn", "id": "cmp-f", "command": []any{"sleep", "300"}})
	byTool = tool(map[string]any{"action": "stop", "all": true, "kill": true})
	require.Len(t, byCLI, 1, "cmp-e alone was live")
	same("stop", noIDs(byCLI), noIDs(stops(byTool)))

	var missing []string
	for _, a := range verbs.Actions {
		if !covered[a] {
			missing = append(missing, a)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "every fleet verb is compared")
}
