//go:build !windows

package shim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Batching of inbound messages into turns (spec §5.6): a batch is flushed
// 300 ms after its last message, and at most 1 s after its first.
const (
	batchQuiet   = 300 * time.Millisecond
	batchMaxWait = time.Second
)

// Backoff after failed turns: the first failure waits defaultTurnBackoff
// before the next turn may start, each further one in a row twice as long,
// at most maxTurnBackoff. A failed turn never starts another by itself:
// only a new message does.
const (
	defaultTurnBackoff = 5 * time.Second
	maxTurnBackoff     = 5 * time.Minute
)

// wakeConfig configures a coding-agent worker's wake loop.
type wakeConfig struct {
	WorkerID, RunID string
	Dir             string // the worker directory
	Spec            *harness.Spec
	Session         *intercom.Session
	Tracker         *turnTracker
	Registry        *fleet.RegistryHandle
	// MCP is agent-fleet's MCP server entry of every turn.
	MCP harness.MCPServer
	// Env is the harness's base environment.
	Env []string
	// FirstManager is the manager in the unit environment, used when the
	// registry cannot be read.
	FirstManager string
	Log          io.Writer
	Logger       *slog.Logger
	Backoff      time.Duration
	Run          turnRunner // nil: runTurnProcess
	// Clock is the loop's time: batches, backoffs and pauses wait on it
	// (nil: the system clock).
	Clock clock
	// BudgetPoll is how often a worker whose budget is spent re-reads it
	// (0: budgetPoll).
	BudgetPoll time.Duration
	// Joined receives the ids of sessions that join (the session's
	// OnSessionJoined): held outcomes go out when the manager connects.
	Joined <-chan string
	// HeldRetry is how often held outcomes are retried anyway (a manager in
	// another scope is not announced); 0: heldRetry.
	HeldRetry time.Duration
	// Presence publishes the worker's state as its presence status (nil:
	// one over Session).
	Presence *Presence
	// Kept names the messages taken from the worker's kept queue whose
	// turn has not run (deferred.go); nil: none.
	Kept *keptSet
}

// Outcomes held for a manager that is not connected: at most maxHeld (the
// oldest are dropped), retried when a session joins and every heldRetry.
const (
	maxHeld   = 32
	heldRetry = 30 * time.Second
)

// wakeLoop runs a coding-agent worker: the task's turn, then one turn per
// batch of inbound messages, resuming the same conversation; paused, with
// the work kept, while its budget is spent or a rate limit lasts
// (pause.go).
type wakeLoop struct {
	cfg   wakeConfig
	kind  string
	state harness.TurnState
	batch batcher

	// heldMu orders sends to the manager and guards held (also in
	// held.json): the turn goroutine holds outcomes, the delivery
	// goroutine sends them.
	heldMu sync.Mutex
	held   []harness.HeldMessage

	// kept is the work a pause keeps (pause.go); rateLimits counts the
	// turns in a row that ended on a rate limit; budgetTold says the
	// manager knows its spent budget.
	kept       *turnWork
	rateLimits int
	budgetTold bool
}

