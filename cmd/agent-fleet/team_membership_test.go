//go:build !windows

package main

import (
	"encoding/json"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// teamWorld runs agent-fleet processes as named sessions of one agent
// directory and keeps everything they print, so that a test can check
// that no private scope ever appears.
type teamWorld struct {
	t       *testing.T
	dir     string
	mu      sync.Mutex
	outputs []string
	names   map[string]string
}

func newTeamWorld(t *testing.T) *teamWorld {
	w := &teamWorld{t: t, dir: shortDir(t), names: map[string]string{}}
	t.Cleanup(func() {
		// Last, after every holder's output is in.
		for _, o := range w.outputs {
			require.False(t, hex48Re.MatchString(o), "a 48-hex scope in output: %s", o)
		}
	})
	t.Cleanup(func() { stopBroker(t, w.dir) })
	return w
}

// hold starts a holder for id (a listener that leaves messages unread, so
// pending shows what arrived).
func (w *teamWorld) hold(id, name string) {
	w.t.Helper()
	w.names[id] = name
	cmd := as(w.t, w.dir, id, "intercom", "listen", "--keep-unread", "--json")
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_NAME="+name)
	out, stderr := &lockedBuffer{}, &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, stderr
	require.NoError(w.t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	w.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		w.keep(out.String() + stderr.String())
	})
	require.Eventually(w.t, func() bool { return intercom.HolderAlive(intercom.NewPaths(w.dir), id) }, 10*time.Second, 10*time.Millisecond,
		"listen holds %s: %s", id, stderr.String())
}

func (w *teamWorld) keep(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outputs = append(w.outputs, s)
}

// run runs agent-fleet as id and returns what it printed and its error.
func (w *teamWorld) run(id string, args ...string) (string, error) {
	w.t.Helper()
	cmd := as(w.t, w.dir, id, args...)
	if name := w.names[id]; name != "" {
		cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_NAME="+name)
	}
	out, err := cmd.CombinedOutput()
	w.keep(string(out))
	return string(out), err
}

func (w *teamWorld) ok(id string, args ...string) string {
	w.t.Helper()
	out, err := w.run(id, args...)
	require.NoError(w.t, err, "%s %v: %s", id, args, out)
	return out
}

func (w *teamWorld) fails(code int, id string, args ...string) string {
	w.t.Helper()
	out, err := w.run(id, args...)
	requireExit(w.t, err, code)
	return out
}

// received is the unread messages of id with this text.
func (w *teamWorld) received(id, text string) []intercom.MessageView {
	w.t.Helper()
	var res intercom.PendingResult
	require.NoError(w.t, json.Unmarshal([]byte(w.ok(id, "intercom", "pending", "--json")), &res))
	var out []intercom.MessageView
	for _, m := range res.Unread {
		if m.Text == text {
			out = append(out, m)
		}
	}
	return out
}

var hex48Re = regexp.MustCompile(`[0-9a-f]{48}`)

