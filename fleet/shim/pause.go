//go:build !windows

package shim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Pauses. A worker whose budget is spent, or whose turn ended on the
// provider's rate limit or overload, keeps the turn it was to run (the
// task, or the batch of messages, read from the inbox already) and starts
// no turn until it may: the budget is raised (re-read every budgetPoll and
// at every message), or the limit's reset comes. Its manager is told once
// per pause. A rate limit is not a failure: the same conversation resumes.

// Backoff after a rate limit whose reset the harness does not report: 30 s
// for the first turn in a row that ends on one, doubling, at most 15 min.
const (
	rateLimitBackoff    = 30 * time.Second
	maxRateLimitBackoff = 15 * time.Minute
)

// budgetPoll is how often a worker whose budget is spent re-reads it from
// the registry (renew raises it there).
const budgetPoll = 5 * time.Second

// State reasons the registry shows (list, status) for a paused worker.
const (
	reasonRateLimited = "rate-limited"
	reasonBudgetSpent = "budget-spent"
)

// turnWork is what a turn is for: the task, or a batch of messages. Work
// that could not run, or whose turn ended on a rate limit, is kept
// (wakeLoop.kept) until it may run.
type turnWork struct {
	reason string // "task" or "messages"
	batch  []intercom.MessageView
	// kept are messages kept for the worker while its session was not
	// connected (deferred.go), shown under keptHeading.
	kept        []intercom.MessageView
	keptHeading string
	// again: it ran and ended on a rate limit; its prompt says it comes
	// again.
	again bool
}

// backoffAfter is the wait after the n-th turn in a row that ended on a
// rate limit without a reset.
func backoffAfter(n int) time.Duration {
	d := rateLimitBackoff << min(n-1, 16)
	if d > maxRateLimitBackoff || d <= 0 {
		d = maxRateLimitBackoff
	}
	return d
}

// budget is the worker's budget now: each bound the registry's record
// holds (renew sets it), else the one it was spawned with.
func (w *wakeLoop) budget(rec *fleet.Worker) fleet.Budget {
	b := fleet.Budget{USD: w.cfg.Spec.BudgetUSD, Tokens: w.cfg.Spec.BudgetTokens}
	if rec != nil {
		if rec.Budget.USD > 0 {
			b.USD = rec.Budget.USD
		}
		if rec.Budget.Tokens > 0 {
			b.Tokens = rec.Budget.Tokens
		}
	}
	return b
}

// budgetSpent reports whether the run's turns have reached the budget,
// and by what.
func (w *wakeLoop) budgetSpent(ctx context.Context) (bool, string) {
	return w.budget(w.record(ctx)).Spent(w.state.Usage)
}

// mayResume reports whether the kept turn may run now, and otherwise how
// long to wait before asking again (a message may end the wait sooner).
func (w *wakeLoop) mayResume(ctx context.Context) (bool, time.Duration) {
	if wait := w.state.NextTurnAt.Sub(w.now()); wait > 0 {
		return false, wait // failures before it back off still
	}
	p := w.state.Pause
	switch {
	case p == nil:
		return true, 0
	case p.Reason == harness.PauseBudget:
		if spent, _ := w.budgetSpent(ctx); spent {
			return false, w.cfg.BudgetPoll
		}
		return true, 0
	}
	if wait := p.Until.Sub(w.now()); wait > 0 {
		return false, wait
	}
	return true, 0
}

// resume hands back the kept turn, with the messages that arrived during
// the pause joining a kept batch.
func (w *wakeLoop) resume(ctx context.Context) *turnWork {
	k := w.kept
	w.kept = nil
	if k.reason != "messages" {
		return k // the task runs alone; messages come in the next turn
	}
	res, err := w.cfg.Session.Pending(ctx, intercom.PendingRequest{MarkRead: true})
	if err != nil {
		w.cfg.Logger.Warn("reading the inbox", "err", err)
		return k
	}
	k.batch = append(k.batch, res.Unread...)
	return k
}

// sleep waits d on the loop's clock, or for a message, or for ctx; false
// when ctx ended.
func (w *wakeLoop) sleep(ctx context.Context, d time.Duration) bool {
	c, stop := w.cfg.Clock.NewTimer(d)
	defer stop()
	select {
	case <-ctx.Done():
		return false
	case <-c:
	case <-w.batch.notify:
	}
	return true
}

