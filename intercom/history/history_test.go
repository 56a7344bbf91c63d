package history

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

func open(t *testing.T, p intercom.Paths, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), p, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// What a dashboard reads: Changes from a cursor gives every new entry and,
// again, every entry that got a receipt since; Follow streams them.
func TestChangesAndFollow(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	s := open(t, p, Options{})
	now := time.Now()
	s.Record("alpha", intercom.HistoryEvent{Direction: intercom.Sent, Peer: "beta", MessageID: "m1", Kind: intercom.KindMessage, Text: "one", At: now})
	s.Record("beta", intercom.HistoryEvent{Direction: intercom.Received, Peer: "alpha", MessageID: "m1", Kind: intercom.KindMessage, Text: "one", At: now})
	require.NoError(t, s.Flush())
	es, cursor, err := s.Changes(context.Background(), 0, 0)
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, es[1].Cursor, cursor)

	// A read receipt moves alpha's entry past the cursor.
	s.Record("alpha", intercom.HistoryEvent{Direction: intercom.Sent, Receipt: intercom.ReceiptRead, Peer: "beta", MessageID: "m1", At: now})
	require.NoError(t, s.Flush())
	es, cursor2, err := s.Changes(context.Background(), cursor, 0)
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "alpha", es[0].Session)
	require.Equal(t, "one", es[0].Text, "the receipt keeps the message")
	require.Equal(t, []string{"read"}, es[0].Receipts())
	require.Greater(t, cursor2, cursor)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Entry, 4)
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(ctx, cursor2, 10*time.Millisecond, func(e Entry) error { got <- e; return nil })
	}()
	s.Record("beta", intercom.HistoryEvent{Direction: intercom.Sent, Peer: "alpha", MessageID: "m2", Kind: intercom.KindReply, Text: "two", At: now})
	select {
	case e := <-got:
		require.Equal(t, "two", e.Text)
		require.Equal(t, "reply", e.Kind)
	case <-time.After(30 * time.Second):
		t.Fatal("Follow never saw the new entry")
	}
	cancel()
	require.NoError(t, <-done)
}

// A receipt that overtakes its message (a read receipt before the
// sender's own record) is kept, and the message fills the row.
func TestReceiptBeforeItsMessage(t *testing.T) {
	s := open(t, intercom.NewPaths(t.TempDir()), Options{})
	at := time.Now()
	s.Record("alpha", intercom.HistoryEvent{Direction: intercom.Sent, Receipt: intercom.ReceiptRead, Peer: "beta", MessageID: "m1", At: at})
	s.Record("alpha", intercom.HistoryEvent{Direction: intercom.Sent, Peer: "beta", MessageID: "m1", Kind: intercom.KindMessage, Text: "hello", At: at})
	s.Record("alpha", intercom.HistoryEvent{Direction: intercom.Sent, Receipt: intercom.ReceiptDelivered, Peer: "beta", MessageID: "m1", At: at})
	require.NoError(t, s.Flush())
	es, err := s.List(context.Background(), Query{Session: "alpha"})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "hello", es[0].Text)
	require.Equal(t, []string{"delivered", "read"}, es[0].Receipts())
}

// Entries older than the retention are gone when the store opens again;
// a bad AGENT_FLEET_HISTORY_DAYS is refused.
func TestRetention(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	now := time.Now()
	s, err := Open(context.Background(), p, Options{Days: 2, Now: func() time.Time { return now }})
	require.NoError(t, err)
	s.Record("alpha", intercom.HistoryEvent{Direction: intercom.Sent, Peer: "beta", MessageID: "old", Text: "old", At: now.Add(-72 * time.Hour)})
	s.Record("alpha", intercom.HistoryEvent{Direction: intercom.Sent, Peer: "beta", MessageID: "new", Text: "new", At: now.Add(-time.Hour)})
	require.NoError(t, s.Close())
	s = open(t, p, Options{Days: 2, Now: func() time.Time { return now }})
	es, err := s.List(context.Background(), Query{})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "new", es[0].Text)

	for _, bad := range []string{"0", "-1", "week"} {
		_, err := DaysFromEnv(bad)
		require.ErrorIs(t, err, intercom.ErrInvalidInput, bad)
	}
	n, err := DaysFromEnv("7")
	require.NoError(t, err)
	require.Equal(t, 7, n)
}
