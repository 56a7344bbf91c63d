//go:build !windows

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// named runs agent-fleet as session id with a display name.
func named(t *testing.T, dir, id, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := as(t, dir, id, args...)
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_NAME="+name)
	return cmd.CombinedOutput()
}

func listIDs(t *testing.T, dir, id string) []string {
	t.Helper()
	out, err := as(t, dir, id, "intercom", "list", "--include-self", "--json").Output()
	require.NoError(t, err, "%s", out)
	var res intercom.ListResult
	require.NoError(t, json.Unmarshal(out, &res))
	var ids []string
	for _, s := range res.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

func teamOf(t *testing.T, dir, id string, env ...string) teams.Team {
	t.Helper()
	cmd := as(t, dir, id, "team", "--json")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	var team teams.Team
	require.NoError(t, json.Unmarshal(out, &team), "%s", out)
	return team
}

// Two sessions that create and join a named team see only each other; an
// unscoped session cannot find them by name; the scope never prints.
func TestNamedTeamsWithRealProcesses(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startNamedListener(t, dir, "alpha", "Alice")
	startNamedListener(t, dir, "beta", "Bob")
	startNamedListener(t, dir, "gamma", "Gus")
	require.ElementsMatch(t, []string{"alpha", "beta", "gamma"}, listIDs(t, dir, "gamma"))

	out, err := as(t, dir, "alpha", "teams", "create", "billing").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Created team billing and joined it as manager (manager: alpha).")
	out, err = as(t, dir, "beta", "teams", "join", "billing", "--json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var joined teams.JoinResult
	require.NoError(t, json.Unmarshal(out, &joined), "%s", out)
	require.Equal(t, teams.JoinResult{OK: true, Team: "billing", Role: "member", Manager: "alpha", Moved: true}, *stripRoster(&joined))
	require.Len(t, joined.Roster.Members, 2)

	// The scope is in the store, and nowhere in any output.
	data, err := os.ReadFile(filepath.Join(dir, "intercom", "named-teams.json"))
	require.NoError(t, err)
	scope := regexp.MustCompile(`"scopeId": "([0-9a-f]{48})"`).FindStringSubmatch(string(data))
	require.Len(t, scope, 2, "%s", data)
	secret := scope[1]

	require.ElementsMatch(t, []string{"alpha", "beta"}, listIDs(t, dir, "alpha"))
	require.ElementsMatch(t, []string{"alpha", "beta"}, listIDs(t, dir, "beta"))
	require.ElementsMatch(t, []string{"gamma"}, listIDs(t, dir, "gamma"), "the unscoped session no longer sees them")

	a := teamOf(t, dir, "alpha")
	require.Equal(t, teams.SourceLiveRoster, a.Source)
	require.True(t, a.Self.IsManager)
	require.Equal(t, []teams.Member{{ID: "beta", Target: "beta", Connected: true}}, a.Coworkers)
	b := teamOf(t, dir, "beta")
	require.Equal(t, &teams.Endpoint{Target: "alpha", Connected: true}, b.Manager)
	require.Empty(t, b.Coworkers)
	out, err = as(t, dir, "beta", "team").CombinedOutput()
	require.NoError(t, err)
	require.Equal(t, "Manager: alpha [connected]\nYou: beta\nCoworkers: none\n\nYour named teams:\n\n"+
		"Team: billing\nYou: beta\nManager: alpha\nMembers:\n- Alice (alpha) [manager]\n- Bob (beta) [member]\n", string(out), "as intercom_team")

	// Inside the team names resolve; from outside they do not.
	out, err = named(t, dir, "beta", "Bob", "intercom", "send", "alice", "hi manager")
	require.NoError(t, err, "%s", out)
	out, err = named(t, dir, "gamma", "Gus", "intercom", "send", "Alice", "hello?")
	requireExit(t, err, exitNotFound)
	out, err = named(t, dir, "gamma", "Gus", "intercom", "send", "Bob", "hello?")
	requireExit(t, err, exitNotFound)

	for _, id := range []string{"alpha", "gamma"} {
		out, err = as(t, dir, id, "teams", "list").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "- billing (manager: alpha; 2 of 2 members live)")
		require.NotContains(t, string(out), secret)
	}
	out, _ = as(t, dir, "alpha", "teams", "list").CombinedOutput()
	require.Contains(t, string(out), "[joined, current]")
	out, _ = as(t, dir, "gamma", "teams", "list", "--json").CombinedOutput()
	require.NotContains(t, string(out), secret)
	require.NotContains(t, string(out), "joined")

	// A command run in the team is in its scope, with its manager.
	cmd := as(t, dir, "delta", "teams", "join", "billing", "--", "sh", "-c",
		`test "$AGENT_INTERCOM_MANAGER_TARGET" = alpha && agent-fleet intercom list --include-self --json`)
	cmd.Env = append(cmd.Env, "PATH="+binDir(t)+":"+os.Getenv("PATH"))
	out, err = cmd.Output()
	require.NoError(t, err, "%s", out)
	var inTeam intercom.ListResult
	require.NoError(t, json.Unmarshal(out, &inTeam), "%s", out)
	var seen []string
	for _, s := range inTeam.Sessions {
		seen = append(seen, s.ID)
	}
	require.ElementsMatch(t, []string{"alpha", "beta", "delta"}, seen)
	cmd = as(t, dir, "delta", "teams", "join", "billing", "--", "sh", "-c", "exit 7")
	_, err = cmd.Output()
	requireExit(t, err, 7)
	// Nor can it leave the team it was started in, bare leave included.
	cmd = as(t, dir, "delta", "teams", "join", "billing", "--", "sh", "-c", "agent-fleet teams leave; echo leave=$?")
	cmd.Env = append(cmd.Env, "PATH="+binDir(t)+":"+os.Getenv("PATH"))
	out, _ = cmd.CombinedOutput()
	require.Contains(t, string(out), "session delta was started in team billing's scope, so it cannot leave it")
	require.Contains(t, string(out), fmt.Sprintf("leave=%d", exitConflict))
	require.Contains(t, string(out), "end it, then leave (agent-fleet teams leave billing)")
	// Its membership outlives the command; once it ended, it can leave.
	out, err = as(t, dir, "delta", "teams", "leave", "billing").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = as(t, dir, "delta", "teams", "join", "billing", "--stay", "--", "true").CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "give one or the other")

	// A command that cannot run exits 3, as a spawn of it does, and
	// leaves no membership or team behind.
	before, err := as(t, dir, "zeta", "teams", "list", "--json").CombinedOutput()
	require.NoError(t, err, "%s", before)
	out, err = as(t, dir, "zeta", "teams", "join", "billing", "--", "/nonexistent/cmd").CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), "command not found")
	_, err = as(t, dir, "zeta", "teams", "create", "ghost", "--", "/nonexistent/cmd").CombinedOutput()
	requireExit(t, err, exitNotFound)
	after, err := as(t, dir, "zeta", "teams", "list", "--json").CombinedOutput()
	require.NoError(t, err, "%s", after)
	require.JSONEq(t, string(before), string(after), "zeta joined nothing and created nothing")

	// Refusals, each with its exit code.
	_, err = as(t, dir, "gamma", "teams", "create", "billing").CombinedOutput()
	requireExit(t, err, exitConflict)
	_, err = as(t, dir, "gamma", "teams", "join", "nope").CombinedOutput()
	requireExit(t, err, exitNotFound)
	_, err = as(t, dir, "gamma", "teams", "join", "bad name").CombinedOutput()
	requireExit(t, err, exitUsage)
	// Managed sessions join no named team, not even with --stay.
	for _, env := range []string{"AGENT_INTERCOM_WORKER_ID=w1", "AGENT_INTERCOM_OWNED=1", "AGENT_INTERCOM_TEAM_MANIFEST=/x/team.json"} {
		for _, args := range [][]string{{"join", "billing"}, {"join", "billing", "--stay"}, {"create", "managed"}} {
			cmd := as(t, dir, "gamma", append([]string{"teams"}, args...)...)
			cmd.Env = append(cmd.Env, env)
			out, err := cmd.CombinedOutput()
			requireExit(t, err, exitConflict)
			require.Contains(t, string(out), "cannot join or create", env)
		}
	}
	require.ElementsMatch(t, []string{"gamma"}, listIDs(t, dir, "gamma"), "nothing moved")

	// Without a holder, create and join record the membership and say
	// that nothing moved.
	out, err = as(t, dir, "epsilon", "teams", "create", "ops").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Session epsilon stays where it is")
	out, err = as(t, dir, "nobody-holds-me", "teams", "join", "ops").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Joined team ops as member (manager: epsilon).")
}

