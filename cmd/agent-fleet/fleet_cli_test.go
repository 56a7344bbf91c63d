//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// fleetCLI runs agent-fleet fleet verbs against the shared user manager.
func fleetCLI(t *testing.T, dir string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := as(t, dir, "operator-test", args...)
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	return cmd.CombinedOutput()
}

func TestFleetCLI(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "cli-worker")
		stopBroker(t, dir)
	})
	out, err := fleetCLI(t, dir, "spawn", "--id", "cli-worker", "--role", "tester", "--json", "--", "sh", "-c",
		`agent-fleet intercom send operator-test "hello manager" || true; sleep 300`)
	require.NoError(t, err, "%s", out)
	var w output.Worker
	require.NoError(t, json.Unmarshal(out, &w), "%s", out)
	require.Equal(t, "running", w.State)
	require.Equal(t, "operator-test", w.Manager)

	out, err = fleetCLI(t, dir, "list", "--json")
	require.NoError(t, err, "%s", out)
	var list []output.Worker
	require.NoError(t, json.Unmarshal(out, &list))
	require.Len(t, list, 1)

	out, err = fleetCLI(t, dir, "status", "cli-worker", "--json")
	require.NoError(t, err, "%s", out)
	var st output.Status
	require.NoError(t, json.Unmarshal(out, &st))
	require.Equal(t, "active", st.UnitActive)
	require.GreaterOrEqual(t, st.ProcessCount, 2)
	for _, p := range st.Processes {
		require.NotContains(t, p.Name, " ", "names only, never argv")
	}

	_, err = fleetCLI(t, dir, "spawn", "--id", "cli-worker", "--", "sleep", "1")
	requireExit(t, err, exitConflict)
	// Acting as the worker from outside it is refused, saying why.
	cmd := agentFleet(t, dir, "intercom", "send", "operator-test", "from outside")
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_ID=cli-worker")
	out, err = cmd.CombinedOutput()
	requireExit(t, err, exitConflict)
	require.Contains(t, string(out), "cli-worker is the session of the fleet worker cli-worker, which only the worker's own processes may act as")
	require.NotContains(t, string(out), "start `agent-fleet intercom listen`")
	// So is listening as it: the shim holds the id for the worker's life.
	cmd = agentFleet(t, dir, "intercom", "listen")
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_ID=cli-worker")
	out, err = cmd.CombinedOutput()
	requireExit(t, err, exitConflict)
	require.Contains(t, string(out), "cli-worker is the session of the fleet worker cli-worker, which only the worker's own processes may act as")
	_, err = fleetCLI(t, dir, "status", "nobody")
	requireExit(t, err, exitNotFound)
	_, err = fleetCLI(t, dir, "spawn", "--id", "x", "--", "no-such-command-here")
	requireExit(t, err, exitNotFound)
	_, err = fleetCLI(t, dir, "spawn", "--id", "bad id", "--", "true")
	requireExit(t, err, exitUsage)

	out, err = fleetCLI(t, dir, "stop", "cli-worker")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "nothing of it is left in its cgroup")
	out, err = fleetCLI(t, dir, "logs", "cli-worker")
	require.NoError(t, err, "%s", out)

	out, err = fleetCLI(t, dir, "doctor", "--json")
	require.NoError(t, err, "%s", out)
	var doc struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name, Status string
		} `json:"checks"`
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	require.True(t, doc.OK)
	out, err = fleetCLI(t, dir, "capabilities", "--json")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"fleetBackend":"systemd-user"`)
}

func TestFleetCLIWithoutUserManager(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	cmd := as(t, dir, "op", "stop", "w1")
	cmd.Env = append(cmd.Env, "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR=")
	out, err := cmd.CombinedOutput()
	requireExit(t, err, exitUnavailable)
	require.Contains(t, string(out), "dbus-launch", "a clear message about the missing user bus")

	// A spawn whose id cannot be one is refused for that first, whatever
	// the host has.
	for id, want := range map[string]string{"": "--id is empty", "a b": `invalid worker id: "a b" does not match`} {
		cmd = as(t, dir, "op", "spawn", "--id", id, "--", "true")
		cmd.Env = append(cmd.Env, "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR=")
		out, err = cmd.CombinedOutput()
		requireExit(t, err, exitUsage)
		require.Contains(t, string(out), want)
	}
}

// Without a user bus (sudo -i, SSH without XDG_RUNTIME_DIR) the read-only
// verbs still answer from the registry and the log files, with a warning
// on stderr and liveState "unknown" in their JSON; verbs that act still
// fail with exit 6.
func TestReadOnlyVerbsWithoutUserManager(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "nobus")
		stopBroker(t, dir)
	})
	out, err := fleetCLI(t, dir, "spawn", "--id", "nobus", "--", "sh", "-c", "echo from-the-worker; sleep 300")
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool {
		out, err := fleetCLI(t, dir, "logs", "nobus")
		return err == nil && strings.Contains(string(out), "from-the-worker")
	}, 20*time.Second, 50*time.Millisecond)

	noBus := func(args ...string) (string, string, error) {
		cmd := as(t, dir, "operator-test", args...)
		cmd.Env = append(cmd.Env, "DBUS_SESSION_BUS_ADDRESS=", "XDG_RUNTIME_DIR=")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	const warning = "no systemd user manager answers"
	stdout, stderr, err := noBus("list", "--json")
	require.NoError(t, err, "%s%s", stdout, stderr)
	require.Contains(t, stderr, warning)
	var list []output.Worker
	require.NoError(t, json.Unmarshal([]byte(stdout), &list), stdout)
	require.Len(t, list, 1)
	require.Equal(t, "running", list[0].State, "the registry's last known state")
	require.Equal(t, "unknown", list[0].LiveState)

	stdout, stderr, err = noBus("list")
	require.NoError(t, err, "%s%s", stdout, stderr)
	require.Contains(t, stdout, "running (last known)")
	require.Contains(t, stderr, warning)

	stdout, stderr, err = noBus("status", "nobus", "--json")
	require.NoError(t, err, "%s%s", stdout, stderr)
	require.Contains(t, stderr, warning)
	var st output.Status
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	require.Equal(t, "unknown", st.UnitActive)
	require.Equal(t, "unknown", st.Worker.LiveState)
	stdout, _, err = noBus("status", "nobus")
	require.NoError(t, err)
	require.Contains(t, stdout, "(state unknown)")

	stdout, stderr, err = noBus("logs", "nobus", "--json")
	require.NoError(t, err, "%s%s", stdout, stderr)
	require.Contains(t, stderr, warning)
	var logs struct {
		Lines     []string `json:"lines"`
		LiveState string   `json:"liveState"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &logs), stdout)
	require.Contains(t, logs.Lines, "from-the-worker")
	require.Equal(t, "unknown", logs.LiveState)

	// usage sums the turns' records: live states do not matter to it.
	stdout, stderr, err = noBus("usage")
	require.NoError(t, err, "%s%s", stdout, stderr)
	require.NotContains(t, stderr, warning)

	_, _, err = noBus("status", "nobody")
	requireExit(t, err, exitNotFound)
	for _, args := range [][]string{{"stop", "nobus"}, {"spawn", "--id", "nobus2", "--", "true"}, {"renew", "nobus"}} {
		_, stderr, err := noBus(args...)
		requireExit(t, err, exitUnavailable)
		require.Contains(t, stderr, "dbus-launch", "%v: a clear message about the missing user bus", args)
	}
	stdout, stderr, err = noBus("list", "--json")
	require.NoError(t, err, "%s%s", stdout, stderr)
	require.Contains(t, stdout, `"state":"running"`, "the refused stop changed nothing")
}

