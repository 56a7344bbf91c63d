//go:build !windows

package shim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The worker's presence status follows its turns — idle, working · turn N
// while a turn runs, failed: … after a failed one, idle again after a good
// one — as other sessions list it; an overlay (a permission prompt's
// needs-input) shows instead of the state until cleared, and the worker's
// own set_summary stays beside the state.
func TestPresenceFollowsTheTurns(t *testing.T) {
	w := newWakeWorld(t, "")
	<-w.ready
	w.presenceIs("idle")

	inTurn, release := make(chan struct{}), make(chan struct{})
	w.mu.Lock()
	w.behave = func(string) { inTurn <- struct{}{}; <-release }
	w.mu.Unlock()
	w.send(w.boss, "first")
	<-inTurn
	w.presenceIs("working · turn 1")
	ops := presenceOps{Ops: w.worker, p: w.loop.cfg.Presence}
	require.NoError(t, ops.SetSummary(context.Background(), "  reading\nthe parser "))
	w.presenceIs("working · turn 1 · reading the parser")
	w.loop.cfg.Presence.SetOverlay(context.Background(), "needs-input: w1 wants to run `npm install`")
	w.presenceIs("needs-input: w1 wants to run `npm install` · reading the parser")
	w.loop.cfg.Presence.ClearOverlay(context.Background())
	w.presenceIs("working · turn 1 · reading the parser")
	require.NoError(t, ops.SetSummary(context.Background(), ""))
	close(release)
	require.Equal(t, "done: first", w.received(1)[0].Text)
	w.presenceIs("idle")

	w.mu.Lock()
	w.behave = nil
	w.mu.Unlock()
	w.send(w.boss, "CRASH now")
	w.received(1)
	w.presenceIs("failed: turn 2: goroutine 1 (exit status 2)")
}
