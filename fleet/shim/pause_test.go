//go:build !windows

package shim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Budgets and rate limits in the wake loop, on the loop's clock: the tests
// jump it to a pause's end instead of waiting for it.

// withRecord registers the worker in the registry before its loop starts,
// with budget b.
func withRecord(t *testing.T, b fleet.Budget) func(*wakeConfig) {
	return func(c *wakeConfig) {
		reg, err := c.Registry.Get(context.Background())
		require.NoError(t, err)
		require.NoError(t, reg.Insert(context.Background(), &fleet.Worker{ID: "w1", RunID: "0123456789ab", Kind: "claude",
			Unit: fleet.WorkerUnitName("w1", "0123456789ab"), State: fleet.StateRunning, Manager: "boss", FirstManager: "boss", Budget: b}))
	}
}

func (w *wakeWorld) record() *fleet.Worker {
	w.t.Helper()
	reg, err := w.loop.cfg.Registry.Get(context.Background())
	require.NoError(w.t, err)
	rec, err := reg.GetRun(context.Background(), "w1", "0123456789ab")
	require.NoError(w.t, err)
	return rec
}

// unreadByWorker waits until n messages wait, unread, in the worker's
// inbox: they arrived during a pause.
func (w *wakeWorld) unreadByWorker(n int) {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		res, err := w.worker.Pending(context.Background(), intercom.PendingRequest{})
		return err == nil && len(res.Unread) == n
	}, 10*time.Second, 10*time.Millisecond)
}

// presenceIs waits for the worker's presence status to read status (what
// intercom list shows).
func (w *wakeWorld) presenceIs(status string) {
	w.t.Helper()
	var last string
	require.Eventually(w.t, func() bool {
		res, err := w.boss.List(context.Background(), intercom.ListRequest{})
		if err != nil {
			return false
		}
		for _, s := range res.Sessions {
			if s.ID == "w1" {
				last = s.Status
			}
		}
		return last == status
	}, 10*time.Second, 10*time.Millisecond, "presence %q, want %q", last, status)
}

// jumpTo moves the clock to at once the loop sleeps until then.
func (w *wakeWorld) jumpTo(at time.Time) {
	w.t.Helper()
	require.Eventually(w.t, func() bool { return w.clock.waiting(at, false) }, 10*time.Second, 5*time.Millisecond, "the loop sleeps until %s", at)
	w.clock.Jump(at.Sub(w.clock.Now()) + time.Millisecond)
}

// jumpPast moves the clock d ahead whenever the loop sleeps for longer
// than half of it, until turns have started.
func (w *wakeWorld) jumpPast(d time.Duration, turns int) {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		if w.clock.waiting(w.clock.Now().Add(d/2), true) {
			w.clock.Jump(d)
		}
		return len(w.turnsSoFar()) >= turns
	}, 10*time.Second, 5*time.Millisecond, "turn %d starts", turns)
}

