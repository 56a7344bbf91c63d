//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// fleetAs runs a fleet verb as session id, with agent-fleet on PATH.
func fleetAs(t *testing.T, dir, id string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := as(t, dir, id, args...)
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func listAll(t *testing.T, dir, id string, env []string) (map[string]output.Worker, string) {
	t.Helper()
	cmd := fleetAs(t, dir, id, env, "list", "--all", "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s%s", out, stderr.String())
	var ws []output.Worker
	require.NoError(t, json.Unmarshal(out, &ws), "%s", out)
	live := map[string]output.Worker{}
	for _, w := range ws {
		if w.State == "running" {
			live[w.ID] = w
		}
	}
	return live, stderr.String()
}

func TestOwnershipCLI(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	env := []string{"PATH=" + binDir(t) + ":" + os.Getenv("PATH")}
	run := func(id string, args ...string) (string, error) {
		out, err := fleetAs(t, dir, id, env, args...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		for _, w := range []string{"own-a", "own-b", "own-c"} {
			_, _ = run("agent-m2", "stop", w)
			_, _ = run("agent-m1", "stop", w)
		}
		stopBroker(t, dir)
	})
	for _, id := range []string{"own-a", "own-b"} {
		out, err := run("agent-m1", "spawn", "--id", id, "--", "sleep", "300")
		require.NoError(t, err, out)
	}

	out, err := run("agent-m2", "stop", "own-b")
	requireExit(t, err, exitConflict)
	require.Contains(t, out, "adopt it first")
	out, err = run("agent-m2", "adopt", "own-b")
	require.NoError(t, err, out)
	require.Contains(t, out, "You now manage own-b")
	out, err = run("agent-m2", "renew", "own-b", "--json")
	require.NoError(t, err, out)
	out, err = run("agent-m1", "renew", "own-b")
	requireExit(t, err, exitConflict)

	// fleet.db deleted under running workers: list --all rebuilds their
	// records, with the adoption kept.
	reg := fleet.RegistryPath(intercom.NewPaths(dir))
	removed := time.Now()
	require.NoError(t, os.Remove(reg))
	live, stderr := listAll(t, dir, "agent-m2", env)
	require.Contains(t, stderr, "rebuilt the record of live worker own-a")
	require.Equal(t, 1, strings.Count(stderr, "own-a"), "each recovery is reported once: %s", stderr)
	require.Len(t, live["own-a"].Command, 2, "the command comes back from the unit")
	require.Equal(t, "sleep", filepath.Base(live["own-a"].Command[0]))
	started, err := time.Parse(time.RFC3339Nano, live["own-a"].CreatedAt)
	require.NoError(t, err)
	require.True(t, started.Before(removed), "its start comes back from the unit, not the rebuild: %s", started)
	require.Equal(t, "agent-m1", live["own-a"].Manager)
	require.Equal(t, "agent-m2", live["own-b"].Manager, "adoptions survive a lost registry")
	require.Equal(t, "agent-m1", live["own-b"].FirstManager)

	// A corrupt fleet.db is kept aside, reported, and rebuilt.
	garbage := []byte("this is not a database, but someone's data all the same\n")
	require.NoError(t, os.WriteFile(reg, garbage, 0o600))
	live, stderr = listAll(t, dir, "agent-m2", env)
	require.Contains(t, stderr, "the registry was corrupt: kept aside as")
	aside, _ := filepath.Glob(reg + ".corrupt-*")
	require.NotEmpty(t, aside)
	var kept bool
	for _, p := range aside {
		data, _ := os.ReadFile(p)
		kept = kept || string(data) == string(garbage)
	}
	require.True(t, kept, "the corrupt file's bytes are kept")
	require.Len(t, live, 2)
	require.Equal(t, "agent-m2", live["own-b"].Manager)

	// Respawning a running worker is refused, also for a restarted manager.
	_, err = run("agent-m1", "spawn", "--id", "own-a", "--", "sleep", "1")
	requireExit(t, err, exitConflict)

	// forget/prune delete only ended records, and only when acknowledged.
	_, err = run("agent-m1", "forget", "own-a")
	requireExit(t, err, exitUsage)
	out, err = run("agent-m1", "forget", "own-a", "--acknowledge")
	requireExit(t, err, exitConflict)
	require.Contains(t, out, "stop it first")
	out, err = run("agent-m1", "stop", "own-a")
	require.NoError(t, err, out)
	out, err = run("agent-m1", "forget", "own-a", "--acknowledge")
	require.NoError(t, err, out)
	require.Contains(t, out, "Forgot 1 ended record of")
	out, err = run("agent-m1", "status", "own-a")
	requireExit(t, err, exitNotFound)
	out, err = run("agent-m2", "prune", "--acknowledge")
	require.NoError(t, err, out)
	out, err = run("agent-m2", "stop", "own-b")
	require.NoError(t, err, out)
}

// A person who adopts an agent's worker manages it as they manage their
// own: without an idle lease (README "Ownership and leases"). A worker that
// has ended cannot be adopted, and the refusal says so plainly (exit 4).
func TestAdoptAsAPersonDropsTheLeaseAndEndedWorkersAreRefused(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	run := func(id string, args ...string) (string, error) {
		out, err := fleetAs(t, dir, id, nil, args...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		_, _ = run("operator-pat", "stop", "ad-w1")
		_, _ = run("agent-m1", "stop", "ad-w1")
		stopBroker(t, dir)
	})
	out, err := run("agent-m1", "spawn", "--id", "ad-w1", "--json", "--", "sleep", "300")
	require.NoError(t, err, out)
	var w output.Worker
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	require.NotEmpty(t, w.LeaseDeadline, "an agent's worker has an idle lease")

	out, err = run("operator-pat", "adopt", "ad-w1")
	require.NoError(t, err, out)
	require.Contains(t, out, "You now manage ad-w1 (run "+w.RunID+"); it has no idle lease.")
	out, err = run("operator-pat", "status", "ad-w1", "--json")
	require.NoError(t, err, out)
	var st output.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, "operator-pat", st.Worker.Manager)
	require.Empty(t, st.Worker.LeaseDeadline, "a person's workers have no idle lease")
	require.Zero(t, st.Worker.LeaseSeconds)

	out, err = run("operator-pat", "stop", "ad-w1")
	require.NoError(t, err, out)
	out, err = run("agent-m1", "adopt", "ad-w1")
	requireExit(t, err, exitConflict)
	require.Contains(t, out, `ad-w1 was stopped; nothing to adopt (its record is manager "operator-pat"'s to forget;`)
	require.Contains(t, out, "prune --all --acknowledge")
	require.NotContains(t, out, "not found")
	// Its own manager is told to forget it; renewing an ended worker is a
	// conflict with its state, not a missing worker.
	out, err = run("operator-pat", "renew", "ad-w1")
	requireExit(t, err, exitConflict)
	require.Contains(t, out, "ad-w1 was stopped; nothing to renew (forget it with agent-fleet forget ad-w1 --acknowledge)")
	out, err = run("operator-pat", "forget", "ad-w1", "--acknowledge")
	require.NoError(t, err, out)
}