// keepForBudget keeps k, which must not run: the budget is spent (how
// says by what). The manager is told once, until a turn runs again.
func (w *wakeLoop) keepForBudget(ctx context.Context, k *turnWork, how string) {
	w.kept = k
	w.state.Pause = &harness.Pause{Reason: harness.PauseBudget, Since: w.now(), Task: k.reason == "task",
		Messages: len(k.batch), Error: "spent " + how}
	w.saveState()
	w.setReason(ctx, reasonBudgetSpent, "", false, time.Time{})
	w.setPresence(ctx, "paused: budget spent")
	if w.budgetTold {
		return
	}
	w.budgetTold = true
	id := w.cfg.WorkerID
	kept := keptText(k)
	flags := "--budget-usd X or --budget-tokens N"
	if !harness.ReportsCost(w.kind) {
		flags = "--budget-tokens N"
	}
	text := fmt.Sprintf("agent-fleet: worker %s (%s) has spent its budget (%s) and starts no more turns. It keeps %s and runs %s when you raise the budget: agent-fleet renew %s %s (agent_fleet: action renew with budgetUsd or budgetTokens).",
		id, w.kind, how, kept, itThem(k), id, flags)
	w.tell(ctx, &harness.TurnRecord{N: w.state.Turns}, w.manager(ctx), k.batch, text)
	fmt.Fprintf(w.cfg.Log, "agent-fleet worker shim: budget spent (%s): %s kept\n", how, kept)
}

// pauseForRateLimit keeps k, whose turn rec ended on a rate limit or
// overload, to run again at the reset the harness reported, else after a
// backoff. The manager is told of the first of a streak.
func (w *wakeLoop) pauseForRateLimit(ctx context.Context, rec *harness.TurnRecord, res harness.TurnResult, k *turnWork, manager string) {
	w.rateLimits++
	now := w.now()
	until := res.RateLimit.ResetAt
	if !until.After(now) {
		until = now.Add(backoffAfter(w.rateLimits))
	}
	k.again = true
	w.kept = k
	w.state.Pause = &harness.Pause{Reason: res.RateLimit.Kind, Since: now, Until: until, Turn: rec.N,
		Task: k.reason == "task", Messages: len(k.batch), Error: res.Error}
	w.saveState()
	w.setReason(ctx, reasonRateLimited, "", false, until)
	w.setPresence(ctx, "paused: "+pauseWhat(res.RateLimit.Kind)+" until "+until.UTC().Format(time.RFC3339))
	if w.rateLimits == 1 {
		what := "hit the model provider's rate limit"
		if res.RateLimit.Kind == harness.Overloaded {
			what = "found the model provider overloaded"
		}
		text := fmt.Sprintf("agent-fleet: turn %d of worker %s (%s) %s: %s\nThis is not a failure: %s keeps %s and resumes the same conversation at %s (in %s), later again while the limit lasts. Nothing for you to do.",
			rec.N, w.cfg.WorkerID, w.kind, what, res.Error, w.cfg.WorkerID, keptText(k), until.UTC().Format(time.RFC3339), until.Sub(now).Round(time.Second))
		w.tell(ctx, rec, manager, k.batch, fitText(text))
	}
	w.saveState()
}

// endPause notes that a turn runs: a pause is over (the turn's presence
// state replaces the pause's).
func (w *wakeLoop) endPause(context.Context) {
	w.state.Pause = nil
	w.budgetTold = false
}

// tell sends the manager a notice: as the reply to its ask in batch when it
// asked, else as a message. Others' asks stay open for the turn that will
// answer them.
func (w *wakeLoop) tell(ctx context.Context, rec *harness.TurnRecord, manager string, batch []intercom.MessageView, text string) {
	var mine []intercom.MessageView
	for _, m := range batch {
		if m.ExpectsReply && m.From.ID == manager {
			mine = append(mine, m)
		}
	}
	if len(mine) > 0 && contains(w.replyToOpenAsks(ctx, rec, mine, text), manager) {
		return
	}
	w.send(ctx, rec, manager, text)
}

// setPresence shows a pause as the worker's presence state, which intercom
// list shows.
func (w *wakeLoop) setPresence(ctx context.Context, state string) {
	w.cfg.Presence.SetState(ctx, state)
}

func pauseWhat(kind string) string {
	if kind == harness.Overloaded {
		return "provider overloaded"
	}
	return "rate limit"
}

// keptText says what kept work is: "its task", "the message it was to
// work on", "the 2 messages it was to work on".
func keptText(k *turnWork) string {
	switch {
	case k.reason == "task":
		return "its task"
	case len(k.batch) == 1:
		return "the message it was to work on"
	}
	return fmt.Sprintf("the %d messages it was to work on", len(k.batch))
}

func itThem(k *turnWork) string {
	if k.reason == "messages" && len(k.batch) > 1 {
		return "them"
	}
	return "it"
}

// pausedLine is a pause for the log.
func pausedLine(p *harness.Pause) string {
	if p.Reason == harness.PauseBudget {
		return "paused: budget " + strings.TrimPrefix(p.Error, "spent ")
	}
	return "paused: " + pauseWhat(p.Reason) + " until " + p.Until.UTC().Format(time.RFC3339)
}