// A turn that ends on a rate limit is no failure: the manager is told once,
// the batch is kept, and the same conversation resumes after a backoff that
// doubles while the limit lasts, with what arrived meanwhile.
func TestWakeRateLimitKeepsTheBatchAndResumes(t *testing.T) {
	w := newWakeWorld(t, "", withRecord(t, fleet.Budget{}))
	<-w.ready
	w.send(w.boss, "first")
	require.Equal(t, "done: first", w.received(1)[0].Text)
	sid := argAfterTest(w.turnsSoFar()[0].argv, "--session-id")

	w.mu.Lock()
	w.limits = 2
	w.mu.Unlock()
	w.send(w.boss, "second")
	notice := w.received(1)
	require.Len(t, notice, 1)
	require.Contains(t, notice[0].Text, "agent-fleet: turn 2 of worker w1 (claude) hit the model provider's rate limit: API Error: Request rejected (429)")
	require.Contains(t, notice[0].Text, "This is not a failure: w1 keeps the message it was to work on and resumes the same conversation at")
	st := w.stateWhen(func(st *harness.TurnState) bool { return st.Pause != nil })
	require.Equal(t, harness.RateLimited, st.Pause.Reason)
	require.Equal(t, 30*time.Second, st.Pause.Until.Sub(st.Pause.Since), "no reset reported: the first backoff")
	require.Equal(t, 2, st.Pause.Turn)
	require.Equal(t, 1, st.Pause.Messages)
	require.Zero(t, st.Failures, "a rate limit is not a failed turn")
	require.Zero(t, st.Consecutive)
	require.Equal(t, harness.RateLimited, st.Last.RateLimit.Kind)
	require.False(t, st.Last.OK)
	require.Equal(t, sid, st.Session, "the conversation is kept")
	require.False(t, st.ContextLost)
	until := st.Pause.Until
	require.Eventually(t, func() bool {
		rec := w.record()
		return rec.StateReason == "rate-limited" && rec.PausedUntil.UnixMilli() == until.UnixMilli()
	}, 10*time.Second, 10*time.Millisecond, "status and list show the pause")
	w.presenceIs("paused: rate limit until " + until.UTC().Format(time.RFC3339))

	// A message during the pause waits for the kept batch.
	w.send(w.boss, "third")
	w.unreadByWorker(1)
	require.Len(t, w.turnsSoFar(), 2)
	w.jumpTo(until)

	// Still limited: kept again, the backoff doubled, nobody told twice.
	st = w.stateWhen(func(st *harness.TurnState) bool { return st.Last.N == 3 && st.Pause != nil })
	require.Equal(t, 60*time.Second, st.Pause.Until.Sub(st.Pause.Since))
	require.Equal(t, 2, st.Pause.Messages, "the message that came during the pause joined the batch")
	third := w.turnsSoFar()[2]
	require.Equal(t, sid, argAfterTest(third.argv, "--resume"), "the same conversation")
	require.True(t, strings.HasPrefix(third.prompt, harness.Resent), third.prompt)
	require.Contains(t, third.prompt, "📨 Intercom batch (2 messages)")
	w.jumpTo(st.Pause.Until)

	got := w.received(1)
	require.Len(t, got, 1, "the second rate limit told nobody: %v", got)
	require.Equal(t, "done: third", got[0].Text)
	fourth := w.turnsSoFar()[3]
	require.Equal(t, sid, argAfterTest(fourth.argv, "--resume"))
	require.Contains(t, fourth.prompt, "[1/2] From boss:\nsecond")
	require.Contains(t, fourth.prompt, "[2/2] From boss:\nthird")
	st = w.stateWhen(func(st *harness.TurnState) bool { return st.Last.N == 4 && st.Last.OK })
	require.Nil(t, st.Pause)
	require.Zero(t, st.Failures)
	require.Eventually(t, func() bool {
		rec := w.record()
		return rec.StateReason == "idle" && rec.PausedUntil.IsZero()
	}, 10*time.Second, 10*time.Millisecond)
	w.presenceIs("idle")

	// Usage: two turns did work, the limited ones consumed nothing.
	rec := w.record()
	require.Equal(t, 2, rec.Usage.Turns)
	require.Equal(t, int64(2*turnTokens), rec.Usage.Tokens())
	require.InDelta(t, 2*turnTokens/10000.0, rec.Usage.CostUSD, 1e-9)
	require.Equal(t, "claude-test", rec.Usage.Model)
	require.Equal(t, rec.Usage.Tokens(), st.Usage.Tokens())
	require.Equal(t, int64(turnTokens), st.Last.Usage.Tokens(), "the turn's share of the running totals")

	// The next rate limit is a new one: told again.
	w.mu.Lock()
	w.limits = 1
	w.mu.Unlock()
	w.send(w.boss, "fifth")
	require.Contains(t, w.received(1)[0].Text, "turn 5 of worker w1 (claude) hit")
	st = w.stateWhen(func(st *harness.TurnState) bool { return st.Pause != nil && st.Pause.Turn == 5 })
	require.Equal(t, 30*time.Second, st.Pause.Until.Sub(st.Pause.Since), "a new streak starts from the first backoff")
}

// A reset the harness reports is when the kept turn runs.
func TestWakeRateLimitResumesAtTheReportedReset(t *testing.T) {
	w := newWakeWorld(t, "")
	<-w.ready
	w.mu.Lock()
	w.limits, w.limitText = 1, "API Error: Request rejected (429) · Number of requests has exceeded your rate limit. Please try again in 90s."
	w.mu.Unlock()
	w.send(w.boss, "go")
	require.Contains(t, w.received(1)[0].Text, "resumes the same conversation at")
	st := w.stateWhen(func(st *harness.TurnState) bool { return st.Pause != nil })
	require.Equal(t, st.Last.EndedAt.Add(90*time.Second), st.Pause.Until)
	w.jumpTo(st.Pause.Until)
	require.Equal(t, "done: go", w.received(1)[0].Text)
	require.Len(t, w.turnsSoFar(), 2)
}