func stripRoster(r *teams.JoinResult) *teams.JoinResult {
	c := *r
	c.Roster = nil
	return &c
}

func startNamedListener(t *testing.T, dir, id, name string) {
	t.Helper()
	cmd := as(t, dir, id, "intercom", "listen", "--json")
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_NAME="+name)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s listener stderr: %s", id, stderr.String())
		}
	})
	require.Eventually(t, func() bool { return intercom.HolderAlive(intercom.NewPaths(dir), id) }, 10*time.Second, 10*time.Millisecond,
		"listen holds the session: %s", stderr.String())
}

// A stale scope in the environment is replaced, not doubled, in a
// command's environment.
func TestTeamEnv(t *testing.T) {
	t.Parallel()
	env := teams.Scope{}.Env([]string{"A=1", teams.EnvScope + "=old-scope-value-x", teams.EnvManagerTarget + "=old", "B=2"}, "boss")
	require.Equal(t, []string{"A=1", "B=2", teams.EnvScope + "=", teams.EnvManagerTarget + "=boss"}, env)
	require.False(t, strings.Contains(strings.Join(env, " "), "old"))
}

// Two agent-fleet mcp processes form a named team with intercom_join and
// then list only each other.
func TestMCPJoinWithRealProcesses(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startNamedListener(t, dir, "outsider", "Outsider")
	connect := func(id string) func(name string, args map[string]any) mcptest.Result {
		return mcptest.Caller(t, mcpProcess(t, dir, id))
	}
	a, b := connect("mcp-lead"), connect("mcp-mate")
	r := a("intercom_list", nil)
	require.Contains(t, r.Text, "outsider")

	r = a("intercom_join", map[string]any{"name": "crew", "create": true})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Created team crew and joined it as manager (manager: mcp-lead). You now see only this team's sessions; intercom_team lists them. Other team memberships are unchanged.", r.Text)
	r = b("intercom_join", nil)
	require.Contains(t, r.Text, "- crew (manager: mcp-lead; 1 of 1 member live)")
	require.NotContains(t, r.Text, "[joined]")
	r = b("intercom_join", map[string]any{"name": "crew"})
	require.False(t, r.IsError, r.Text)
	require.Subset(t, r.Structured, map[string]any{"ok": true, "team": "crew", "role": "member", "manager": "mcp-lead"})

	r = a("intercom_list", nil)
	require.Contains(t, r.Text, "mcp-mate")
	require.NotContains(t, r.Text, "outsider")
	r = b("intercom_team", nil)
	require.True(t, strings.HasPrefix(r.Text, "Manager: mcp-lead [connected]\nYou: mcp-mate\nCoworkers: none"), r.Text)
	require.Contains(t, r.Text, "\n\nYour named teams:\n\n", "as the Codex adapter's intercom_team, the rosters of the caller's named teams follow")
	require.Contains(t, r.Text[strings.Index(r.Text, "Your named teams:"):], "crew", r.Text)
	require.Len(t, r.Structured["teams"], 1, "%v", r.Structured)
	r = a("intercom_team", nil)
	require.True(t, strings.HasPrefix(r.Text, "Manager: mcp-lead [connected]\nYou: mcp-lead [manager]\nCoworkers:\n- mcp-mate target=mcp-mate [connected]"), r.Text)
	r = b("intercom_send", map[string]any{"to": "mcp-lead", "message": "in"})
	require.False(t, r.IsError, r.Text)
	require.ElementsMatch(t, []string{"outsider"}, listIDs(t, dir, "outsider"))

	// The CLI under a held id acts through the holder, which is in the team.
	require.ElementsMatch(t, []string{"mcp-lead", "mcp-mate"}, listIDs(t, dir, "mcp-mate"))
	out, err := as(t, dir, "mcp-mate", "teams", "list").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "- crew (manager: mcp-lead; 2 of 2 members live) [joined, current]")
}