func newWakeLoop(cfg wakeConfig) (*wakeLoop, error) {
	if !harness.IsKind(cfg.Spec.Kind) {
		return nil, fmt.Errorf("%w %q", harness.ErrUnsupportedKind, cfg.Spec.Kind)
	}
	if cfg.Run == nil {
		cfg.Run = runTurnProcess
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.BudgetPoll <= 0 {
		cfg.BudgetPoll = budgetPoll
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = defaultTurnBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.HeldRetry <= 0 {
		cfg.HeldRetry = heldRetry
	}
	if cfg.Presence == nil {
		cfg.Presence = newPresence(cfg.Session, cfg.Logger)
	}
	w := &wakeLoop{cfg: cfg, kind: cfg.Spec.Kind, state: harness.TurnState{Kind: cfg.Spec.Kind}}
	// A shim of the same run started again: what it held is still owed.
	w.held, _ = harness.ReadHeld(cfg.Dir)
	w.batch.notify = make(chan struct{}, 1)
	return w, nil
}

// errFirstTurn: the first turn's process could not be started.
var errFirstTurn = errors.New("the first turn could not be started")

func (w *wakeLoop) now() time.Time { return w.cfg.Clock.Now() }

// run runs turns until ctx ends (the worker is stopped). ready is called
// once the first turn's harness runs (at once without a task). A first
// turn that cannot even be started is errFirstTurn; later ones are
// reported failures like any other.
func (w *wakeLoop) run(ctx context.Context, ready func()) error {
	if rec := w.record(ctx); rec != nil {
		w.state.Usage = rec.Usage // a shim of the same run started again goes on counting
	}
	w.saveState()
	lctx, stopListen := context.WithCancel(ctx)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		for lctx.Err() == nil {
			err := w.cfg.Session.Listen(lctx, intercom.ListenRequest{KeepUnread: true}, func(*intercom.MessageView) error {
				w.batch.arrived(w.now())
				return nil
			})
			if err != nil && lctx.Err() == nil {
				w.cfg.Logger.Warn("watching the inbox", "err", err)
				select {
				case <-lctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	defer func() { stopListen(); <-listened }()
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		w.deliverHeld(lctx)
	}()
	defer func() { stopListen(); <-delivered }()

	if w.cfg.Spec.Task != "" {
		started := false
		k := &turnWork{reason: "task"}
		w.withKept(k, w.cfg.Session.Take(w.cfg.Kept.has))
		w.attempt(ctx, k, func() { started = true; ready() })
		if !started && ctx.Err() == nil {
			return errFirstTurn
		}
	} else {
		w.cfg.Presence.SetState(ctx, stateIdle)
		ready()
	}
	for {
		k, ok := w.next(ctx)
		if !ok {
			return nil
		}
		w.attempt(ctx, k, nil)
	}
}

// next waits for the next turn to run: the kept one once its pause ends,
// else the next batch of messages; false when ctx ended.
func (w *wakeLoop) next(ctx context.Context) (*turnWork, bool) {
	for {
		if w.kept != nil {
			ok, wait := w.mayResume(ctx)
			if ok {
				return w.resume(ctx), true
			}
			if !w.sleep(ctx, wait) {
				return nil, false
			}
			continue
		}
		if !w.waitForBatch(ctx) {
			return nil, false
		}
		res, err := w.cfg.Session.Pending(ctx, intercom.PendingRequest{MarkRead: true})
		if err != nil {
			w.cfg.Logger.Warn("reading the inbox", "err", err)
			continue
		}
		if len(res.Unread) == 0 {
			continue // read during the last turn already
		}
		k := &turnWork{reason: "messages"}
		kept, rest := w.cfg.Kept.split(res.Unread)
		k.batch = rest
		w.withKept(k, kept)
		return k, true
	}
}

// attempt runs a turn for k unless the budget is spent: then k is kept (and
// started, when given, is called: the worker is up, its turn waits).
func (w *wakeLoop) attempt(ctx context.Context, k *turnWork, started func()) {
	if spent, how := w.budgetSpent(ctx); spent {
		if started != nil {
			started()
		}
		w.keepForBudget(ctx, k, how)
		return
	}
	w.turn(ctx, k, started)
}

// waitForBatch waits until a batch is due (and any backoff has passed);
// false when ctx ended.
func (w *wakeLoop) waitForBatch(ctx context.Context) bool {
	for {
		due, pending := w.batch.due()
		if pending {
			if next := w.state.NextTurnAt; next.After(due) {
				due = next
			}
			wait := due.Sub(w.now())
			if wait <= 0 {
				w.batch.take()
				return true
			}
			if !w.sleep(ctx, wait) {
				return false
			}
			continue
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.batch.notify:
		}
	}
}

// record is the worker's registry record, nil when it cannot be read.
func (w *wakeLoop) record(ctx context.Context) *fleet.Worker {
	reg, err := w.cfg.Registry.Get(ctx)
	if err != nil || reg == nil {
		return nil
	}
	rec, err := reg.GetRun(ctx, w.cfg.WorkerID, w.cfg.RunID)
	if err != nil {
		return nil
	}
	return rec
}

// manager is the worker's current manager: the registry's (adoption moves
// it), else the first one.
func (w *wakeLoop) manager(ctx context.Context) string {
	if rec := w.record(ctx); rec != nil && rec.Manager != "" {
		return rec.Manager
	}
	return w.cfg.FirstManager
}

// turn runs a turn for k and delivers its outcome; one that ends on a rate
// limit keeps k to run again (pauseForRateLimit).
func (w *wakeLoop) turn(ctx context.Context, k *turnWork, started func()) {
	spec := w.cfg.Spec
	reason, batch := k.reason, w.withClosedAsks(ctx, k.batch)
	manager := w.manager(ctx)
	w.state.Turns++
	n := w.state.Turns
	t := &harness.Turn{N: n, WorkerID: w.cfg.WorkerID, Session: w.state.Session, Dir: w.cfg.Dir, MCP: w.cfg.MCP,
		Mandate: harness.Mandate(spec, w.cfg.WorkerID, manager)}
	fresh := t.Session == ""
	if fresh {
		t.NewSession = harness.NewSession(w.kind, w.cfg.WorkerID, w.cfg.RunID)
	}
	switch {
	case reason == "task":
		t.Prompt = harness.TaskPrompt(n, manager, spec.Task)
		if len(k.kept) > 0 {
			t.Prompt += "\n\n" + harness.KeptSection(k.keptHeading, k.kept)
		}
	case len(k.kept) > 0:
		t.Prompt = harness.KeptPrompt(n, manager, k.keptHeading, k.kept, batch)
		if fresh && w.state.ContextLost {
			t.Prompt = harness.Recap(spec.Task) + "\n\n" + t.Prompt
		}
	default:
		t.Prompt = harness.BatchPrompt(n, manager, batch)
		if fresh && w.state.ContextLost {
			t.Prompt = harness.Recap(spec.Task) + "\n\n" + t.Prompt
		}
	}
	if k.again {
		t.Prompt = harness.Resent + "\n\n" + t.Prompt
	}
	if fresh && !harness.TakesSystemPrompt(w.kind) {
		t.Prompt = t.Mandate + "\n\n" + t.Prompt
	}
	rec := &harness.TurnRecord{N: n, Reason: reason, Messages: len(batch) + len(k.kept), Session: cmp.Or(t.Session, t.NewSession), StartedAt: w.now()}
	w.state.Current = rec
	w.endPause(ctx)
	w.saveState()
	w.setReason(ctx, "turn-running", "", false, time.Time{})
	w.cfg.Presence.SetState(ctx, fmt.Sprintf("working · turn %d", n))
	what := reason
	if len(batch) > 0 {
		what = fmt.Sprintf("%s: %d", reason, len(batch))
	}
	fmt.Fprintf(w.cfg.Log, "agent-fleet worker shim: turn %d (%s) starts\n", n, what)

	var exit turnExit
	cmd, err := harness.BuildTurn(spec, t)
	w.cfg.Tracker.begin()
	if err != nil {
		exit = turnExit{StartErr: err, Status: -1}
	} else {
		exit = w.cfg.Run(ctx, cmd, turnProcOptions{Dir: spec.Cwd, Env: w.cfg.Env, Timeout: spec.TurnTimeout(), Log: w.cfg.Log}, started)
	}
	messaged := w.cfg.Tracker.end()
	rec.EndedAt, rec.ExitStatus, rec.ErrorLines = w.now(), exit.Status, exit.StderrTail
	w.state.Current = nil

	if exit.Stopped {
		rec.Error = "stopped during the turn"
		w.state.Last = rec
		w.saveState()
		return
	}
	if exit.StartErr != nil && started != nil {
		// The first turn: Spawn reports it (the worker never got ready).
		rec.Error = "the harness could not be started: " + exit.StartErr.Error()
		w.state.Last = rec
		w.saveState()
		return
	}
	res := harness.ParseTurnOutputAt(w.kind, exit.Stdout, rec.EndedAt)
	limited := res.RateLimit != nil && exit.StartErr == nil && !exit.TimedOut
	switch {
	case exit.StartErr != nil:
		res = harness.TurnResult{Failed: true, Error: "the harness could not be started: " + exit.StartErr.Error()}
	case exit.TimedOut:
		res.Failed, res.Final = true, ""
		res.Error = fmt.Sprintf("the turn ran past its limit of %s and was ended", spec.TurnTimeout())
	case exit.Status != 0 && !res.Failed:
		res.Failed, res.Final = true, ""
		res.Error = fmt.Sprintf("the harness exited with status %d", exit.Status)
	case res.Failed && res.Error == harness.ErrNoOutput.Error():
		// Nothing on stdout: the harness's last error line says more.
		if len(exit.StderrTail) > 0 {
			res.Error = exit.StderrTail[len(exit.StderrTail)-1]
		}
		if exit.Status > 0 {
			res.Error += fmt.Sprintf(" (exit status %d)", exit.Status)
		}
	}

	w.recordUsage(ctx, rec, res, manager)

	// The conversation the next turn resumes.
	switch {
	case res.Session != "":
		w.state.Session, w.state.ContextLost = res.Session, false
	case spec.Kind == "pi":
		w.state.Session = t.NewSession // --session-id opens or creates it
		if t.Session != "" {
			w.state.Session = t.Session
		}
	case limited:
		// Nothing was lost: the next turn resumes what this one did.
	case exit.TimedOut && t.Session != "":
		// Ended at its time limit, so it said no session: the
		// conversation it resumed is still there to resume.
		w.state.Session = t.Session
	case res.Failed:
		// No conversation to resume: the next turn starts one, with the
		// task again if this was not the first.
		w.state.Session = ""
		w.state.ContextLost = true
	}
	rec.Session = cmp.Or(res.Session, rec.Session)
	rec.OK = !res.Failed
	if limited {
		rec.Error, rec.RateLimit = res.Error, res.RateLimit
		w.state.Last = rec
		w.pauseForRateLimit(ctx, rec, res, k, manager)
		fmt.Fprintf(w.cfg.Log, "agent-fleet worker shim: turn %d ended on a %s: %s; %s\n", n, res.RateLimit.Kind, res.Error, pausedLine(w.state.Pause))
		return
	}
	w.rateLimits = 0
	if res.Failed {
		rec.Error = res.Error
		w.state.Failures++
		w.state.Consecutive++
		backoff := w.cfg.Backoff << min(w.state.Consecutive-1, 16)
		if backoff > maxTurnBackoff || backoff <= 0 {
			backoff = maxTurnBackoff
		}
		w.state.NextTurnAt = w.now().Add(backoff)
	} else {
		rec.Final = clip(strings.TrimSpace(res.Final), 2000)
		w.state.Consecutive, w.state.NextTurnAt = 0, time.Time{}
	}
	w.state.Last = rec
	w.saveState()
	if res.Failed {
		w.failed(ctx, rec, res, manager, batch)
	} else {
		w.succeeded(ctx, rec, res, manager, batch, messaged)
	}
	w.saveState()
	fmt.Fprintf(w.cfg.Log, "agent-fleet worker shim: turn %d ended: %s\n", n, map[bool]string{true: "ok", false: "failed: " + rec.Error}[rec.OK])
}

// succeeded delivers a turn's final answer: as the reply to every ask of
// the batch the turn left unanswered, and to the manager unless the turn
// (or one of those replies) already messaged it.
func (w *wakeLoop) succeeded(ctx context.Context, rec *harness.TurnRecord, res harness.TurnResult, manager string, batch []intercom.MessageView, messaged map[string]bool) {
	final := strings.TrimSpace(res.Final)
	text := final
	if text == "" {
		text = fmt.Sprintf("(%s finished turn %d without a written answer.)", w.cfg.WorkerID, rec.N)
	}
	// The registry and presence first: once the manager has the answer,
	// status and list say so.
	w.setReason(ctx, "idle", "", true, time.Time{})
	w.cfg.Presence.SetState(ctx, stateIdle)
	for _, target := range w.replyToOpenAsks(ctx, rec, batch, fitText(text)) {
		messaged[target] = true
	}
	if !messaged[manager] {
		w.send(ctx, rec, manager, fitText(text))
	}
}

// failed reports a failed turn to the manager (and to the askers of the
// batch), shows it in status, and backs off.
func (w *wakeLoop) failed(ctx context.Context, rec *harness.TurnRecord, res harness.TurnResult, manager string, batch []intercom.MessageView) {
	var b strings.Builder
	fmt.Fprintf(&b, "agent-fleet: turn %d of worker %s (%s) failed: %s", rec.N, w.cfg.WorkerID, w.cfg.Spec.Kind, res.Error)
	if tail := lastLines(rec.ErrorLines, 5); len(tail) > 0 && !(len(tail) == 1 && strings.Contains(res.Error, tail[0])) {
		b.WriteString("\nIts last error output:\n  " + strings.Join(tail, "\n  "))
	}
	fmt.Fprintf(&b, "\n%s is idle: your next message starts a new turn", w.cfg.WorkerID)
	if w.state.Consecutive > 1 {
		fmt.Fprintf(&b, ", not before %s (%d failed turns in a row)", w.state.NextTurnAt.Local().Format("15:04:05"), w.state.Consecutive)
	}
	b.WriteString(".")
	report := fitText(b.String())
	// The registry and presence first: once the manager has the report,
	// status and list say it.
	w.setReason(ctx, "turn-failed", fmt.Sprintf("turn %d failed: %s", rec.N, res.Error), true, time.Time{})
	w.cfg.Presence.SetState(ctx, fmt.Sprintf("failed: turn %d: %s", rec.N, oneLine(res.Error)))
	replied := w.replyToOpenAsks(ctx, rec, batch, report)
	if !contains(replied, manager) {
		w.send(ctx, rec, manager, report)
	}
}

// replyToOpenAsks answers the batch's asks that are still pending with
// text; it returns who got a reply.
func (w *wakeLoop) replyToOpenAsks(ctx context.Context, rec *harness.TurnRecord, batch []intercom.MessageView, text string) []string {
	var out []string
	if !hasAsk(batch) {
		return nil
	}
	pending, err := w.cfg.Session.Pending(ctx, intercom.PendingRequest{})
	if err != nil {
		rec.Undelivered = append(rec.Undelivered, "replies: "+err.Error())
		return nil
	}
	open := map[string]bool{}
	for _, a := range pending.Asks {
		open[a.AskID] = true
	}
	for _, m := range batch {
		if !m.ExpectsReply || !open[m.AskID] {
			continue
		}
		res, err := w.cfg.Session.Reply(ctx, intercom.ReplyRequest{AskID: m.AskID, Text: text})
		switch {
		case err != nil:
			rec.Undelivered = append(rec.Undelivered, "reply to "+m.From.ID+": "+err.Error())
		case !res.OK:
			rec.Undelivered = append(rec.Undelivered, "reply to "+m.From.ID+": "+cmp.Or(res.Reason, res.Code))
		default:
			rec.Delivered = append(rec.Delivered, "reply to "+m.From.ID)
			out = append(out, m.From.ID)
		}
	}
	return out
}

// send sends a turn's outcome to the manager. A manager that is not
// connected gets it when it connects: it is held (and so is everything
// after it, to keep the order) and sent by deliverHeld.
func (w *wakeLoop) send(ctx context.Context, rec *harness.TurnRecord, to, text string) {
	if to == "" {
		rec.Undelivered = append(rec.Undelivered, "no manager to send to")
		return
	}
	w.heldMu.Lock()
	defer w.heldMu.Unlock()
	if len(w.held) > 0 {
		w.holdLocked(rec, to, text)
		return
	}
	res, err := w.cfg.Session.Send(ctx, intercom.SendRequest{To: to, Text: text})
	switch {
	case err == nil && !res.OK && retryLater(res.Code):
		w.holdLocked(rec, to, text)
	case err != nil:
		rec.Undelivered = append(rec.Undelivered, to+": "+err.Error())
		w.cfg.Logger.Warn("could not send to the manager", "manager", to, "err", err)
	case !res.OK:
		rec.Undelivered = append(rec.Undelivered, to+": "+cmp.Or(res.Reason, res.Code))
		w.cfg.Logger.Warn("the manager did not receive the turn's outcome", "manager", to, "code", res.Code, "reason", res.Reason)
	default:
		rec.Delivered = append(rec.Delivered, to)
	}
}

// retryLater: the failure is the recipient's absence, which ends.
func retryLater(code string) bool {
	switch wire.FailureCode(code) {
	case wire.FailSessionNotFound, wire.FailRecipientDisconnected, wire.FailDeliveryTimeout:
		return true
	}
	return false
}

// holdLocked keeps an outcome for the manager until it connects. Called
// with heldMu held.
func (w *wakeLoop) holdLocked(rec *harness.TurnRecord, to, text string) {
	w.held = append(w.held, harness.HeldMessage{To: to, Turn: rec.N, Text: text, HeldAt: w.now()})
	if n := len(w.held) - maxHeld; n > 0 {
		w.cfg.Logger.Warn("dropping the oldest outcomes held for the manager", "dropped", n)
		w.held = slices.Delete(w.held, 0, n)
	}
	rec.Undelivered = append(rec.Undelivered, to+": "+harness.HeldNote)
	w.saveHeldLocked()
}

func (w *wakeLoop) saveHeldLocked() {
	if err := harness.WriteHeld(w.cfg.Dir, w.held); err != nil {
		w.cfg.Logger.Warn("could not write the held outcomes", "err", err)
	}
}

// deliverHeld sends held outcomes, in order, to the current manager when a
// session joins and every heldRetry, until ctx ends.
func (w *wakeLoop) deliverHeld(ctx context.Context) {
	tick := time.NewTicker(w.cfg.HeldRetry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.cfg.Joined:
		case <-tick.C:
		}
		w.heldMu.Lock()
		if len(w.held) > 0 {
			w.flushHeldLocked(ctx)
		}
		w.heldMu.Unlock()
	}
}

// flushHeldLocked sends what is held until the manager is found absent
// again. An adoption since moves the outcomes to the new manager. Called
// with heldMu held.
func (w *wakeLoop) flushHeldLocked(ctx context.Context) {
	manager := w.manager(ctx)
	if manager == "" {
		return
	}
	sent := 0
	for _, h := range w.held {
		res, err := w.cfg.Session.Send(ctx, intercom.SendRequest{To: manager, Text: h.Text})
		if err != nil || (!res.OK && retryLater(res.Code)) {
			break
		}
		if !res.OK {
			w.cfg.Logger.Warn("a held outcome was refused; dropped", "turn", h.Turn, "manager", manager, "code", res.Code, "reason", res.Reason)
		}
		sent++
	}
	if sent > 0 {
		w.held = slices.Delete(w.held, 0, sent)
		w.saveHeldLocked()
	}
}

// setReason records the worker's turn state in the registry (status and
// list show it); lastError "" clears a turn failure when clear is set;
// pausedUntil is when a rate limit's pause ends (zero: not paused by one).
func (w *wakeLoop) setReason(ctx context.Context, reason, lastError string, clear bool, pausedUntil time.Time) {
	reg, err := w.cfg.Registry.Get(ctx)
	if err != nil || reg == nil {
		return
	}
	_, err = reg.Update(context.WithoutCancel(ctx), w.cfg.WorkerID, w.cfg.RunID, func(r *fleet.Worker) error {
		if r.State != fleet.StateRunning && r.State != fleet.StateProvisioning {
			return nil // ended or stopping: the turn record is history
		}
		r.StateReason, r.PausedUntil = reason, pausedUntil
		if lastError != "" || clear {
			r.LastError = lastError
		}
		return nil
	})
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		w.cfg.Logger.Warn("could not record the turn in the registry", "err", err)
	}
}

func (w *wakeLoop) saveState() {
	if err := harness.WriteTurnState(w.cfg.Dir, &w.state); err != nil {
		w.cfg.Logger.Warn("could not write the turn record", "err", err)
	}
}

// withClosedAsks is batch with the asks that are no longer pending shown
// as plain messages: a pause's notice answered its manager's (tell), so an
// intercom_reply to them would fail; the turn's final answer reaches the
// asker as a message instead.
func (w *wakeLoop) withClosedAsks(ctx context.Context, batch []intercom.MessageView) []intercom.MessageView {
	if !hasAsk(batch) {
		return batch
	}
	pending, err := w.cfg.Session.Pending(ctx, intercom.PendingRequest{})
	if err != nil {
		return batch
	}
	open := map[string]bool{}
	for _, a := range pending.Asks {
		open[a.AskID] = true
	}
	out := slices.Clone(batch)
	for i := range out {
		if out[i].ExpectsReply && !open[out[i].AskID] {
			out[i].ExpectsReply, out[i].AskID = false, ""
		}
	}
	return out
}

func hasAsk(batch []intercom.MessageView) bool {
	for _, m := range batch {
		if m.ExpectsReply {
			return true
		}
	}
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Presence states: a coding agent waiting for messages, and a command
// worker (which works until it ends).
const (
	stateIdle    = "idle"
	stateWorking = "working"
)

// oneLine is s with its whitespace runs, newlines included, made one
// space: a presence status is one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// fitText keeps a message text inside the wire limit.
func fitText(s string) string {
	if len(s) <= wire.MaxTextBytes {
		return s
	}
	note := fmt.Sprintf("\n\n[… cut by agent-fleet: the answer was %d bytes, the intercom limit is %d]", len(s), wire.MaxTextBytes)
	cut := wire.MaxTextBytes - len(note)
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + note
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// batcher times batches (spec §5.6).
type batcher struct {
	mu            sync.Mutex
	pending       bool
	first, last   time.Time
	notify        chan struct{}
	quiet, maxAge time.Duration // zero: batchQuiet, batchMaxWait
}

// arrived notes a message received at t.
func (b *batcher) arrived(t time.Time) {
	b.mu.Lock()
	if !b.pending {
		b.pending, b.first = true, t
	}
	b.last = t
	b.mu.Unlock()
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// due is when the pending batch should be flushed:
// min(last+quiet, first+maxAge).
func (b *batcher) due() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.pending {
		return time.Time{}, false
	}
	quiet, maxAge := b.quiet, b.maxAge
	if quiet == 0 {
		quiet = batchQuiet
	}
	if maxAge == 0 {
		maxAge = batchMaxWait
	}
	d := b.last.Add(quiet)
	if m := b.first.Add(maxAge); m.Before(d) {
		d = m
	}
	return d, true
}

// take starts a new batch.
func (b *batcher) take() {
	b.mu.Lock()
	b.pending = false
	b.mu.Unlock()
}

// turnTracker is the Ops a coding-agent worker's holder serves: the
// session's, noting to whom the harness sent, asked or replied during a
// turn (so that its final answer does not message the manager twice).
type turnTracker struct {
	intercom.Ops
	mu      sync.Mutex
	targets map[string]bool
}

func (t *turnTracker) begin() {
	t.mu.Lock()
	t.targets = map[string]bool{}
	t.mu.Unlock()
}

// end returns who the turn messaged.
func (t *turnTracker) end() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.targets
	t.targets = nil
	if out == nil {
		out = map[string]bool{}
	}
	return out
}

func (t *turnTracker) note(res *intercom.SendResult) {
	if res == nil || !res.OK {
		return
	}
	t.mu.Lock()
	if t.targets != nil {
		t.targets[cmp.Or(res.TargetID, res.To)] = true
	}
	t.mu.Unlock()
}

// Send implements intercom.Ops.
func (t *turnTracker) Send(ctx context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	res, err := t.Ops.Send(ctx, req)
	if err == nil {
		t.note(res)
	}
	return res, err
}

// Ask implements intercom.Ops.
func (t *turnTracker) Ask(ctx context.Context, req intercom.AskRequest) (*intercom.AskResult, error) {
	res, err := t.Ops.Ask(ctx, req)
	if err == nil && res != nil {
		t.note(&res.SendResult)
	}
	return res, err
}

// Reply implements intercom.Ops.
func (t *turnTracker) Reply(ctx context.Context, req intercom.ReplyRequest) (*intercom.SendResult, error) {
	res, err := t.Ops.Reply(ctx, req)
	if err == nil {
		t.note(res)
	}
	return res, err
}