// A worker whose budget is spent starts no turn: it keeps the batch, tells
// its manager once, and runs the batch (with what came meanwhile) when the
// budget is raised.
func TestWakeBudgetKeepsTheBatchUntilRaised(t *testing.T) {
	const poll = time.Hour
	w := newWakeWorld(t, "the task", withRecord(t, fleet.Budget{Tokens: 150}), func(c *wakeConfig) { c.BudgetPoll = poll })
	<-w.ready
	require.Equal(t, "done: the task", w.received(1)[0].Text)
	w.send(w.boss, "two")
	require.Equal(t, "done: two", w.received(1)[0].Text, "80 of 150 tokens: the turn runs")

	w.send(w.boss, "three")
	notice := w.received(1)
	require.Len(t, notice, 1)
	require.Equal(t, "agent-fleet: worker w1 (claude) has spent its budget (160 of 150 tokens) and starts no more turns. "+
		"It keeps the message it was to work on and runs it when you raise the budget: agent-fleet renew w1 --budget-usd X or --budget-tokens N "+
		"(agent_fleet: action renew with budgetUsd or budgetTokens).", notice[0].Text)
	st := w.stateWhen(func(st *harness.TurnState) bool { return st.Pause != nil })
	require.Equal(t, harness.PauseBudget, st.Pause.Reason)
	require.Equal(t, 1, st.Pause.Messages)
	require.Equal(t, "spent 160 of 150 tokens", st.Pause.Error)
	require.Equal(t, 2, st.Turns, "no turn started")
	require.Eventually(t, func() bool { return w.record().StateReason == "budget-spent" }, 10*time.Second, 10*time.Millisecond)

	// More mail waits with it, and nobody is told again.
	w.send(w.boss, "four")
	w.unreadByWorker(1)

	// renew raises the budget: the loop finds it at its next look (or at
	// the message that just came, if it looks then).
	reg, err := w.loop.cfg.Registry.Get(context.Background())
	require.NoError(t, err)
	_, err = reg.Update(context.Background(), "w1", "0123456789ab", func(r *fleet.Worker) error { r.Budget.Tokens = 1000; return nil })
	require.NoError(t, err)
	w.jumpPast(poll, 3)
	got := w.received(1)
	require.Len(t, got, 1, "told once: %v", got)
	require.Equal(t, "done: four", got[0].Text)
	turns := w.turnsSoFar()
	require.Len(t, turns, 3)
	require.Contains(t, turns[2].prompt, "📨 Intercom batch (2 messages)")
	require.Contains(t, turns[2].prompt, "[1/2] From boss:\nthree")
	require.False(t, strings.HasPrefix(turns[2].prompt, harness.Resent), "it never ran before")

	st = w.stateWhen(func(st *harness.TurnState) bool { return st.Last.N == 3 && st.Pause == nil })
	require.Equal(t, int64(3*turnTokens), st.Usage.Tokens())
	rec := w.record()
	require.Equal(t, 3, rec.Usage.Turns)
	require.Equal(t, int64(3*turnTokens), rec.Usage.Tokens())

	// The registry's bounds are the budget; the spawn's fill in where the
	// registry has none (a record rebuilt without them).
	require.Equal(t, fleet.Budget{Tokens: 1000}, w.loop.budget(rec))
	require.Equal(t, fleet.Budget{Tokens: 7, USD: 2}, (&wakeLoop{cfg: wakeConfig{Spec: &harness.Spec{BudgetTokens: 7, BudgetUSD: 2}}}).budget(&fleet.Worker{}))
}

func TestRateLimitBackoff(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 8; n++ {
		got = append(got, backoffAfter(n))
	}
	require.Equal(t, []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		15 * time.Minute, 15 * time.Minute, 15 * time.Minute}, got)
	require.Equal(t, 15*time.Minute, backoffAfter(100))
	require.True(t, slices.IsSorted(got))
}

// The manager's ask in a batch a rate limit keeps gets the notice as its
// reply (it is not left waiting); the kept turn then shows it as a plain
// message — an intercom_reply to the closed ask would fail — and its final
// answer reaches the manager as a message.
func TestWakeKeptAskAnsweredByTheNoticeIsAMessageToTheTurn(t *testing.T) {
	w := newWakeWorld(t, "", withRecord(t, fleet.Budget{}))
	<-w.ready
	w.mu.Lock()
	w.limits = 1
	w.mu.Unlock()
	ans, err := w.boss.Ask(context.Background(), intercom.AskRequest{To: "w1", Text: "what is 6*7?", Wait: 10 * time.Second})
	require.NoError(t, err)
	require.True(t, ans.Replied, "%+v", ans)
	require.Contains(t, ans.Reply.Text, "hit the model provider's rate limit")
	st := w.stateWhen(func(st *harness.TurnState) bool { return st.Pause != nil })
	w.jumpTo(st.Pause.Until)

	got := w.received(1)
	require.Equal(t, "done: what is 6*7?", got[0].Text, "the answer reaches the manager")
	kept := w.turnsSoFar()[1]
	require.Contains(t, kept.prompt, "📨 From boss:\nwhat is 6*7?")
	require.NotContains(t, kept.prompt, "awaiting your reply")
	require.NotContains(t, kept.prompt, "This is an ask")
}