// A broken TmuxDeck manifest is refused with the adapters' code and a hint
// naming the rule, never a value from the file.
func TestTeamManifestErrorsSayWhichRule(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	teamDir := filepath.Join(dir, "tmuxdeck")
	require.NoError(t, os.Mkdir(teamDir, 0o700))
	const lead = "tmuxdeck-c8f1e03a-9b4d-4c7e-81f6-a8b0c3d5e7f9"
	valid := `{"version":"tmuxdeck.team.v1","backend":"tmuxdeck","runId":"team_1a2b3c4d-5e6f-47a8-b9c0-d1e2f3a4b5c6",` +
		`"leadId":"` + lead + `","members":[{"sessionId":"` + lead + `","role":"lead"}],"createdAt":1723680000000,"capabilities":[]}`
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(teamDir, name)
		require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	for _, c := range []struct {
		path, self, want string
	}{
		{write("open.json", valid, 0o644), lead, "ERR_TEAM_MANIFEST_UNAVAILABLE: the manifest must be mode 0600 and owned by you"},
		{write("team.json", valid, 0o600), "someone-else", "ERR_TEAM_MANIFEST_INVALID: the manifest lists no member with this session id"},
		{write("old.json", strings.Replace(valid, "team.v1", "team.v0", 1), 0o600), lead, `ERR_TEAM_MANIFEST_INVALID: version must be "tmuxdeck.team.v1"`},
		{"team.json", lead, "ERR_TEAM_MANIFEST_INVALID: the manifest path must be absolute"},
	} {
		cmd := as(t, dir, c.self, "team")
		cmd.Env = append(cmd.Env, "AGENT_INTERCOM_TEAM_MANIFEST="+c.path)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s", out)
		require.Contains(t, string(out), c.want)
		require.NotContains(t, string(out), teamDir, "no path in the error")
		require.NotContains(t, string(out), "team.v0", "no value in the error")
	}
	cmd := as(t, dir, lead, "team")
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_TEAM_MANIFEST="+filepath.Join(teamDir, "team.json"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "You: "+lead+" [manager]")
}

