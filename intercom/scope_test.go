package intercom_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

const (
	scopeA = "Scope_AAAAAAAAAA_team"
	scopeB = "Scope_BBBBBBBBBB_team"
)

func ids(t *testing.T, s *intercom.Session) []string {
	t.Helper()
	res, err := s.List(ctx, intercom.ListRequest{IncludeSelf: true})
	require.NoError(t, err)
	var out []string
	for _, v := range res.Sessions {
		out = append(out, v.ID)
	}
	return out
}

func scoped(scope string) func(*intercom.SessionConfig) {
	return func(c *intercom.SessionConfig) { c.Identity.Scope = scope }
}

// SwitchScope re-registers in place: the same id, inbox and pending asks,
// now visible only to the new scope; the old scope sees it leave.
func TestSwitchScopeInPlace(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha", func(c *intercom.SessionConfig) { c.Reconnect = true })
	u := open(t, p, "unscoped", "Unscoped")
	inA := open(t, p, "team-a", "TeamA", scoped(scopeA))
	inB := open(t, p, "team-b", "TeamB", scoped(scopeB))

	// Something waits in alpha's inbox before the switch.
	res, err := u.Send(ctx, intercom.SendRequest{To: "alpha", Text: "before"})
	require.NoError(t, err)
	require.True(t, res.OK)
	ask, err := u.Ask(ctx, intercom.AskRequest{To: "alpha", Text: "still there?", Wait: 100 * time.Millisecond, OnTimeout: intercom.DeferOnTimeout})
	require.NoError(t, err)
	require.True(t, ask.Pending)
	require.ElementsMatch(t, []string{"alpha", "unscoped"}, ids(t, u))

	require.NoError(t, a.SwitchScope(ctx, scopeA))
	require.Equal(t, scopeA, a.Client().Identity().Scope)
	require.ElementsMatch(t, []string{"alpha", "team-a"}, ids(t, a))
	require.ElementsMatch(t, []string{"alpha", "team-a"}, ids(t, inA))
	require.ElementsMatch(t, []string{"unscoped"}, ids(t, u), "the old scope no longer lists it")
	pend, err := a.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 2, "the inbox stays")
	require.Len(t, pend.Asks, 1)
	rep, err := a.Reply(ctx, intercom.ReplyRequest{Text: "yes", AskID: pend.Asks[0].AskID})
	require.NoError(t, err)
	require.True(t, rep.OK, "the ask edge crosses scopes by exact id: %+v", rep)

	// Names resolve within the new scope only; exact ids still cross.
	res, err = a.Send(ctx, intercom.SendRequest{To: "TeamA", Text: "hi team"})
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	res, err = a.Send(ctx, intercom.SendRequest{To: "Unscoped", Text: "by name"})
	require.NoError(t, err)
	require.False(t, res.OK)
	require.Equal(t, "SESSION_NOT_FOUND", res.Code)
	res, err = u.Send(ctx, intercom.SendRequest{To: "alpha", Text: "by exact id"})
	require.NoError(t, err)
	require.True(t, res.OK)

	// Again, to B, then back to unscoped.
	require.NoError(t, a.SwitchScope(ctx, scopeB))
	require.ElementsMatch(t, []string{"alpha", "team-b"}, ids(t, a))
	require.ElementsMatch(t, []string{"team-a"}, ids(t, inA))
	require.ElementsMatch(t, []string{"alpha", "team-b"}, ids(t, inB))
	require.NoError(t, a.SwitchScope(ctx, ""))
	require.ElementsMatch(t, []string{"alpha", "unscoped"}, ids(t, a))
	st, err := a.Status(ctx)
	require.NoError(t, err)
	require.True(t, st.Connected)

	// An invalid scope changes nothing and never echoes the value.
	err = a.SwitchScope(ctx, "short")
	require.ErrorIs(t, err, wire.ErrInvalidScope)
	require.NotContains(t, err.Error(), "short")
	require.Equal(t, "", a.Client().Identity().Scope)
	require.ElementsMatch(t, []string{"alpha", "unscoped"}, ids(t, a))
}

// A switched session keeps its scope across a broker restart, and a switch
// made while the broker is away takes effect when it reconnects.
func TestSwitchedScopeSurvivesReconnect(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	br := startBroker(t, p)
	a := open(t, p, "alpha", "Alpha", func(c *intercom.SessionConfig) { c.Reconnect = true })
	require.NoError(t, a.SwitchScope(ctx, scopeA))
	br.Stop()
	require.Eventually(t, func() bool { return !a.Client().Connected() }, 5*time.Second, 5*time.Millisecond)
	br = startBroker(t, p)
	require.Eventually(t, a.Client().Connected, 10*time.Second, 10*time.Millisecond)
	inA := open(t, p, "team-a", "TeamA", scoped(scopeA))
	require.ElementsMatch(t, []string{"alpha", "team-a"}, ids(t, inA))

	br.Stop()
	require.Eventually(t, func() bool { return !a.Client().Connected() }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, a.SwitchScope(ctx, scopeB), "queued for the next registration")
	startBroker(t, p)
	require.Eventually(t, a.Client().Connected, 10*time.Second, 10*time.Millisecond)
	inB := open(t, p, "team-b", "TeamB", scoped(scopeB))
	require.ElementsMatch(t, []string{"alpha", "team-b"}, ids(t, inB))
}