// A session in two named teams reaches the members of each by name and is
// reached by them, while a session in neither cannot find it by name;
// team sends reach every live member once; leave and delete work and are
// refused where they must be; no private scope is ever printed.
func TestTeamMembershipsWithRealProcesses(t *testing.T) {
	t.Parallel()
	w := newTeamWorld(t)
	w.hold("ann", "Ann")   // manages alpha
	w.hold("amy", "Amy")   // in alpha
	w.hold("ben", "Ben")   // manages beta
	w.hold("sam", "Sam")   // in alpha and beta
	w.hold("otto", "Otto") // in neither

	w.ok("ann", "teams", "create", "alpha")
	w.ok("ben", "teams", "create", "beta")
	w.ok("amy", "teams", "join", "alpha")
	w.ok("sam", "teams", "join", "alpha")
	out := w.ok("sam", "teams", "join", "beta", "--json")
	require.Contains(t, out, `"moved":true`)

	status := w.ok("sam", "intercom", "status")
	require.Contains(t, status, "Teams: alpha (member), beta (member, current)", "both memberships; the second team's scope is current")
	var st intercom.StatusResult
	require.NoError(t, json.Unmarshal([]byte(w.ok("sam", "intercom", "status", "--json")), &st))
	require.Equal(t, []intercom.TeamMembership{{Name: "alpha", Role: "member"}, {Name: "beta", Role: "member", Current: true}}, st.Teams)
	list := w.ok("sam", "teams", "list")
	require.Contains(t, list, "- alpha (manager: ann; 3 of 3 members live) [joined]\n")
	require.Contains(t, list, "- beta (manager: ben; 2 of 2 members live) [joined, current]\n")
	require.NotContains(t, w.ok("otto", "teams", "list"), "[joined")
	// An outsider learns names, managers and counts, not the members' ids
	// nor the work; a member sees the roster.
	var outside, inside []map[string]any
	require.NoError(t, json.Unmarshal([]byte(w.ok("otto", "teams", "list", "--json")), &outside))
	require.Equal(t, map[string]any{"name": "alpha", "managerSessionId": "ann", "createdAt": outside[0]["createdAt"],
		"memberCount": 3.0, "live": 3.0}, outside[0])
	require.NoError(t, json.Unmarshal([]byte(w.ok("sam", "teams", "list", "--json")), &inside))
	require.Equal(t, []any{"ann", "amy", "sam"}, inside[0]["memberSessionIds"])
	// team is intercom_team: the rosters of the named teams come after the
	// team itself, in the text and in --json.
	require.Contains(t, w.ok("sam", "team"), "\n\nYour named teams:\n\n")
	var view struct {
		Source string           `json:"source"`
		Teams  []map[string]any `json:"teams"`
	}
	require.NoError(t, json.Unmarshal([]byte(w.ok("sam", "team", "--json")), &view))
	require.Equal(t, "live_roster", view.Source)
	require.Len(t, view.Teams, 2)
	require.Equal(t, "alpha", view.Teams[0]["name"])

	// Sam reaches members of both teams by name; each message carries its
	// team.
	w.ok("sam", "intercom", "send", "Ann", "to ann across scopes")
	w.ok("sam", "intercom", "send", "Ben", "to ben in beta")
	got := w.received("ann", "to ann across scopes")
	require.Len(t, got, 1)
	require.Equal(t, "alpha", got[0].Team)
	require.Equal(t, "sam", got[0].From.ID)
	got = w.received("ben", "to ben in beta")
	require.Len(t, got, 1)
	require.Equal(t, "beta", got[0].Team)

	// Members of each reach Sam by name, from their own scopes.
	w.ok("ann", "intercom", "send", "Sam", "from ann")
	w.ok("amy", "intercom", "send", "sam", "from amy")
	w.ok("ben", "intercom", "send", "SAM", "from ben")
	for _, text := range []string{"from ann", "from amy", "from ben"} {
		require.Len(t, w.received("sam", text), 1, text)
	}
	// A session in neither team cannot, and a member of one team cannot
	// reach a member of only the other by name.
	out = w.fails(exitNotFound, "otto", "intercom", "send", "Sam", "from otto")
	require.NotContains(t, out, "from otto")
	w.fails(exitNotFound, "otto", "intercom", "send", "Ann", "from otto")
	w.fails(exitNotFound, "amy", "intercom", "send", "Ben", "from amy to ben")
	require.Empty(t, w.received("ben", "from amy to ben"))

	// A team send reaches every live member once and reports each.
	out = w.ok("sam", "intercom", "send", "--team", "alpha", "alpha notice")
	require.Contains(t, out, "Message to team:alpha: delivered to 2 of 2.")
	require.Regexp(t, `(?m)^- ann: delivered \(message \S+\)$`, out)
	require.Regexp(t, `(?m)^- amy: delivered \(message \S+\)$`, out)
	for _, id := range []string{"ann", "amy"} {
		got := w.received(id, "alpha notice")
		require.Len(t, got, 1, id)
		require.Equal(t, "alpha", got[0].Team)
	}
	require.Empty(t, w.received("ben", "alpha notice"))
	var fan intercom.SendResult
	raw := w.ok("ben", "intercom", "send", "team:beta", "beta notice", "--json")
	require.NoError(t, json.Unmarshal([]byte(raw), &fan))
	require.True(t, fan.OK)
	var top map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &top))
	require.NotContains(t, top, "messageId", "no id of its own: each recipient has one")
	require.NotContains(t, top, "targetId")
	require.Len(t, fan.Recipients, 1)
	require.Equal(t, "sam", fan.Recipients[0].TargetID)
	require.Len(t, w.received("sam", "beta notice"), 1)

	out = w.ok("sam", "intercom", "send", "team:alpha/manager", "to the manager")
	require.Contains(t, out, "delivered to 1 of 1")
	require.Len(t, w.received("ann", "to the manager"), 1)
	require.Empty(t, w.received("amy", "to the manager"))

	// * is every member of the sender's teams, each once.
	require.NoError(t, json.Unmarshal([]byte(w.ok("sam", "intercom", "send", "*", "everyone", "--json")), &fan))
	var ids, msgIDs []string
	for _, r := range fan.Recipients {
		ids, msgIDs = append(ids, r.TargetID), append(msgIDs, r.MessageID)
	}
	require.ElementsMatch(t, []string{"ann", "amy", "ben"}, ids)
	require.Len(t, map[string]bool{msgIDs[0]: true, msgIDs[1]: true, msgIDs[2]: true}, 3, "one message id per recipient")
	for _, id := range ids {
		require.Len(t, w.received(id, "everyone"), 1, id)
	}

	// Team sends are for members only; workflows do not exist here.
	out = w.fails(exitNotFound, "otto", "intercom", "send", "--team", "alpha", "let me in")
	require.Contains(t, out, "otto is not a member of team alpha")
	out = w.fails(exitNotFound, "otto", "intercom", "send", "*", "anyone?")
	require.Contains(t, out, "belongs to none")
	out = w.fails(exitUsage, "sam", "intercom", "send", "workflow:/**", "hi")
	require.Contains(t, out, "agent-fleet has no workflows")
	w.fails(exitUsage, "ann", "intercom", "send", "team:alpha/boss", "x")
	require.Empty(t, w.received("amy", "x"))

	// Leaving: bare leave is the current team, back home (unscoped).
	out = w.ok("sam", "teams", "leave")
	require.Contains(t, out, "Left team beta. The session is back in its home scope.")
	require.Contains(t, w.ok("sam", "intercom", "status"), "Teams: alpha (member)\n")
	require.Contains(t, w.ok("otto", "intercom", "list"), "Sam", "home is the unscoped roster")
	w.fails(exitNotFound, "ben", "intercom", "send", "Sam", "after leave")
	w.ok("ann", "intercom", "send", "Sam", "still in alpha")
	require.Len(t, w.received("sam", "still in alpha"), 1)
	out = w.fails(exitNotFound, "sam", "teams", "leave")
	require.Contains(t, out, "home scope; name the team to leave")
	w.ok("amy", "teams", "leave", "alpha")
	require.Contains(t, w.ok("amy", "intercom", "status"), "Teams: none")

	// Refusals: a manager does not leave, a non-member cannot, only the
	// manager deletes.
	out = w.fails(exitConflict, "ann", "teams", "leave", "alpha")
	require.Contains(t, out, "delete the team instead")
	w.fails(exitNotFound, "otto", "teams", "leave", "alpha")
	out = w.fails(exitConflict, "sam", "teams", "delete", "alpha")
	require.Contains(t, out, "only its manager may delete it")
	w.fails(exitNotFound, "ann", "teams", "delete", "nope")
	out = w.ok("ann", "teams", "delete", "alpha")
	require.Contains(t, out, "Deleted team alpha. The session is back in its home scope.")
	require.Contains(t, w.ok("sam", "intercom", "status"), "Teams: none")
	require.NotContains(t, w.ok("ben", "teams", "list"), "alpha")
}