// A command that fails at once is not reported running: spawn says it
// started and has already exited, and exits 1; one that is not on the PATH
// exits 3, as the help says. (A long grace, so that a slow machine sees
// these commands end within it.)
func TestSpawnOfACommandThatFailsAtOnce(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	env := []string{"AGENT_FLEET_READY_GRACE=1m", "PATH=" + os.Getenv("PATH")}
	run := func(args ...string) (string, error) {
		out, err := fleetAs(t, dir, "operator-test", env, args...).CombinedOutput()
		return string(out), err
	}
	out, err := run("spawn", "--id", "f1", "--", "false")
	requireExit(t, err, exitFailure)
	require.Contains(t, out, "started; it has already exited (exit 1)")
	require.NotContains(t, out, "running")
	out, err = run("spawn", "--id", "f3", "--json", "--", "sh", "-c", "exit 3")
	requireExit(t, err, exitFailure)
	var w output.Worker
	require.NoError(t, json.Unmarshal([]byte(out[:strings.IndexByte(out, '\n')]), &w), out)
	require.Equal(t, "exited", w.State, "--json prints the record beside the error")
	require.Equal(t, 3, *w.ExitStatus)
	out, err = run("spawn", "--id", "f0", "--", "true")
	require.NoError(t, err, out)
	require.Contains(t, out, "exited (exit 0)")
	require.NotContains(t, out, "pid 0")
	out, err = run("spawn", "--id", "f0j", "--json", "--", "true")
	require.NoError(t, err, out)
	w = output.Worker{}
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	require.NotZero(t, w.MainPID, "its main pid is recorded though its unit is gone: %s", out)

	_, err = run("spawn", "--id", "fx", "--", "no-such-command-here")
	requireExit(t, err, exitNotFound)
	help, err := run("spawn", "--help")
	require.NoError(t, err, help)
	require.Contains(t, help, "not executable is refused before anything starts\n(exit 3)")
	require.NotContains(t, help, "cannot be executed\nis a failed spawn (exit 1")
}