// Task teams through real agent-fleet mcp processes, as the Codex
// adapter's intercom_join has them: the manager adds a connected session
// by name and nobody moves; messages carry the team, replies keep it;
// members leave, the manager cannot.
func TestMCPTaskTeamsWithRealProcesses(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startNamedListener(t, dir, "outsider", "Outsider")
	lead := mcptest.Caller(t, mcpProcess(t, dir, "task-lead"))
	mate := mcptest.Caller(t, mcpProcess(t, dir, "task-mate"))
	var texts []string
	call := func(c func(string, map[string]any) mcptest.Result, tool string, args map[string]any) mcptest.Result {
		r := c(tool, args)
		texts = append(texts, r.Text)
		return r
	}
	require.Contains(t, call(mate, "intercom_list", nil).Text, "task-lead")

	for _, bad := range []any{"task-mate", []any{nil}, []any{""}} {
		r := call(lead, "intercom_join", map[string]any{"name": "launch", "create": true, "members": bad})
		require.True(t, r.IsError, "%v: %s", bad, r.Text)
	}
	r := call(lead, "intercom_join", map[string]any{"name": "launch", "create": true, "members": []any{"task-mate"}, "work": "Launch page"})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "Other team memberships are unchanged")
	require.Subset(t, r.Structured, map[string]any{"ok": true, "team": "launch", "role": "manager"})
	require.Contains(t, call(lead, "intercom_list", nil).Text, "outsider", "a task team moves nobody")

	r = call(mate, "intercom_team", map[string]any{"team": "launch"})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Team: launch\nWork: Launch page\nYou: task-mate\nManager: task-lead\nMembers:\n- task-lead (task-lead) [manager]\n- task-mate (task-mate) [member]", strings.SplitN(r.Text, "\n\n[", 2)[0])
	require.True(t, call(lead, "intercom_team", map[string]any{"team": "nope"}).IsError)

	r = call(lead, "intercom_send", map[string]any{"to": "team:launch", "message": "kick-off"})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "Message to team:launch: delivered to 1 of 1.\n- task-mate: delivered")
	r = call(mate, "intercom_pending", nil)
	require.Regexp(t, `^- task-lead \[Team: launch\] \[contextId: ctx-[A-Za-z0-9_-]{43}\]: kick-off`, r.Text)
	msgs := r.Structured["unread_messages"].([]any)
	require.Len(t, msgs, 1)
	entry := msgs[0].(map[string]any)
	require.Equal(t, "launch", entry["team"])
	r = call(mate, "intercom_reply", map[string]any{"message": "on it", "contextId": entry["contextId"], "team": "other"})
	require.True(t, r.IsError, "a reply cannot change its team: %s", r.Text)
	r = call(mate, "intercom_reply", map[string]any{"message": "on it", "contextId": entry["contextId"]})
	require.False(t, r.IsError, r.Text)
	r = call(lead, "intercom_pending", nil)
	require.Contains(t, r.Text, "- task-mate [Team: launch]")
	require.Contains(t, r.Text, "on it")
	r = call(mate, "intercom_status", nil)
	require.Contains(t, r.Text, "Teams: launch (member)")

	r = call(lead, "intercom_join", map[string]any{"name": "launch", "leave": true})
	require.True(t, r.IsError)
	require.Contains(t, r.Text, "delete the team instead")
	r = call(mate, "intercom_join", map[string]any{"name": "launch", "leave": true})
	require.False(t, r.IsError, r.Text)
	require.Equal(t, "Left team launch.", r.Text)
	r = call(lead, "intercom_send", map[string]any{"to": "team:launch", "message": "anyone?"})
	require.True(t, r.IsError, "no other member left: %s", r.Text)

	for _, text := range texts {
		require.False(t, regexp.MustCompile(`[0-9a-f]{48}`).MatchString(text), text)
	}
}

