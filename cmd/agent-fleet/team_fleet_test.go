//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// teamFleet runs agent-fleet as session id against the shared user manager,
// with the test's agent-fleet first on PATH (workers inherit it).
func teamFleet(t *testing.T, dir, bin, id string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := as(t, dir, id, args...)
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, "PATH="+bin+":"+os.Getenv("PATH"))
	return cmd.CombinedOutput()
}

// A spawned worker's team names its manager and coworkers, the manager's
// its workers; after an adoption the worker's team names the new manager
// without a restart. The workers.json view follows, readable by the
// TypeScript adapters; the manager inspects a worker's pending asks.
func TestTeamOfSpawnedWorkers(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	bin := binDir(t)
	p := intercom.NewPaths(dir)
	managers := map[string]string{"tw1": "operator-boss", "tw2": "operator-boss"}
	t.Cleanup(func() {
		for id := range managers {
			_, _ = teamFleet(t, dir, bin, managers[id], "stop", id)
		}
		stopBroker(t, dir)
	})
	// Each worker writes its own team (as `agent-fleet team --json` inside
	// it says) to out-<id>.json five times a second.
	for _, id := range []string{"tw1", "tw2"} {
		out := filepath.Join(dir, "out-"+id+".json")
		script := `while :; do agent-fleet team --json > "$0.tmp" 2>"$0.err" && mv "$0.tmp" "$0"; sleep 0.2; done`
		o, err := teamFleet(t, dir, bin, "operator-boss", "spawn", "--id", id, "--role", "builder", "--", "sh", "-c", script, out)
		require.NoError(t, err, "%s", o)
	}
	workerTeam := func(id string) *teams.Team {
		data, err := os.ReadFile(filepath.Join(dir, "out-"+id+".json"))
		if err != nil {
			return nil
		}
		var team teams.Team
		if json.Unmarshal(data, &team) != nil {
			return nil
		}
		return &team
	}
	var w1 *teams.Team
	require.Eventually(t, func() bool {
		w1 = workerTeam("tw1")
		// tw1 rewrites its file every 0.2 s: one written while tw2's spawn
		// was still recording it may say provisioning.
		return w1 != nil && len(w1.Coworkers) == 1 && w1.Coworkers[0].Connected && w1.Coworkers[0].State == "running"
	}, 20*time.Second, 50*time.Millisecond, "tw1's team: %+v", w1)
	require.Equal(t, teams.SourceOrchestrator, w1.Source)
	require.Equal(t, teams.Self{ID: "tw1", WorkerID: "tw1"}, w1.Self)
	require.Equal(t, "operator-boss", w1.Manager.Target)
	require.Equal(t, teams.Member{ID: "tw2", Target: "tw2", Harness: "exec", Role: "builder", State: "running", Connected: true}, w1.Coworkers[0])

	boss := teamOf(t, dir, "operator-boss")
	require.True(t, boss.Self.IsManager)
	require.Len(t, boss.Coworkers, 2)
	for _, c := range boss.Coworkers {
		require.True(t, c.Connected, c.ID)
	}

	// The view, through the adapters' reader rules.
	view := readView(t, p)
	require.Len(t, view.Workers, 2)
	checkWithTypeScriptReaders(t, dir, "tw1", map[string]string{"AGENT_INTERCOM_WORKER_ID": "tw1"}, "operator-boss", []string{"tw2"})
	checkWithTypeScriptReaders(t, dir, "operator-boss", map[string]string{}, "operator-boss", []string{"tw1", "tw2"})

	// An ask left pending in tw1's inbox, and the manager's look at it.
	startListener(t, dir, "asker")
	o, err := as(t, dir, "asker", "intercom", "ask", "tw1", "which branch?", "--timeout", "1s").CombinedOutput()
	require.NoError(t, err, "%s", o)
	o, err = as(t, dir, "operator-boss", "intercom", "pending", "--inbox-of", "tw1", "--json").CombinedOutput()
	require.NoError(t, err, "%s", o)
	var insp teams.Inspection
	require.NoError(t, json.Unmarshal(o, &insp), "%s", o)
	require.Len(t, insp.Asks, 1)
	require.Equal(t, "which branch?", insp.Asks[0].Preview)
	o, err = as(t, dir, "operator-boss", "intercom", "pending", "--inbox-of", "tw1").CombinedOutput()
	require.NoError(t, err, "%s", o)
	require.Contains(t, string(o), "Pending asks of tw1 (read-only):\n- ask-")
	// Not the caller's worker, nor its coworker: refused as a stop of
	// another manager's worker is.
	_, err = as(t, dir, "operator-boss", "intercom", "pending", "--inbox-of", "asker").CombinedOutput()
	requireExit(t, err, exitConflict)
	_, err = as(t, dir, "operator-boss", "intercom", "pending", "--inbox-of", "tw1", "--mark-read").CombinedOutput()
	requireExit(t, err, exitUsage)
	_, err = as(t, dir, "someone-else", "intercom", "pending", "--inbox-of", "tw1").CombinedOutput()
	requireExit(t, err, exitConflict)

	// Adoption: another manager takes tw1 over.
	o, err = teamFleet(t, dir, bin, "operator-heir", "adopt", "tw1")
	require.NoError(t, err, "%s", o)
	managers["tw1"] = "operator-heir"
	require.Eventually(t, func() bool {
		w1 = workerTeam("tw1")
		return w1 != nil && w1.Manager != nil && w1.Manager.Target == "operator-heir"
	}, 20*time.Second, 50*time.Millisecond, "tw1's team after adoption: %+v", w1)
	require.Empty(t, w1.Coworkers, "tw2 stays with the old manager")
	require.Eventually(t, func() bool {
		w2 := workerTeam("tw2")
		return w2 != nil && len(w2.Coworkers) == 0
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, "operator-heir", viewWorkerOf(t, readView(t, p), "tw1")["managerSessionId"])
	checkWithTypeScriptReaders(t, dir, "tw1", map[string]string{"AGENT_INTERCOM_WORKER_ID": "tw1"}, "operator-heir", nil)
	heir := teamOf(t, dir, "operator-heir")
	require.True(t, heir.Self.IsManager)
	require.Equal(t, "tw1", heir.Coworkers[0].ID)

	// doctor says whose the view is.
	o, err = teamFleet(t, dir, bin, "operator-boss", "doctor", "--json")
	require.NoError(t, err, "%s", o)
	require.Contains(t, string(o), "agent-fleet's view of 2 live workers")

	// Stopping a worker drops it from the view.
	o, err = teamFleet(t, dir, bin, "operator-heir", "stop", "tw1")
	require.NoError(t, err, "%s", o)
	delete(managers, "tw1")
	require.Len(t, readView(t, p).Workers, 1)
}

type workersView struct {
	Version int              `json:"version"`
	Writer  string           `json:"writer"`
	Workers []map[string]any `json:"workers"`
}

func readView(t *testing.T, p intercom.Paths) workersView {
	t.Helper()
	data, err := os.ReadFile(fleet.WorkersViewPath(p))
	require.NoError(t, err)
	var v workersView
	require.NoError(t, json.Unmarshal(data, &v))
	require.Equal(t, 1, v.Version)
	require.Equal(t, "agent-fleet", v.Writer)
	for _, w := range v.Workers {
		require.Equal(t, true, w["owned"])
		require.Equal(t, w["id"], w["intercomTarget"])
		require.Contains(t, []any{"provisioning", "running", "stopping"}, w["state"])
		require.Regexp(t, fleet.RunIDPattern, w["runId"])
	}
	return v
}

func viewWorkerOf(t *testing.T, v workersView, id string) map[string]any {
	t.Helper()
	for _, w := range v.Workers {
		if w["id"] == id {
			return w
		}
	}
	t.Fatalf("%s is not in the view", id)
	return nil
}

// checkWithTypeScriptReaders resolves self's team from the view with the
// Pi and Claude adapters' own intercom_team code (the interop checkout of
// the reference, /work/interop or $AGENT_FLEET_INTEROP; skipped where it is
// absent) and checks the manager and coworkers they find.
func checkWithTypeScriptReaders(t *testing.T, dir, self string, env map[string]string, manager string, coworkers []string) {
	t.Helper()
	interop := os.Getenv("AGENT_FLEET_INTEROP")
	if interop == "" {
		interop = "/work/interop"
	}
	tsx := filepath.Join(interop, "node_modules", ".bin", "tsx")
	if _, err := os.Stat(tsx); err != nil {
		t.Logf("TypeScript readers not checked: no %s", tsx)
		return
	}
	for _, module := range []string{"pi/team.ts", "claude/claude/team.ts"} {
		script := filepath.Join(t.TempDir(), "resolve.mts")
		require.NoError(t, os.WriteFile(script, []byte(`import { resolveIntercomTeam } from "`+filepath.Join(interop, module)+`";
const [agentDir, selfId, env] = process.argv.slice(2);
console.log(JSON.stringify(await resolveIntercomTeam({ selfId, agentDir, env: JSON.parse(env), sessions: [] })));
`), 0o600))
		envJSON, _ := json.Marshal(env)
		cmd := exec.Command(tsx, script, dir, self, string(envJSON))
		cmd.Dir = interop
		out, err := cmd.Output()
		require.NoError(t, err, "%s: %s", module, out)
		var team teams.Team
		require.NoError(t, json.Unmarshal(out, &team), "%s: %s", module, out)
		require.Equal(t, teams.SourceOrchestrator, team.Source, module)
		require.Equal(t, manager, team.Manager.Target, module)
		var ids []string
		for _, c := range team.Coworkers {
			ids = append(ids, c.ID)
		}
		require.ElementsMatch(t, coworkers, ids, module)
	}
}