// The agent_fleet MCP tool spawns, lists, reads and stops a worker owned by
// the MCP session.
func TestMCPFleetTool(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	dir := shortDir(t)
	in := cliIn{env: withEnv(nil, append(inst.Env(), "PI_CODING_AGENT_DIR="+dir)...)}
	t.Cleanup(func() { stopBroker(t, dir) })
	s, _, _ := testStreams()
	cs := mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: in.factory(s), Caller: "mcp-manager"}))
	call := func(args map[string]any) mcptest.Result {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "agent_fleet", Arguments: args})
		require.NoError(t, err)
		return mcptest.Decode(t, res)
	}
	r := call(map[string]any{"action": "spawn", "id": "mcp-w", "command": []any{"sleep", "300"}, "env": map[string]any{"TOKEN": "x"}})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "Spawned worker mcp-w")
	require.Equal(t, "mcp-manager", r.Structured["manager"])
	r = call(map[string]any{"action": "list"})
	require.Contains(t, r.Text, "- mcp-w [running]")
	r = call(map[string]any{"action": "status", "id": "mcp-w"})
	require.Contains(t, r.Text, "Worker mcp-w (run ", "the text is status's, for people and agents")
	require.Contains(t, r.Text, "(active/running)")
	require.Equal(t, "active", r.Structured["unitActiveState"])
	r = call(map[string]any{"action": "stop", "id": "nope"})
	require.True(t, r.IsError)
	r = call(map[string]any{"action": "stop", "id": "mcp-w"})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Stopped mcp-w; nothing of it is left in its cgroup.", r.Text)
	r = call(map[string]any{"action": "spawn"})
	require.True(t, r.IsError)
	r = call(map[string]any{"action": "fly"})
	require.True(t, r.IsError, "unknown actions are refused by the schema")
	r = call(map[string]any{"action": "spawn", "id": "p", "kind": "claude", "task": "t", "permission": "read-write"})
	require.True(t, r.IsError, "permissions are a closed set in the schema")
	require.Contains(t, r.Text, "permission")
	r = call(map[string]any{"action": "list", "permission": ""})
	require.False(t, r.IsError, "an empty permission is the harness's default, as if not given: %s", r.Text)
	r = call(map[string]any{"action": "spawn", "id": "p"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "an exec worker needs a command to run")
	require.NotContains(t, r.Text, "--", "no CLI syntax for an MCP caller")
	r = call(map[string]any{"action": "capabilities"})
	require.Contains(t, r.Text, "Workers run as systemd user services", "sentences for a model, not JSON")
	require.Equal(t, "systemd-user", r.Structured["fleetBackend"])
	time.Sleep(10 * time.Millisecond)
}

// A spawn into an agent directory whose socket paths the kernel cannot
// bind is refused at once, as the intercom verbs refuse it (exit 2, the
// path and the limit), on the CLI and in agent_fleet alike: no unit is
// started and no registry made.
func TestSpawnRefusesAnOverlongSocketPathAtOnce(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	dir := filepath.Join(shortDir(t), strings.Repeat("d", 50), strings.Repeat("e", 50))
	sock := filepath.Join(dir, "intercom", "broker.sock")
	require.Greater(t, len(sock), intercom.MaxSocketPathBytes)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "sockq-cli")
		_, _ = fleetCLI(t, dir, "stop", "sockq-mcp")
	})
	requireRefused := func(text string) {
		t.Helper()
		require.Contains(t, text, "socket path too long: "+sock)
		require.Contains(t, text, fmt.Sprintf("the limit is %d", intercom.MaxSocketPathBytes))
		require.Contains(t, text, "PI_CODING_AGENT_DIR")
		require.NotContains(t, text, "did not answer")
	}
	out, err := fleetCLI(t, dir, "spawn", "--id", "sockq-cli", "--", "true")
	requireExit(t, err, exitUsage)
	requireRefused(string(out))

	s, _, _ := testStreams()
	in := cliIn{env: withEnv(nil, append(inst.Env(), "PI_CODING_AGENT_DIR="+dir)...)}
	cs := mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: in.factory(s), Caller: "mcp-manager"}))
	r := mcptest.Caller(t, cs)("agent_fleet", map[string]any{"action": "spawn", "id": "sockq-mcp", "command": []any{"true"}})
	require.True(t, r.IsError, r.Text)
	requireRefused(r.Text)

	// Nor does any fleet verb make a registry there.
	out, err = fleetCLI(t, dir, "list", "--all", "--json")
	requireExit(t, err, exitUsage)
	requireRefused(string(out))
	require.NoFileExists(t, filepath.Join(dir, "intercom", "orchestrator", "fleet.db"), "no registry was created")
	units := exec.Command("systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", "agent-fleet-worker-sockq-*")
	units.Env = append(os.Environ(), inst.Env()...)
	got, err := units.CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.Empty(t, strings.TrimSpace(string(got)), "no unit was started")
	require.NoFileExists(t, filepath.Join(dir, "intercom", "broker.log"), "no broker was started")
}

