//go:build !windows

package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/teams"
)

// startTestBroker runs a broker in this process on p until the test ends.
func startTestBroker(t *testing.T, p intercom.Paths) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = broker.ListenAndServe(ctx, broker.Config{Paths: p, IdleExit: -1, TrustedLocal: true})
	}()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool {
		h, _ := intercom.ProbeBroker(context.Background(), p)
		return h == intercom.Compatible
	}, 5*time.Second, 5*time.Millisecond)
}

// connectMCP serves server to a fresh in-memory MCP client.
func connectMCP(t *testing.T, server *mcp.Server) func(name string, args map[string]any) toolResult {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return toolCaller(t, cs)
}

// toolCaller calls tools on an MCP client session and decodes the results.
func toolCaller(t *testing.T, cs *mcp.ClientSession) func(name string, args map[string]any) toolResult {
	return func(name string, args map[string]any) toolResult {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		return decodeResult(t, res)
	}
}

// openTestMCP opens the MCP session of the process environment through
// openSessionForMCP and serves it with the team tools.
func openTestMCP(t *testing.T) (*mcpSession, *mcp.Server) {
	t.Helper()
	log := newLogger(io.Discard, "error")
	ms, err := openSessionForMCP(context.Background(), log, "", false)
	require.NoError(t, err)
	t.Cleanup(ms.stop)
	server := newMCPServer(ms.ops, log)
	addTeamTools(server, ms.ops, ms.team)
	return ms, server
}

func toolNames(t *testing.T, server *mcp.Server) []string {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
	}
	return names
}

// registerWorkers records live workers of manager in the registry of p.
func registerWorkers(t *testing.T, p intercom.Paths, manager string, ids ...string) *fleet.Registry {
	t.Helper()
	ctx := context.Background()
	reg, err := fleet.OpenRegistry(ctx, fleet.RegistryPath(p))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	for _, id := range ids {
		w := &fleet.Worker{ID: id, Kind: "exec", Role: "builder", Manager: manager, FirstManager: manager, Command: []string{"/bin/true"}}
		require.NoError(t, reg.Reserve(ctx, w))
		_, err := reg.Update(ctx, w.ID, w.RunID, func(r *fleet.Worker) error { r.State = fleet.StateRunning; return nil })
		require.NoError(t, err)
	}
	return reg
}

