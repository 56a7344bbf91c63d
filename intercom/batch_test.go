package intercom_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Pending with message ids returns and marks read only those: the other
// mail stays unread.
func TestPendingMarksOnlyTheGivenMessagesRead(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")
	var ids []string
	for _, text := range []string{"one", "two", "three"} {
		res, err := b.Send(ctx, intercom.SendRequest{To: "alpha", Text: text})
		require.NoError(t, err)
		ids = append(ids, res.MessageID)
	}
	pend, err := a.Pending(ctx, intercom.PendingRequest{IDs: ids[1:2], MarkRead: true})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 1)
	require.Equal(t, "two", pend.Unread[0].Text)
	pend, err = a.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 2)
	require.Equal(t, "one", pend.Unread[0].Text)
	require.Equal(t, "three", pend.Unread[1].Text)
}

// WatchBatches emits what is unread at its start as one batch, then each
// new batch, and consumes nothing.
func TestWatchBatches(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	a := open(t, p, "alpha", "Alpha")
	b := open(t, p, "beta", "Beta")
	for _, text := range []string{"one", "two", "three"} {
		_, err := b.Send(ctx, intercom.SendRequest{To: "alpha", Text: text})
		require.NoError(t, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	batches := make(chan []intercom.MessageView, 4)
	done := make(chan error, 1)
	go func() {
		done <- intercom.WatchBatches(wctx, a, intercom.ListenRequest{}, func(m []intercom.MessageView) error {
			batches <- m
			return nil
		})
	}()
	next := func() []intercom.MessageView {
		t.Helper()
		select {
		case m := <-batches:
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no batch")
			return nil
		}
	}
	first := next()
	require.Len(t, first, 3, "the unread mail at the start is one batch")
	require.Equal(t, "one", first[0].Text)
	_, err := b.Send(ctx, intercom.SendRequest{To: "alpha", Text: "four"})
	require.NoError(t, err)
	second := next()
	require.Len(t, second, 1)
	require.Equal(t, "four", second[0].Text)
	cancel()
	require.NoError(t, <-done, "the end of ctx is no error")
	st, err := a.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, st.Unread, "a watch consumes nothing")
}