// A worker killed with mail unread (stop --kill: its shim never closes
// its session) leaves its inbox complete in the file the TypeScript
// clients read, not in a journal beside it.
func TestKilledWorkersMailIsFoldedIntoItsInbox(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "jk", "--kill")
		stopBroker(t, dir)
	})
	out, err := fleetCLI(t, dir, "spawn", "--id", "jk", "--", "sleep", "300")
	require.NoError(t, err, "%s", out)
	for _, text := range []string{"one", "two", "three"} {
		out, err := as(t, dir, "mailer", "intercom", "send", "jk", text).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	p := intercom.NewPaths(dir)
	_, err = os.Stat(p.Inbox("jk") + ".journal")
	require.NoError(t, err, "the live worker's mail is in its inbox's journal")
	out, err = fleetCLI(t, dir, "stop", "jk", "--kill")
	require.NoError(t, err, "%s", out)
	_, err = os.Stat(p.Inbox("jk") + ".journal")
	require.ErrorIs(t, err, os.ErrNotExist, "folded by the stop")
	data, err := os.ReadFile(p.Inbox("jk"))
	require.NoError(t, err)
	for _, text := range []string{"one", "two", "three"} {
		require.Contains(t, string(data), `"text":"`+text+`"`)
	}
}

// doctor's registry check names the live worker units of this agent
// directory that have no record, never another directory's workers on
// the same user manager (stopping those, as its fix says, would end
// someone else's work).
func TestDoctorStrayUnitsAreThisAgentDirectorys(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	dir, other := shortDir(t), shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, other, "stop", "elsewhere")
		stopBroker(t, dir)
		stopBroker(t, other)
	})
	out, err := fleetCLI(t, dir, "spawn", "--id", "here", "--", "true") // this directory's registry
	require.NoError(t, err, "%s", out)
	out, err = fleetCLI(t, other, "spawn", "--id", "elsewhere", "--", "sleep", "300")
	require.NoError(t, err, "%s", out)
	registry := func() (status, detail string) {
		out, err := fleetCLI(t, dir, "doctor", "--json")
		require.NoError(t, err, "%s", out)
		var doc struct {
			Checks []struct{ Name, Status, Detail string } `json:"checks"`
		}
		require.NoError(t, json.Unmarshal(out, &doc), "%s", out)
		for _, c := range doc.Checks {
			if c.Name == "registry" {
				return c.Status, c.Detail
			}
		}
		t.Fatalf("no registry check: %s", out)
		return "", ""
	}
	status, detail := registry()
	require.Equal(t, "ok", status, detail)
	require.NotContains(t, detail, "elsewhere")

	// A worker unit of this directory that nobody recorded is one.
	m := unitstest.Connect(t, inst)
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	name := unitstest.UnitName("agent-fleet-worker-stray")
	unitstest.Cleanup(t, m, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = m.StartService(ctx, units.ServiceSpec{Name: name, Argv: []string{sleep, "300"}, Env: []string{"PI_CODING_AGENT_DIR=" + dir}})
	require.NoError(t, err)
	status, detail = registry()
	require.Equal(t, "warn", status, detail)
	require.Contains(t, detail, "1 live worker units have no record: "+name)

	// So it is when the registry was deleted under it, and doctor does
	// not create one.
	db := filepath.Join(dir, "intercom", "orchestrator", "fleet.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		require.NoError(t, os.RemoveAll(db+suffix))
	}
	status, detail = registry()
	require.Equal(t, "warn", status, detail)
	require.Contains(t, detail, db+" is missing; 1 live worker units have no record: "+name)
	require.NoFileExists(t, db)
}
