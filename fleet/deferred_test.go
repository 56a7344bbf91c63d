package fleet

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func keptMessage(t *testing.T, id, text string) *wire.MessageInfo {
	t.Helper()
	m := wire.Message{ID: id, Timestamp: 1, Text: text}
	info, err := wire.ParseMessage(m.AppendJSON(nil))
	require.NoError(t, err)
	return info
}

// Kept messages belong to one incarnation: at most 50 wait, the same one
// kept twice is one, what the shim took is delivered, and what an ended
// incarnation never took is worker-ended for its sender — never given to
// the next incarnation.
func TestDeferredMessagesPerIncarnation(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), newTestClock())
	boss := intercom.Sender{ID: "boss", Name: "Boss"}

	_, err := r.Defer(ctx, "nobody", boss, keptMessage(t, "m0", "x"))
	require.ErrorIs(t, err, intercom.ErrNotDeferrable, "no such worker")

	w := &Worker{ID: "w1", State: StateProvisioning, Manager: "boss"}
	require.NoError(t, r.Reserve(ctx, w))
	d, err := r.Defer(ctx, "w1", boss, keptMessage(t, "m1", "first"))
	require.NoError(t, err)
	require.Equal(t, intercom.DeferredQueued, d.State)
	again, err := r.Defer(ctx, "w1", boss, keptMessage(t, "m1", "first"))
	require.NoError(t, err)
	require.Equal(t, d.QueuedAt, again.QueuedAt, "kept once")
	for i := 2; i <= intercom.MaxDeferredPerWorker; i++ {
		_, err := r.Defer(ctx, "w1", boss, keptMessage(t, fmt.Sprintf("m%d", i), "more"))
		require.NoError(t, err)
	}
	_, err = r.Defer(ctx, "w1", boss, keptMessage(t, "m51", "too many"))
	require.ErrorIs(t, err, intercom.ErrDeferredFull)
	require.Contains(t, err.Error(), "50 messages already wait for worker w1")

	queued, err := r.DeferredFor(ctx, "w1", w.RunID)
	require.NoError(t, err)
	require.Len(t, queued, intercom.MaxDeferredPerWorker)
	require.Equal(t, "m1", queued[0].MessageID)
	require.Equal(t, boss, queued[0].From)
	require.NoError(t, r.DeferredDelivered(ctx, "w1", w.RunID, [2]string{"boss", "m1"}))
	queued, err = r.DeferredFor(ctx, "w1", w.RunID)
	require.NoError(t, err)
	require.Len(t, queued, intercom.MaxDeferredPerWorker-1)
	_, err = r.Defer(ctx, "w1", boss, keptMessage(t, "m51", "room again"))
	require.NoError(t, err, "a delivered one makes room")

	finish(t, r, w, StateStopped)
	_, err = r.Defer(ctx, "w1", boss, keptMessage(t, "m52", "after the end"))
	require.ErrorIs(t, err, intercom.ErrNotDeferrable)
	states := map[string]int{}
	from, err := r.DeferredFrom(ctx, "boss")
	require.NoError(t, err)
	for _, d := range from {
		states[d.State]++
	}
	require.Equal(t, map[string]int{intercom.DeferredDelivered: 1, intercom.DeferredWorkerEnded: intercom.MaxDeferredPerWorker}, states)

	next := &Worker{ID: "w1", State: StateProvisioning, Manager: "boss"}
	require.NoError(t, r.Reserve(ctx, next))
	queued, err = r.DeferredFor(ctx, "w1", next.RunID)
	require.NoError(t, err)
	require.Empty(t, queued, "the next incarnation starts with nothing kept")
}