// The MCP team tools of a manager of fleet workers: its team, a read-only
// look at a connected worker's pending asks, and named teams.
func TestMCPTeamTools(t *testing.T) {
	// A join sets these in the process environment (for what the holder
	// starts later); t.Setenv restores them when the test ends.
	t.Setenv(teams.EnvScope, "")
	t.Setenv(teams.EnvManagerTarget, "")
	p := intercom.NewPaths(shortDir(t))
	startTestBroker(t, p)
	registerWorkers(t, p, "boss", "w1", "w2")
	boss := sessionFor(t, p, "boss")
	sessionFor(t, p, "w1")
	asker := sessionFor(t, p, "asker")
	ask, err := asker.Ask(context.Background(), intercom.AskRequest{To: "w1", Text: "which  branch\nshould I use?", Wait: 50 * time.Millisecond, OnTimeout: intercom.DeferOnTimeout})
	require.NoError(t, err)
	require.True(t, ask.Pending)

	st, err := newSessionTeam(p, boss.Client().Identity())
	require.NoError(t, err)
	t.Cleanup(st.close)
	ops, _ := st.hold(p, boss, newLogger(io.Discard, "error"))
	server := newMCPServer(ops, newLogger(io.Discard, "error"))
	addTeamTools(server, ops, st)
	require.Subset(t, toolNames(t, server), []string{"intercom_team", "intercom_join", "intercom_list", "intercom_pending"})
	call := connectMCP(t, server)

	r := call("intercom_team", nil)
	require.False(t, r.isError, r.text)
	require.Equal(t, "Manager: boss [connected]\nYou: boss [manager]\nCoworkers:\n"+
		"- w1 target=w1 (exec, builder, running) [connected]\n- w2 target=w2 (exec, builder, running) [not connected]", r.text)
	require.Equal(t, "orchestrator", r.structured["source"])
	require.Equal(t, map[string]any{"id": "boss", "isManager": true}, r.structured["self"])

	r = call("intercom_pending", map[string]any{"session": "w1"})
	require.False(t, r.isError, r.text)
	require.Regexp(t, `^Pending asks of w1 \(read-only\):\n- ask-\S+ · Asker · \d+s ago · async · which branch should I use\?$`, r.text)
	require.Equal(t, "w1", r.structured["inboxSessionId"])
	askID := r.structured["asks"].([]any)[0].(map[string]any)["askId"].(string)
	r = call("intercom_pending", map[string]any{"session": "w1", "askId": askID})
	require.False(t, r.isError, r.text)
	require.Contains(t, r.text, "Inbox: w1\nFrom: Asker\n\nwhich  branch\nshould I use?")
	for _, target := range []string{"w2", "asker", "W1", "nobody"} {
		r = call("intercom_pending", map[string]any{"session": target})
		require.True(t, r.isError, target)
		require.Contains(t, r.text, "inspection denied", target)
	}
	r = call("intercom_pending", map[string]any{"session": "boss"})
	require.False(t, r.isError, "its own inbox is the usual pending")

	// Named teams: list, create, join errors.
	r = call("intercom_join", nil)
	require.False(t, r.isError, r.text)
	require.Equal(t, "No named teams. Create one with intercom_join({ name, create: true }).", r.text)
	r = call("intercom_join", map[string]any{"name": "ops", "create": true})
	require.False(t, r.isError, r.text)
	require.Equal(t, map[string]any{"ok": true, "team": "ops", "role": "manager", "manager": "boss"}, r.structured)
	r = call("intercom_join", map[string]any{})
	require.Contains(t, r.text, "- ops (manager: boss) [joined]")
	r = call("intercom_join", map[string]any{"name": "nope"})
	require.True(t, r.isError)
	r = call("intercom_join", map[string]any{"create": true})
	require.True(t, r.isError)

	// The workers.json view was written by the registry writes above.
	data, err := os.ReadFile(fleet.WorkersViewPath(p))
	require.NoError(t, err)
	var view struct {
		Version int              `json:"version"`
		Writer  string           `json:"writer"`
		Workers []map[string]any `json:"workers"`
	}
	require.NoError(t, json.Unmarshal(data, &view))
	require.Equal(t, 1, view.Version)
	require.Equal(t, "agent-fleet", view.Writer)
	require.Len(t, view.Workers, 2)
	require.Equal(t, map[string]any{"id": "w1", "runId": view.Workers[0]["runId"], "owned": true, "managerSessionId": "boss",
		"intercomTarget": "w1", "state": "running", "harness": "exec", "role": "builder"}, view.Workers[0])

	// A worker is no manager: its intercom_pending with session is refused
	// (last: the environment it sets is the whole process's).
	w2 := sessionFor(t, p, "w2")
	wst, err := newSessionTeam(p, w2.Client().Identity())
	require.NoError(t, err)
	t.Cleanup(wst.close)
	wops, _ := wst.hold(p, w2, newLogger(io.Discard, "error"))
	wserver := newMCPServer(wops, newLogger(io.Discard, "error"))
	addTeamTools(wserver, wops, wst)
	t.Setenv(teams.EnvWorkerID, "w2")
	wcall := connectMCP(t, wserver)
	r = wcall("intercom_team", nil)
	require.False(t, r.isError, r.text)
	require.Equal(t, "Manager: boss [connected]\nYou: w2\nCoworkers:\n- w1 target=w1 (exec, builder, running) [connected]", r.text)
	r = wcall("intercom_pending", map[string]any{"session": "w1"})
	require.True(t, r.isError)
	r = wcall("intercom_join", map[string]any{"name": "ops", "create": true})
	require.True(t, r.isError, "a fleet worker cannot join")
	require.Contains(t, r.text, "cannot join")

}

const (
	tBossRun = "boss-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	tSuffix  = "9e0f1a2b3c4d"
)

func setBossEnv(t *testing.T, role, visibility string) {
	t.Helper()
	t.Setenv(teams.EnvBossRunID, tBossRun)
	t.Setenv(teams.EnvBossRole, role)
	t.Setenv(teams.EnvBossController, "boss-controller")
	t.Setenv(teams.EnvBossManager, "boss-manager-"+tSuffix)
	t.Setenv(teams.EnvBossTeam, `["boss-manager-`+tSuffix+`","boss-worker-`+tSuffix+`","boss-scout-`+tSuffix+`","boss-adversary-`+tSuffix+`"]`)
	if visibility != "" {
		t.Setenv(teams.EnvBossVisibility, visibility)
	}
}

