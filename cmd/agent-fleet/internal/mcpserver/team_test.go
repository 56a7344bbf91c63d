//go:build !windows

package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/teams"
)

// openTestMCP opens the MCP session of the process environment through
// openSession and serves it with the team tools.
func openTestMCP(t *testing.T) (*mcpSession, *mcp.Server) {
	t.Helper()
	ms, err := openSession(context.Background(), testFactory(), discard, ServeOptions{})
	require.NoError(t, err)
	t.Cleanup(ms.stop)
	return ms, New(ms.ops, Options{Team: ms.team})
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
	reg := fleettest.RecordWorkers(t, p, "boss", "w1", "w2")
	boss := sessionFor(t, p, "boss")
	sessionFor(t, p, "w1")
	asker := sessionFor(t, p, "asker")
	ask, err := asker.Ask(context.Background(), intercom.AskRequest{To: "w1", Text: "which  branch\nshould I use?", Wait: 50 * time.Millisecond, OnTimeout: intercom.DeferOnTimeout})
	require.NoError(t, err)
	require.True(t, ask.Pending)

	st, release, err := testFactory().SessionTeam(p, boss.Client().Identity())
	require.NoError(t, err)
	t.Cleanup(release)
	ops, _ := st.Hold(p, boss, discard)
	server := New(ops, Options{Team: st})
	require.Subset(t, mcptest.ToolNames(t, server), []string{"intercom_team", "intercom_join", "intercom_list", "intercom_pending"})
	call := mcptest.Caller(t, mcptest.Connect(t, server))

	r := call("intercom_team", nil)
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Manager: boss [connected]\nYou: boss [manager]\nCoworkers:\n"+
		"- w1 target=w1 (exec, builder, running) [connected]\n- w2 target=w2 (exec, builder, running) [not connected]", r.Text)
	require.Equal(t, "orchestrator", r.Structured["source"])
	require.Equal(t, map[string]any{"id": "boss", "isManager": true}, r.Structured["self"])
	// A paused worker shows paused, as in list, not its registry state.
	paused, err := reg.Get(context.Background(), "w2")
	require.NoError(t, err)
	_, err = reg.Update(context.Background(), "w2", paused.RunID, func(w *fleet.Worker) error { w.FrozenAt = time.Now(); return nil })
	require.NoError(t, err)
	r = call("intercom_team", nil)
	require.Contains(t, r.Text, "- w2 target=w2 (exec, builder, paused) [not connected]")
	require.Equal(t, "paused", r.Structured["coworkers"].([]any)[1].(map[string]any)["state"])

	// The asker's deferral reaches w1's inbox file a moment after its ask
	// returned: the ask is pending at once, marked async once written.
	pending := regexp.MustCompile(`^Pending asks of w1 \(read-only\):\n- ask-\S+ · Asker · \d+s ago · (async · )?which branch should I use\?$`)
	for {
		r = call("intercom_pending", map[string]any{"session": "w1"})
		require.False(t, r.IsError, r.Text)
		m := pending.FindStringSubmatch(r.Text)
		require.NotNil(t, m, r.Text)
		if m[1] != "" {
			break
		}
		time.Sleep(20 * time.Millisecond) // the test's timeout is the hang guard
	}
	require.Equal(t, "w1", r.Structured["inboxSessionId"])
	askID := r.Structured["asks"].([]any)[0].(map[string]any)["askId"].(string)
	r = call("intercom_pending", map[string]any{"session": "w1", "askId": askID})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "Inbox: w1\nFrom: Asker\n\nwhich  branch\nshould I use?")
	for _, target := range []string{"w2", "asker", "W1", "nobody"} {
		r = call("intercom_pending", map[string]any{"session": target})
		require.True(t, r.IsError, target)
		require.Contains(t, r.Text, "inspection denied", target)
	}
	r = call("intercom_pending", map[string]any{"session": "w1", "mark_read": true})
	require.True(t, r.IsError, "inspection is read-only: mark_read is refused, not ignored")
	require.Contains(t, r.Text, "mark_read cannot be used with session")
	require.Equal(t, map[string]any{"ok": false, "error": r.Text}, r.Structured)
	r = call("intercom_pending", map[string]any{"session": "boss"})
	require.False(t, r.IsError, "its own inbox is the usual pending")

	// What only a teams verb said to do, a tool's text names the tool
	// for, or says plainly that only the CLI can; structuredContent keeps
	// the CLI's error.
	r = call("intercom_send", map[string]any{"to": "*", "message": "anyone?"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, `belongs to none (join one with intercom_join {name: "…"})`)
	require.Contains(t, r.Structured["error"], "(agent-fleet teams join NAME)")

	// Named teams: list, create, join errors.
	r = call("intercom_join", nil)
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "No named teams. Create one with intercom_join({ name, create: true }).", r.Text)
	r = call("intercom_join", map[string]any{"name": "ops", "create": true})
	require.False(t, r.IsError, r.Text)
	require.Subset(t, r.Structured, map[string]any{"ok": true, "team": "ops", "role": "manager", "manager": "boss"})
	require.Equal(t, map[string]any{"id": "boss", "isManager": true}, r.Structured["roster"].(map[string]any)["self"])
	r = call("intercom_join", map[string]any{})
	require.Contains(t, r.Text, "- ops (manager: boss; 1 of 1 member live) [joined, current]")
	r = call("intercom_join", map[string]any{"name": "nope"})
	require.True(t, r.IsError)
	r = call("intercom_join", map[string]any{"create": true})
	require.True(t, r.IsError)
	r = call("intercom_join", map[string]any{"name": "ops", "leave": true})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "manages team ops; delete the team instead, which no tool does: only the CLI can (agent-fleet teams delete ops)")
	_, _, err = teams.NewStore(p).Create(context.Background(), "other", "asker")
	require.NoError(t, err)
	r = call("intercom_send", map[string]any{"to": "team:other", "message": "hi"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "boss is not a member of team other (intercom_team lists yours)")
	require.NotContains(t, r.Text, "agent-fleet")

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
	wst, release2, err := testFactory().SessionTeam(p, w2.Client().Identity())
	require.NoError(t, err)
	t.Cleanup(release2)
	wops, _ := wst.Hold(p, w2, discard)
	wserver := New(wops, Options{Team: wst})
	t.Setenv(teams.EnvWorkerID, "w2")
	wcall := mcptest.Caller(t, mcptest.Connect(t, wserver))
	r = wcall("intercom_team", nil)
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Manager: boss [connected]\nYou: w2\nCoworkers:\n- w1 target=w1 (exec, builder, running) [connected]", r.Text)
	r = wcall("intercom_pending", map[string]any{"session": "w1"})
	require.True(t, r.IsError)
	r = wcall("intercom_join", map[string]any{"name": "ops", "create": true})
	require.True(t, r.IsError, "a fleet worker cannot join")
	require.Contains(t, r.Text, "cannot join")

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
	names := mcptest.ToolNames(t, server)
	require.NotContains(t, names, "intercom_list")
	require.Contains(t, names, "intercom_team")
	call := mcptest.Caller(t, mcptest.Connect(t, server))

	r := call("intercom_status", nil)
	require.False(t, r.IsError, r.Text)
	require.Zero(t, r.Structured["queued_outbound"])
	pend, err := mgr.Pending(context.Background(), intercom.PendingRequest{})
	require.NoError(t, err)
	require.Empty(t, pend.Unread, "the stale outbox entry was not replayed")

	r = call("intercom_send", map[string]any{"to": manager, "message": "report"})
	require.False(t, r.IsError, r.Text)
	for _, to := range []string{"outsider", "boss-controller", "Boss-Manager-" + tSuffix, "boss-manager"} {
		r = call("intercom_send", map[string]any{"to": to, "message": "leak"})
		require.True(t, r.IsError, to)
		require.Contains(t, r.Text, "BOSS_TEAM_SCOPE_DENIED", to)
	}
	r = call("intercom_send", map[string]any{"to": "boss-scout-" + tSuffix, "message": "hi"})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "BOSS_TEAM_TARGET_NOT_CONNECTED")

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
	require.Regexp(t, `^- Boss-manager-9e0f1a2b3c4d \[contextId: ctx-[A-Za-z0-9_-]{43}\]: task$`, r.Text, "only the teammate's message is in the inbox")

	r = call("intercom_team", nil)
	require.False(t, r.IsError, r.Text)
	require.True(t, strings.HasPrefix(r.Text, "Manager: "+manager+" [connected]\nYou: "+self+"\nCoworkers: none"), r.Text)
	r = call("intercom_join", map[string]any{"name": "ops", "create": true})
	require.True(t, r.IsError, "a Boss participant cannot join a named team")
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
	call := mcptest.Caller(t, mcptest.Connect(t, server))
	for _, tool := range []string{"intercom_list", "intercom_status", "intercom_pending", "intercom_whoami"} {
		r := call(tool, nil)
		require.True(t, r.IsError, tool)
		require.Contains(t, r.Text, "BOSS_TEAM_METADATA_INVALID", tool)
	}
	r := call("intercom_send", map[string]any{"to": "watcher", "message": "x"})
	require.True(t, r.IsError)
	list, err := watcher.List(context.Background(), intercom.ListRequest{})
	require.NoError(t, err)
	require.Empty(t, list.Sessions, "never registered")

	t.Setenv(intercom.SessionIDEnv, "boss-worker-"+tSuffix)
	t.Setenv(teams.EnvBossVisibility, "everyone")
	ms2, _ := openTestMCP(t)
	_, err = ms2.ops.Send(context.Background(), intercom.SendRequest{To: "watcher", Text: "x"})
	require.ErrorIs(t, err, teams.ErrBossDenied)
}