// Two janitors at once: one acts, the other says one is in progress.
func TestConcurrentCleanups(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	// A worker whose lease is long expired and that ignores SIGTERM, so its
	// verified stop (SIGTERM, wait, SIGKILL) keeps the first janitor busy.
	env := []string{"AGENT_FLEET_LEASE_WARNING=1ms", "AGENT_FLEET_LEASE_GRACE=1ms"}
	t.Cleanup(func() { stopBroker(t, dir) })
	trapped := filepath.Join(dir, "trapped") // the trap is set: SIGTERM is ignored from here
	out, err := fleetAs(t, dir, "agent-m1", env, "spawn", "--id", "stubborn", "--lease", "1ms", "--",
		"sh", "-c", `trap "" TERM; : > "$0"; while :; do sleep 1; done`, trapped).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = fleetAs(t, dir, "agent-m1", env, "stop", "stubborn").Run() })
	require.Eventually(t, func() bool { _, err := os.Stat(trapped); return err == nil }, 30*time.Second, 10*time.Millisecond)

	first := fleetAs(t, dir, "agent-janitor", env, "cleanup", "--execute", "--json")
	var firstOut strings.Builder
	first.Stdout, first.Stderr = &firstOut, &firstOut
	require.NoError(t, first.Start())
	require.Eventually(t, func() bool {
		out, err := fleetAs(t, dir, "agent-m1", env, "status", "stubborn", "--json").Output()
		var st output.Status
		return err == nil && json.Unmarshal(out, &st) == nil && st.Worker.State == "stopping"
	}, 20*time.Second, 50*time.Millisecond, "the first janitor is stopping the worker")
	out, err = fleetAs(t, dir, "agent-janitor", env, "cleanup", "--execute").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Cleanup in progress in another process")

	require.NoError(t, first.Wait(), firstOut.String())
	var rep fleet.CleanupReport
	require.NoError(t, json.Unmarshal([]byte(firstOut.String()), &rep), firstOut.String())
	require.Len(t, rep.Actions, 1)
	require.Equal(t, "stop", rep.Actions[0].Kind)
	require.True(t, rep.Actions[0].Done, rep.Actions[0].Error)
	out, err = fleetAs(t, dir, "agent-m1", env, "status", "stubborn", "--json").Output()
	require.NoError(t, err)
	var st output.Status
	require.NoError(t, json.Unmarshal(out, &st))
	require.Equal(t, "stopped", st.Worker.State)
	require.Equal(t, "lease-expired", st.Worker.StopReason)
	require.Zero(t, st.ProcessCount)
}