// An MCP server under a team-only Boss contract, through the real
// openMCPSession: no intercom_list, exact teammate ids only, outsiders'
// messages rejected before the inbox, the outbox not replayed.
func TestMCPBossTeamOnly(t *testing.T) {
	dir := shortDir(t)
	p := intercom.NewPaths(dir)
	startTestBroker(t, p)
	t.Setenv("PI_CODING_AGENT_DIR", dir)
	self, manager := "boss-worker-"+tSuffix, "boss-manager-"+tSuffix
	t.Setenv(intercom.SessionIDEnv, self)
	setBossEnv(t, "worker", "")
	mgr := sessionFor(t, p, manager)
	outsider := sessionFor(t, p, "outsider")

	// Left in the outbox by an earlier run: dropped, never replayed.
	o, err := intercom.OpenOutbox(p, self)
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Flush() }) // before the temp dir goes
	m := wire.Message{ID: "stale", Timestamp: 1, Text: "from before"}
	info, err := wire.ParseMessage(m.AppendJSON(nil))
	require.NoError(t, err)
	_, err = o.Enqueue(manager, info)
	require.NoError(t, err)

	_, server := openTestMCP(t)
	names := toolNames(t, server)
	require.NotContains(t, names, "intercom_list")
	require.Contains(t, names, "intercom_team")
	call := connectMCP(t, server)

	r := call("intercom_status", nil)
	require.False(t, r.isError, r.text)
	require.Zero(t, r.structured["queued_outbound"])
	pend, err := mgr.Pending(context.Background(), intercom.PendingRequest{})
	require.NoError(t, err)
	require.Empty(t, pend.Unread, "the stale outbox entry was not replayed")

	r = call("intercom_send", map[string]any{"to": manager, "message": "report"})
	require.False(t, r.isError, r.text)
	for _, to := range []string{"outsider", "boss-controller", "Boss-Manager-" + tSuffix, "boss-manager"} {
		r = call("intercom_send", map[string]any{"to": to, "message": "leak"})
		require.True(t, r.isError, to)
		require.Contains(t, r.text, "BOSS_TEAM_SCOPE_DENIED", to)
	}
	r = call("intercom_send", map[string]any{"to": "boss-scout-" + tSuffix, "message": "hi"})
	require.True(t, r.isError)
	require.Contains(t, r.text, "BOSS_TEAM_TARGET_NOT_CONNECTED")

	res, err := outsider.Send(context.Background(), intercom.SendRequest{To: self, Text: "psst"})
	require.NoError(t, err)
	require.False(t, res.OK)
	require.True(t, res.Accepted)
	require.Equal(t, "CONFLICTING_MESSAGE_ID", res.Code)
	require.Contains(t, res.Reason, "BOSS_TEAM_SCOPE_DENIED: ")
	res, err = mgr.Send(context.Background(), intercom.SendRequest{To: self, Text: "task"})
	require.NoError(t, err)
	require.True(t, res.OK)
	r = call("intercom_pending", nil)
	require.Equal(t, "- Boss-manager-9e0f1a2b3c4d: task", r.text, "only the teammate's message is in the inbox")

	r = call("intercom_team", nil)
	require.False(t, r.isError, r.text)
	require.True(t, strings.HasPrefix(r.text, "Manager: "+manager+" [connected]\nYou: "+self+"\nCoworkers: none"), r.text)
	r = call("intercom_join", map[string]any{"name": "ops", "create": true})
	require.True(t, r.isError, "a Boss participant cannot join a named team")
}

// A Boss contract that names another session, or is broken, denies all:
// the session never registers and every tool says why.
func TestMCPBossUnusable(t *testing.T) {
	dir := shortDir(t)
	p := intercom.NewPaths(dir)
	startTestBroker(t, p)
	t.Setenv("PI_CODING_AGENT_DIR", dir)
	t.Setenv(intercom.SessionIDEnv, "impostor")
	setBossEnv(t, "worker", "")
	watcher := sessionFor(t, p, "watcher")
	_, server := openTestMCP(t)
	call := connectMCP(t, server)
	for _, tool := range []string{"intercom_list", "intercom_status", "intercom_pending"} {
		r := call(tool, nil)
		require.True(t, r.isError, tool)
		require.Contains(t, r.text, "BOSS_TEAM_METADATA_INVALID", tool)
	}
	r := call("intercom_send", map[string]any{"to": "watcher", "message": "x"})
	require.True(t, r.isError)
	r = call("intercom_whoami", nil)
	require.False(t, r.isError)
	list, err := watcher.List(context.Background(), intercom.ListRequest{})
	require.NoError(t, err)
	require.Empty(t, list.Sessions, "never registered")

	t.Setenv(intercom.SessionIDEnv, "boss-worker-"+tSuffix)
	t.Setenv(teams.EnvBossVisibility, "everyone")
	ms2, _ := openTestMCP(t)
	_, err = ms2.ops.Send(context.Background(), intercom.SendRequest{To: "watcher", Text: "x"})
	require.ErrorIs(t, err, teams.ErrBossDenied)
}
