//go:build !windows

package mcpserver

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/history"
)

// intercom_history finds what the session sent and received in the
// history its sessions recorded, by text, after the inbox entry is gone.
func TestIntercomHistoryTool(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startTestBroker(t, p)
	store, err := history.Open(context.Background(), p, history.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	open := func(id string) *intercom.Session {
		s, err := intercom.OpenSession(context.Background(), intercom.SessionConfig{Paths: p, History: store,
			Identity: intercom.Identity{SessionID: id, Name: id, Cwd: "/", Model: "test", RuntimeID: intercom.NewMessageID()}})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	alpha, beta := open("alpha"), open("beta")
	f := testFactory()
	server := New(beta, Options{History: func(ctx context.Context, a verbs.HistoryArgs) ([]history.Entry, error) {
		return verbs.History(ctx, f, p, "beta", a)
	}})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	call := func(args map[string]any) mcptest.Result {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "intercom_history", Arguments: args})
		require.NoError(t, err)
		return mcptest.Decode(t, res)
	}

	res, err := alpha.Send(context.Background(), intercom.SendRequest{To: "beta", Text: "the release notes are drafted"})
	require.NoError(t, err)
	require.True(t, res.OK)
	pending, err := beta.Pending(context.Background(), intercom.PendingRequest{MarkRead: true})
	require.NoError(t, err)
	require.Len(t, pending.Unread, 1)
	require.NoError(t, store.Flush())

	r := call(map[string]any{"search": "RELEASE notes", "with": "alpha"})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "from alpha · read:\nthe release notes are drafted")
	entries := r.Structured["entries"].([]any)
	require.Len(t, entries, 1)
	e := entries[0].(map[string]any)
	require.Equal(t, "received", e["direction"])
	require.Equal(t, res.MessageID, e["messageId"])
	require.NotZero(t, e["readAt"])

	require.Contains(t, call(map[string]any{"search": "nothing like it"}).Text, "No messages")
	bad := call(map[string]any{"since": "yesterday-ish"})
	require.True(t, bad.IsError)
	require.Contains(t, bad.Text, "since must be a duration")

	// alpha's own record: sent, accepted and delivered.
	sent, err := store.List(context.Background(), history.Query{Session: "alpha"})
	require.NoError(t, err)
	require.Len(t, sent, 1)
	require.Equal(t, []string{"accepted", "delivered"}, sent[0].Receipts())
}