// A long-running `agent-fleet mcp` of a manager records its workers'
// activity (only messages the broker confirms came from the worker's
// cgroup) and runs the janitor: the silent worker is stopped when its lease
// and grace run out, the chatty one lives on.
func TestMCPHolderRenewsActiveWorkersAndStopsSilentOnes(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	cmd := as(t, dir, "mcp-boss", "mcp")
	cmd.Env = append(cmd.Env, inst.Env()...)
	cmd.Env = append(cmd.Env, "PATH="+binDir(t)+":"+os.Getenv("PATH"),
		"AGENT_FLEET_JANITOR_INTERVAL=300ms", "AGENT_FLEET_LEASE_WARNING=1s", "AGENT_FLEET_LEASE_RETRY=1s", "AGENT_FLEET_LEASE_GRACE=1s")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	call := func(args map[string]any) mcptest.Result {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "agent_fleet", Arguments: args})
		require.NoError(t, err)
		return mcptest.Decode(t, res)
	}
	t.Cleanup(func() {
		call(map[string]any{"action": "stop", "id": "chatty"})
		call(map[string]any{"action": "stop", "id": "silent"})
	})
	r := call(map[string]any{"action": "spawn", "id": "silent", "lease": "3s", "command": []any{"sleep", "300"}})
	require.False(t, r.IsError, r.Text)
	r = call(map[string]any{"action": "spawn", "id": "chatty", "lease": "3s", "command": []any{"sh", "-c",
		`while :; do agent-fleet intercom send mcp-boss "still working" >/dev/null || exit 9; sleep 0.3; done`}})
	require.False(t, r.IsError, r.Text)

	var silent map[string]any
	require.Eventually(t, func() bool {
		r := call(map[string]any{"action": "status", "id": "silent"})
		silent = r.Structured
		return !r.IsError && silent["worker"].(map[string]any)["state"] == "stopped"
	}, 30*time.Second, 100*time.Millisecond, "the janitor stops the silent worker")
	require.Equal(t, "lease-expired", silent["worker"].(map[string]any)["stopReason"])

	r = call(map[string]any{"action": "status", "id": "chatty"})
	require.False(t, r.IsError, r.Text)
	w := r.Structured["worker"].(map[string]any)
	require.Equal(t, "running", w["state"], "activity kept it alive: %s", r.Text)
	require.Equal(t, "verified", r.Structured["leaseActivity"])
	deadline, err := time.Parse(time.RFC3339Nano, w["leaseDeadline"].(string))
	require.NoError(t, err)
	require.True(t, deadline.After(time.Now()), "its lease was renewed by its messages")
	require.NotEmpty(t, w["lastActivity"])
}

