//go:build !windows

package main

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/history"
)

func historyOf(t *testing.T, dir, id string, args ...string) []history.Entry {
	t.Helper()
	out, err := as(t, dir, id, append([]string{"intercom", "history", "--json"}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var es []history.Entry
	require.NoError(t, json.Unmarshal(out, &es), "%s", out)
	return es
}

// Two holders in a named team and a one-shot: every session's history has
// what it sent and received, found by text after the inbox entry was
// consumed, with the receipts it was told of — read only where an
// agent-fleet holder got the receiver's read receipt. No output carries
// the team's scope.
func TestHistoryWithReceiptsFromRealSessions(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	alpha := startListener(t, dir, "alpha") // consumes (reads) what it receives
	beta := startListener(t, dir, "beta")
	out, err := as(t, dir, "alpha", "teams", "create", "billing").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = as(t, dir, "beta", "teams", "join", "billing").CombinedOutput()
	require.NoError(t, err, "%s", out)

	// Through alpha's holder: sent, accepted, delivered; read once beta's
	// listen consumed it and its receipt came back.
	out, err = as(t, dir, "alpha", "intercom", "send", "beta", "The Migration plan is ready").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return len(beta.messages()) == 1 }, 30*time.Second, 20*time.Millisecond)
	var sent history.Entry
	require.Eventually(t, func() bool {
		es := historyOf(t, dir, "alpha", "--search", "migration PLAN")
		if len(es) != 1 {
			return false
		}
		sent = es[0]
		return sent.ReadAt != 0
	}, 30*time.Second, 50*time.Millisecond, "alpha's history never got beta's read receipt")
	require.Equal(t, "sent", sent.Direction)
	require.Equal(t, "beta", sent.Peer)
	require.Equal(t, "billing", sent.Team)
	require.Equal(t, "The Migration plan is ready", sent.Text)
	require.Equal(t, []string{"accepted", "delivered", "read"}, sent.Receipts())
	require.NotZero(t, sent.AcceptedAt)
	require.NotZero(t, sent.DeliveredAt)
	for _, m := range alpha.messages() {
		require.NotContains(t, m.Text, "read receipt", "a receipt is not a message")
	}

	// Beta's inbox no longer has it; its history does.
	out, err = as(t, dir, "beta", "intercom", "pending", "--json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var pending intercom.PendingResult
	require.NoError(t, json.Unmarshal(out, &pending))
	require.Empty(t, pending.Unread)
	got := historyOf(t, dir, "beta", "--with", "alpha", "--team", "billing")
	require.Len(t, got, 1)
	require.Equal(t, "received", got[0].Direction)
	require.Equal(t, sent.MessageID, got[0].MessageID)
	require.Equal(t, []string{"read"}, got[0].Receipts())
	require.Empty(t, historyOf(t, dir, "beta", "--search", "nothing like it"))
	require.Empty(t, historyOf(t, dir, "beta", "--team", "other"))

	// A one-shot, no holder: its own history, without a read receipt (no
	// holder of its session is there to take one).
	out, err = as(t, dir, "gamma", "intercom", "send", "alpha", "by exact id, from outside the team").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return len(alpha.messages()) == 1 }, 30*time.Second, 20*time.Millisecond)
	_, err = as(t, dir, "gamma", "intercom", "send", "gamma-peer", "nobody").CombinedOutput()
	requireExit(t, err, exitNotFound)
	g := historyOf(t, dir, "gamma")
	require.Len(t, g, 2)
	require.Equal(t, []string{"accepted", "delivered"}, g[0].Receipts())
	require.Empty(t, g[0].Team)
	require.Equal(t, []string{"failed"}, g[1].Receipts())
	require.Contains(t, g[1].Failed, "SESSION_NOT_FOUND")

	text, err := as(t, dir, "alpha", "intercom", "history").CombinedOutput()
	require.NoError(t, err, "%s", text)
	require.Regexp(t, `to beta · team billing · accepted, delivered, read:\n  The Migration plan is ready`, string(text))

	// The scope is nowhere.
	data, err := os.ReadFile(dir + "/intercom/named-teams.json")
	require.NoError(t, err)
	scope := regexp.MustCompile(`"scopeId": "([0-9a-f]{48})"`).FindStringSubmatch(string(data))
	require.Len(t, scope, 2)
	for _, id := range []string{"alpha", "beta", "gamma"} {
		for _, args := range [][]string{{"intercom", "history"}, {"intercom", "history", "--json"}} {
			out, err := as(t, dir, id, args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.NotRegexp(t, `[0-9a-f]{48}`, string(out))
		}
	}
	raw, err := os.ReadFile(history.Path(intercom.NewPaths(dir)))
	require.NoError(t, err)
	require.NotContains(t, string(raw), scope[1], "the history file keeps no scope")
	st, err := os.Stat(history.Path(intercom.NewPaths(dir)))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// history's --limit defaults to history.DefaultLimit: a 0 given is
// refused as the MCP tool's schema refuses it, not taken as the default.
func TestHistoryLimitZeroIsRefused(t *testing.T) {
	t.Parallel()
	_, err := runCLI(t, "intercom", "history", "--limit", "0")
	require.Equal(t, exitUsage, exitCode(err), "%v", err)
	require.Contains(t, err.Error(), "limit must be between 1 and")
}

// A --team that no team can be named is a usage error, not an empty
// history (the same check as teams join's).
func TestHistoryBadTeamNameIsRefused(t *testing.T) {
	t.Parallel()
	_, err := runCLI(t, "intercom", "history", "--team", "bad name")
	require.Equal(t, exitUsage, exitCode(err), "%v", err)
	require.Contains(t, err.Error(), `"bad name"`)
}