// * reaches a member of several of the sender's teams once, for the first
// of them; a member left in the scope of a team its manager deleted leaves
// that scope with a bare teams leave.
func TestTeamStarAndADeletedTeamsScope(t *testing.T) {
	t.Parallel()
	w := newTeamWorld(t)
	w.hold("ann", "Ann")   // manages alpha and beta
	w.hold("bob", "Bob")   // in both
	w.hold("cat", "Cat")   // manages gamma
	w.hold("dan", "Dan")   // joins gamma, which is deleted under him
	w.hold("otto", "Otto") // in no team
	w.ok("ann", "teams", "create", "alpha")
	w.ok("ann", "teams", "create", "beta")
	w.ok("bob", "teams", "join", "alpha")
	w.ok("bob", "teams", "join", "beta")

	out := w.ok("ann", "intercom", "send", "*", "to all of you")
	require.Contains(t, out, "delivered to 1 of 1")
	got := w.received("bob", "to all of you")
	require.Len(t, got, 1)
	require.Equal(t, "alpha", got[0].Team, "for the first team they share")

	w.ok("cat", "teams", "create", "gamma")
	w.ok("dan", "teams", "join", "gamma")
	require.NotContains(t, w.ok("dan", "intercom", "list"), "Otto", "in gamma's scope")
	w.ok("cat", "teams", "delete", "gamma")
	out = w.ok("dan", "teams", "leave")
	require.Contains(t, out, "Left the scope of a team that was deleted. The session is back in its home scope.")
	require.Contains(t, w.ok("dan", "intercom", "list"), "Otto", "home again")
	out = w.fails(exitNotFound, "dan", "teams", "leave")
	require.Contains(t, out, "home scope; name the team to leave")
}