// The ownership actions of the agent_fleet MCP tool.
func TestMCPFleetOwnershipActions(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	dir := shortDir(t)
	in := cliIn{env: withEnv(nil, append(inst.Env(), "PI_CODING_AGENT_DIR="+dir)...)}
	t.Cleanup(func() { stopBroker(t, dir) })
	out, err := fleetAs(t, dir, "mcp-old", nil, "spawn", "--id", "handed", "--", "sleep", "300").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = fleetAs(t, dir, "mcp-new", nil, "stop", "handed").Run() })

	s, _, _ := testStreams()
	cs := mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: in.factory(s), Caller: "mcp-new"}))
	call := func(args map[string]any) mcptest.Result {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "agent_fleet", Arguments: args})
		require.NoError(t, err)
		return mcptest.Decode(t, res)
	}

	r := call(map[string]any{"action": "stop", "id": "handed"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, `adopt it first (agent_fleet {action: "adopt", id: "handed"})`)
	r = call(map[string]any{"action": "adopt", "all": true})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "No orphaned workers to adopt.", r.Text, "its lease has not expired")
	r = call(map[string]any{"action": "adopt", "id": "handed"})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "You now manage handed")
	r = call(map[string]any{"action": "renew"})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "handed renewed until", "an agent manager's worker has an idle lease")
	r = call(map[string]any{"action": "cleanup"})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Nothing to clean up.", r.Text)
	r = call(map[string]any{"action": "forget", "id": "handed", "acknowledge": true})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "stop it first")
	r = call(map[string]any{"action": "stop", "id": "handed"})
	require.False(t, r.IsError, r.Text)
	r = call(map[string]any{"action": "forget", "id": "handed"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "confirm with acknowledge: true", "the tool's argument, not the CLI's flag")
	require.Contains(t, r.Structured["error"], "--acknowledge", "structuredContent is the CLI's --json error")
	r = call(map[string]any{"action": "forget", "id": "handed", "acknowledge": true})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Forgot 1 ended record of handed.", r.Text)
	r = call(map[string]any{"action": "prune", "acknowledge": true})
	require.False(t, r.IsError, r.Text)
}

// Deleting the registry never lengthens a lease: a worker spawned with
// --lease 30m comes back with 30m counted from its start, and a person's
// worker spawned without one comes back without one.
func TestRebuiltRegistryKeepsSpawnLeasesCLI(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	env := []string{"PATH=" + os.Getenv("PATH")}
	run := func(id string, args ...string) (string, error) {
		out, err := fleetAs(t, dir, id, env, args...).CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		_, _ = run("agent-lm1", "stop", "rl-agent")
		_, _ = run("operator-lp", "stop", "rl-person")
		stopBroker(t, dir)
	})
	out, err := run("agent-lm1", "spawn", "--id", "rl-agent", "--lease", "30m", "--", "sleep", "300")
	require.NoError(t, err, out)
	out, err = run("operator-lp", "spawn", "--id", "rl-person", "--", "sleep", "300")
	require.NoError(t, err, out)
	status := func(id, manager string) output.Worker {
		t.Helper()
		cmd := fleetAs(t, dir, manager, env, "status", id, "--json")
		out, err := cmd.Output()
		require.NoError(t, err, "%s", out)
		var st output.Status
		require.NoError(t, json.Unmarshal(out, &st), "%s", out)
		return st.Worker
	}
	before := status("rl-agent", "agent-lm1")
	require.EqualValues(t, 1800, before.LeaseSeconds)

	files, err := filepath.Glob(fleet.RegistryPath(intercom.NewPaths(dir)) + "*")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		require.NoError(t, os.Remove(f))
	}
	after := status("rl-agent", "agent-lm1")
	require.Equal(t, "recovered", after.StateReason, "rebuilt from its unit")
	require.EqualValues(t, 1800, after.LeaseSeconds, "the lease it was spawned with, not the default")
	started, err := time.Parse(time.RFC3339Nano, after.CreatedAt)
	require.NoError(t, err)
	deadline, err := time.Parse(time.RFC3339Nano, after.LeaseDeadline)
	require.NoError(t, err)
	require.True(t, deadline.Equal(started.Add(30*time.Minute)), "counted from its start: %s, %s", started, deadline)
	was, err := time.Parse(time.RFC3339Nano, before.LeaseDeadline)
	require.NoError(t, err)
	require.False(t, deadline.After(was), "never later than it was: %s > %s", deadline, was)
	person := status("rl-person", "operator-lp")
	require.Zero(t, person.LeaseSeconds, "a person's worker has no lease after recovery either")
	require.Empty(t, person.LeaseDeadline)
}
