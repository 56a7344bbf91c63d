package intercom_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

func attach(t *testing.T, p intercom.Paths, id string, mode intercom.AttachMode) *intercom.Attached {
	t.Helper()
	a, err := intercom.Attach(context.Background(), intercom.AttachConfig{Mode: mode,
		Hold: intercom.HoldConfig{Session: intercom.SessionConfig{Paths: p, Identity: identity(t, id, id)}}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	return a
}

func connected(t *testing.T, peer *intercom.Session, id string) bool {
	t.Helper()
	l, err := peer.List(context.Background(), intercom.ListRequest{})
	require.NoError(t, err)
	for _, s := range l.Sessions {
		if s.ID == id {
			return true
		}
	}
	return false
}

// The session policy: a one-shot registers when nothing holds its id and
// acts through the holder when one does; the holder it reaches is the
// process that holds the session.
func TestAttachOnceRegistersOrGoesThroughTheHolder(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	peer := open(t, p, "peer", "Peer")
	ctx := context.Background()

	once := attach(t, p, "alpha", intercom.AttachOnce)
	require.False(t, once.Holder)
	require.NotNil(t, once.Session)
	require.False(t, intercom.HolderAlive(p, "alpha"), "a one-shot serves no holder")
	require.True(t, connected(t, peer, "alpha"))
	once.Close()
	once.Close() // safe twice
	require.Eventually(t, func() bool { return !connected(t, peer, "alpha") }, 5*time.Second, 10*time.Millisecond)

	held := attach(t, p, "alpha", intercom.AttachHold)
	require.False(t, held.Holder)
	require.True(t, intercom.HolderAlive(p, "alpha"), "a holder serves its socket")
	through := attach(t, p, "alpha", intercom.AttachOnce)
	require.True(t, through.Holder)
	require.Nil(t, through.Session)
	res, err := through.Ops.Send(ctx, intercom.SendRequest{To: "peer", Text: "via the holder"})
	require.NoError(t, err)
	require.True(t, res.OK)
	pend, err := peer.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Equal(t, "alpha", pend.Unread[0].From.ID, "sent as the held session")
}

// A second holder acts through the first and takes the session over when
// the first goes away: registered again, holder socket served, operations
// answered.
func TestAttachHoldTakesTheSessionOver(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	peer := open(t, p, "peer", "Peer")
	ctx := context.Background()

	first := attach(t, p, "dup", intercom.AttachHold)
	second := attach(t, p, "dup", intercom.AttachHold)
	require.True(t, second.Holder)
	require.NoError(t, second.Ops.SetSummary(ctx, "reviewing"))
	first.Close()
	require.Eventually(t, func() bool { return !intercom.HolderAlive(p, "dup") }, 5*time.Second, 10*time.Millisecond)

	w, err := second.Ops.Whoami(ctx)
	require.NoError(t, err, "the call that found the holder gone is made again on the session taken over")
	require.Equal(t, "dup", w.SessionID)
	require.True(t, intercom.HolderAlive(p, "dup"), "the second holds it now")
	require.Eventually(t, func() bool { return connected(t, peer, "dup") }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		l, err := peer.List(ctx, intercom.ListRequest{})
		return err == nil && len(l.Sessions) == 1 && l.Sessions[0].Status == "reviewing"
	}, 5*time.Second, 10*time.Millisecond, "the summary set through the first is published again")
	res, err := peer.Send(ctx, intercom.SendRequest{To: "dup", Text: "still there?"})
	require.NoError(t, err)
	require.True(t, res.OK)
	pend, err := second.Ops.Pending(ctx, intercom.PendingRequest{})
	require.NoError(t, err)
	require.Len(t, pend.Unread, 1)
	second.Close()
	require.False(t, intercom.HolderAlive(p, "dup"), "Close ends the session taken over")
}

// A worker's turn never registers: without a holder it fails once the
// wait is over; with one it acts through it.
func TestAttachThroughNeverRegisters(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	peer := open(t, p, "peer", "Peer")
	_, err := intercom.Attach(context.Background(), intercom.AttachConfig{Mode: intercom.AttachThrough, HolderWait: 200 * time.Millisecond,
		Hold: intercom.HoldConfig{Session: intercom.SessionConfig{Paths: p, Identity: identity(t, "w1", "w1")}}})
	require.ErrorIs(t, err, intercom.ErrNoHolder)
	require.False(t, connected(t, peer, "w1"))

	attach(t, p, "w1", intercom.AttachHold)
	turn := attach(t, p, "w1", intercom.AttachThrough)
	require.True(t, turn.Holder)
	w, err := turn.Ops.Whoami(context.Background())
	require.NoError(t, err)
	require.Equal(t, "w1", w.SessionID)
}

// Hold with RequireHolder refuses a session another live process holds
// the socket of, and closes what it registered.
func TestHoldRequiresItsHolder(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	peer := open(t, p, "peer", "Peer")
	h, err := intercom.Hold(context.Background(), intercom.HoldConfig{Session: intercom.SessionConfig{Paths: p, Identity: identity(t, "solo", "solo")}})
	require.NoError(t, err)
	defer h.Close()
	holder, err := intercom.ListenHolder(intercom.HolderConfig{Paths: p, SessionID: "other", Ops: h.Ops})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = holder.Serve(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	_, err = intercom.Hold(context.Background(), intercom.HoldConfig{RequireHolder: true,
		Session: intercom.SessionConfig{Paths: p, Identity: identity(t, "other", "other")}})
	require.ErrorIs(t, err, intercom.ErrHolderNotServed)
	require.ErrorIs(t, err, intercom.ErrHeld)
	require.Eventually(t, func() bool { return !connected(t, peer, "other") }, 5*time.Second, 10*time.Millisecond,
		"the registration is undone")
}

// A registration refused as in use asks SessionConfig.InUse why: an error
// from it is the answer at once, for a one-shot and for a holder, instead
// of retrying for a holder that will not let go.
func TestAttachStopsRetryingWhenInUseSaysSo(t *testing.T) {
	p := intercom.NewPaths(shortDir(t))
	startBroker(t, p)
	open(t, p, "taken", "Taken") // registered, serving no holder
	why := errors.New("held for good")
	for _, mode := range []intercom.AttachMode{intercom.AttachOnce, intercom.AttachHold} {
		var asked atomic.Int32
		_, err := intercom.Attach(context.Background(), intercom.AttachConfig{Mode: mode,
			Hold: intercom.HoldConfig{Session: intercom.SessionConfig{Paths: p, Identity: identity(t, "taken", "Taken"),
				InUse: func(context.Context) error { asked.Add(1); return why }}}})
		require.ErrorIs(t, err, why, "mode %d", mode)
		require.ErrorIs(t, err, intercom.ErrSessionIDInUse, "mode %d", mode)
		require.Equal(t, int32(1), asked.Load(), "mode %d: asked once, never retried", mode)
	}
}