// Without Reconnect a disconnected client cannot switch, and says so.
func TestSwitchScopeWhileClosed(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.SwitchScope(ctx, scopeA), intercom.ErrClosed)
}

// ReplayFilter drops the queued sends it refuses instead of replaying them.
func TestReplayFilterDropsRefusedEntries(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	b := open(t, p, "beta", "Beta")
	open(t, p, "gamma", "Gamma")
	o, err := intercom.OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Flush() }) // before the temp dir goes
	for _, e := range []struct{ id, to string }{{"to-beta", "beta"}, {"to-gamma", "gamma"}} {
		m := wire.Message{ID: e.id, Timestamp: 1, Text: "left behind"}
		info, err := wire.ParseMessage(m.AppendJSON(nil))
		require.NoError(t, err)
		_, err = o.Enqueue(e.to, info)
		require.NoError(t, err)
	}
	var judged []string
	a := open(t, p, "alpha", "Alpha", func(c *intercom.SessionConfig) {
		c.ReplayFilter = func(to string) bool { judged = append(judged, to); return to == "beta" }
	})
	require.Eventually(t, func() bool {
		pend, _ := b.Pending(ctx, intercom.PendingRequest{})
		return len(pend.Unread) == 1 && pend.Unread[0].MessageID == "to-beta"
	}, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		st, _ := a.Status(ctx)
		return st.Outbox == 0
	}, 5*time.Second, 10*time.Millisecond, "the refused entry is dropped, the other delivered")
	require.Equal(t, []string{"beta", "gamma"}, judged)
	require.NoError(t, a.Close(), "removals are on disk once the session is closed")
	reopened, err := intercom.OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = reopened.Flush() }) // before the temp dir goes
	require.Zero(t, reopened.Len())
}

// A target shorter than the 4-character prefix minimum that names nobody
// is not found, with a hint, rather than the broker's "Multiple sessions
// named" (it matches prefixes without a minimum and calls them names) —
// unless it is an exact id connected in another scope, which the broker
// resolves first.
func TestShortTargetPrefix(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	open(t, p, "proj-a", "")
	open(t, p, "proj-b", "")
	open(t, p, "zed-1", "")
	s := open(t, p, "sender", "")
	for to, n := range map[string]string{"pro": "2 session ids start", "z": "1 session id starts"} {
		_, err := s.Send(ctx, intercom.SendRequest{To: to, Text: "hi"})
		require.ErrorIs(t, err, intercom.ErrTargetNotFound, to)
		require.NotErrorIs(t, err, intercom.ErrAmbiguousTarget)
		require.EqualError(t, err, `target session not found: no session is named "`+to+`" or has that id; `+n+
			` with it, but an id prefix needs at least 4 characters: give more of the id`)
		_, err = s.Ask(ctx, intercom.AskRequest{To: to, Text: "hi?", Wait: time.Second})
		require.ErrorIs(t, err, intercom.ErrTargetNotFound, to)
	}
	res, err := s.Send(ctx, intercom.SendRequest{To: "proj", Text: "hi"})
	require.ErrorIs(t, err, intercom.ErrAmbiguousTarget, "4 characters are a prefix: %+v", res)

	other := open(t, p, "pr", "", scoped(scopeA))
	res, err = s.Send(ctx, intercom.SendRequest{To: "pr", Text: "across scopes"})
	require.NoError(t, err)
	require.True(t, res.OK, "an exact id in another scope: %+v", res)
	pend, err := other.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 1)
}

// A presence status set before a broker restart, or while the broker was
// gone, is what the new broker shows: every registration carries the last
// one (a worker's "needs-input" must not turn blank).
func TestPresenceSurvivesReconnect(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	br := startBroker(t, p)
	a := open(t, p, "alpha", "Alpha", func(c *intercom.SessionConfig) { c.Reconnect = true })
	require.NoError(t, a.SetSummary(ctx, "needs-input: permission to run mv"))
	statusOf := func(viewer *intercom.Session) string {
		res, err := viewer.List(ctx, intercom.ListRequest{})
		require.NoError(t, err)
		for _, s := range res.Sessions {
			if s.ID == "alpha" {
				return s.Status
			}
		}
		return ""
	}
	b := open(t, p, "beta", "Beta")
	require.Eventually(t, func() bool { return statusOf(b) == "needs-input: permission to run mv" }, 5*time.Second, 10*time.Millisecond)

	br.Stop()
	require.Eventually(t, func() bool { return !a.Client().Connected() }, 5*time.Second, 5*time.Millisecond)
	br = startBroker(t, p)
	require.Eventually(t, a.Client().Connected, 10*time.Second, 10*time.Millisecond)
	c := open(t, p, "gamma", "Gamma")
	require.Equal(t, "needs-input: permission to run mv", statusOf(c), "the new broker has it from the registration")

	br.Stop()
	require.Eventually(t, func() bool { return !a.Client().Connected() }, 5*time.Second, 5*time.Millisecond)
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_ = a.SetSummary(sctx, "working · turn 4") // no broker: kept for the next registration
	cancel()
	startBroker(t, p)
	require.Eventually(t, a.Client().Connected, 10*time.Second, 10*time.Millisecond)
	d := open(t, p, "delta", "Delta")
	require.Equal(t, "working · turn 4", statusOf(d))
}