// A Boss participant whose session a listen holds sends, asks and replies
// to its teammates through that holder, which applies the contract with
// the live sessions it may see; discovery stays refused.
func TestBossSessionHeldByListenSends(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	const run, suffix = "boss-1a2b3c4d-5e6f-47a8-b9c0-d1e2f3a4b5c6", "d1e2f3a4b5c6"
	manager, worker := "boss-manager-"+suffix, "boss-worker-"+suffix
	boss := func(role string, args ...string) *exec.Cmd {
		cmd := as(t, dir, "boss-"+role+"-"+suffix, args...)
		cmd.Env = append(cmd.Env, "AGENT_INTERCOM_BOSS_RUN_ID="+run, "AGENT_INTERCOM_BOSS_ROLE="+role,
			"AGENT_INTERCOM_BOSS_CONTROLLER_TARGET=controller-x", "AGENT_INTERCOM_BOSS_MANAGER_TARGET="+manager,
			`AGENT_INTERCOM_BOSS_TEAM_TARGETS=["`+manager+`","`+worker+`","boss-scout-`+suffix+`","boss-adversary-`+suffix+`"]`,
			"AGENT_INTERCOM_BOSS_VISIBILITY=team-only")
		return cmd
	}
	p := intercom.NewPaths(dir)
	for _, role := range []string{"manager", "worker"} {
		l := boss(role, "intercom", "listen")
		require.NoError(t, l.Start())
		t.Cleanup(func() { _ = l.Process.Kill(); _ = l.Wait() })
	}
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, manager) && intercom.HolderAlive(p, worker) }, 20*time.Second, 10*time.Millisecond)
	out, err := boss("manager", "intercom", "send", worker, "m to w").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "Message sent to "+worker+".\n", string(out))
	out, err = boss("manager", "intercom", "ask", worker, "ready?", "--timeout", "1s").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = boss("worker", "intercom", "reply", "ready").CombinedOutput()
	require.NoError(t, err, "%s", out)
	// A one-shot of a shell without the contract acts through the holder,
	// whose guard applies it.
	out, err = as(t, dir, worker, "intercom", "send", manager, "w to m").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "Message sent to "+manager+".\n", string(out))
	out, err = as(t, dir, worker, "intercom", "send", "boss-scout-"+suffix, "w to s").CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), "BOSS_TEAM_TARGET_NOT_CONNECTED")
	out, err = boss("manager", "intercom", "send", "outsider", "m to o").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "BOSS_TEAM", "the holder's guard still refuses a target outside the team")
	out, err = boss("manager", "intercom", "list").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "BOSS_TEAM_SCOPE_DENIED")
	// A teammate that is not connected is not found, as any target is.
	out, err = boss("manager", "intercom", "send", "boss-scout-"+suffix, "m to s").CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), "BOSS_TEAM_TARGET_NOT_CONNECTED")

	// A contract that is not usable refuses everything, whoami and history
	// included (deny-all).
	for _, args := range [][]string{{"intercom", "whoami"}, {"intercom", "history"}, {"intercom", "status"}} {
		cmd := as(t, dir, worker, args...)
		cmd.Env = append(cmd.Env, "AGENT_INTERCOM_BOSS_ROLE=worker")
		out, err = cmd.CombinedOutput()
		require.Error(t, err, "%v: %s", args, out)
		require.Contains(t, string(out), "BOSS_TEAM_METADATA_INVALID", args)
	}
}
