//go:build !windows

package shim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
)

// The wake loop in process: a real broker and real sessions, the turn
// process replaced by a scripted stand-in that answers as Claude Code's
// --output-format json does. (The end-to-end tests with real processes
// under systemd are in cmd/agent-fleet.)

type scriptedTurn struct {
	argv   []string
	prompt string
}

type wakeWorld struct {
	t       *testing.T
	p       intercom.Paths
	boss    *intercom.Session
	worker  *intercom.Session
	tracker *turnTracker
	loop    *wakeLoop
	mu      sync.Mutex
	turns   []scriptedTurn
	// behave, when set, runs inside a turn before it answers.
	behave func(prompt string)
	// limits is how many of the next turns end on a rate limit (the
	// result's text limitText, else Claude Code's 429).
	limits    int
	limitText string
	// totals are the tokens each conversation consumed so far: the stand-in
	// reports them as Claude Code does, running totals carried across a
	// resume; every turn that works adds turnTokens.
	totals map[string]int64
	clock  *jumpClock
	ready  chan struct{}
	stop   context.CancelFunc
	done   chan error
}

// turnTokens is what each stand-in turn that works consumes, half input
// and half output, at $0.0001 a token.
const turnTokens = 80

// jumpClock runs with the system clock, and tests move it ahead: a timer
// on it fires when the system clock gets there or a jump does.
type jumpClock struct {
	mu     sync.Mutex
	ahead  time.Duration
	timers map[*jumpTimer]bool
}

type jumpTimer struct {
	at time.Time
	ch chan time.Time
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.ahead)
}

func (c *jumpClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timers == nil {
		c.timers = map[*jumpTimer]bool{}
	}
	jt := &jumpTimer{at: time.Now().Add(c.ahead + d), ch: make(chan time.Time, 1)}
	c.timers[jt] = true
	real := time.AfterFunc(d, func() { c.fire(jt) })
	return jt.ch, func() bool {
		real.Stop()
		c.mu.Lock()
		defer c.mu.Unlock()
		live := c.timers[jt]
		delete(c.timers, jt)
		return live
	}
}

func (c *jumpClock) fire(jt *jumpTimer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timers[jt] {
		delete(c.timers, jt)
		jt.ch <- time.Now().Add(c.ahead)
	}
}

// Jump moves the clock d ahead, firing the timers that reach.
func (c *jumpClock) Jump(d time.Duration) {
	c.mu.Lock()
	c.ahead += d
	now := time.Now().Add(c.ahead)
	var due []*jumpTimer
	for jt := range c.timers {
		if !jt.at.After(now) {
			due = append(due, jt)
		}
	}
	c.mu.Unlock()
	for _, jt := range due {
		c.fire(jt)
	}
}

// waiting reports whether a timer waits for a moment within a second of
// at (or, with past, for at or later): the loop sleeps until then.
func (c *jumpClock) waiting(at time.Time, past bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for jt := range c.timers {
		if d := jt.at.Sub(at); d > -time.Second && (d < time.Second || past) {
			return true
		}
	}
	return false
}

func openTestSession(t *testing.T, p intercom.Paths, id string) *intercom.Session {
	t.Helper()
	s, err := intercom.OpenSession(context.Background(), intercom.SessionConfig{Paths: p,
		Identity: intercom.Identity{SessionID: id, Name: id, Model: "test", Cwd: "/", PID: os.Getpid(),
			StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func newWakeWorld(t *testing.T, task string, tweak ...func(*wakeConfig)) *wakeWorld {
	dir, err := os.MkdirTemp("", "afw")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &wakeWorld{t: t, p: intercom.NewPaths(dir), ready: make(chan struct{}), totals: map[string]int64{}, clock: &jumpClock{}}
	intercomtest.StartBroker(t, func(c *broker.Config) { c.Paths = w.p })
	w.boss = openTestSession(t, w.p, "boss")
	joined := make(chan string, 1) // as the shim wires it
	w.worker, err = intercom.OpenSession(context.Background(), intercom.SessionConfig{Paths: w.p,
		Identity: intercom.Identity{SessionID: "w1", Name: "w1", Model: "test", Cwd: "/", PID: os.Getpid(),
			StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()},
		OnSessionJoined: func(id string) {
			select {
			case joined <- id:
			default:
			}
		}})
	require.NoError(t, err)
	t.Cleanup(func() { w.worker.Close() })
	w.tracker = &turnTracker{Ops: w.worker}
	regs := fleet.NewRegistryHandle(fleet.RegistryPath(w.p), true)
	t.Cleanup(regs.Close)
	wdir := fleet.WorkerDir(w.p, "w1", "0123456789ab")
	require.NoError(t, harness.WriteSpec(wdir, &harness.Spec{Kind: "claude", Command: []string{"/bin/claude"}, Task: task, Cwd: "/"}))
	cfg := wakeConfig{WorkerID: "w1", RunID: "0123456789ab", Dir: wdir,
		Spec:    &harness.Spec{Kind: "claude", Command: []string{"/bin/claude"}, Task: task, Cwd: "/"},
		Session: w.worker, Tracker: w.tracker, Registry: regs, FirstManager: "boss",
		MCP: harness.MCPServer{Command: "/bin/agent-fleet"}, Backoff: 300 * time.Millisecond, Run: w.run,
		Joined: joined, HeldRetry: time.Hour, Clock: w.clock}
	for _, f := range tweak {
		f(&cfg)
	}
	w.loop, err = newWakeLoop(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	w.stop, w.done = cancel, make(chan error, 1)
	go func() { w.done <- w.loop.run(ctx, func() { close(w.ready) }) }()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// run is the stand-in harness: Claude Code's command line and output.
func (w *wakeWorld) run(ctx context.Context, cmd *harness.TurnCommand, _ turnProcOptions, started func()) turnExit {
	if started != nil {
		started()
	}
	w.mu.Lock()
	w.turns = append(w.turns, scriptedTurn{argv: cmd.Argv, prompt: cmd.Stdin})
	behave := w.behave
	limited := w.limits > 0
	if limited {
		w.limits--
	}
	limitText := cmp.Or(w.limitText, "API Error: Request rejected (429) · this may be a temporary capacity issue.")
	w.mu.Unlock()
	session := ""
	if i := slices.Index(cmd.Argv, "--resume"); i >= 0 {
		session = cmd.Argv[i+1]
	} else if i := slices.Index(cmd.Argv, "--session-id"); i >= 0 {
		session = cmd.Argv[i+1]
	}
	if behave != nil {
		behave(cmd.Stdin)
	}
	if ctx.Err() != nil {
		return turnExit{Stopped: true, Status: -1}
	}
	// Claude Code's result: its usage the conversation's running totals.
	out := func(isErr bool, text string, extra map[string]any) []byte {
		w.mu.Lock()
		tot := w.totals[session]
		w.mu.Unlock()
		v := map[string]any{"type": "result", "subtype": "success", "is_error": isErr, "result": text, "session_id": session,
			"total_cost_usd": float64(tot) / 10000,
			"modelUsage": map[string]any{"claude-test": map[string]any{"inputTokens": tot / 2, "outputTokens": tot / 2,
				"cacheReadInputTokens": 0, "cacheCreationInputTokens": 0, "costUSD": float64(tot) / 10000}}}
		maps.Copy(v, extra)
		b, _ := json.Marshal(v)
		return b
	}
	if limited {
		return turnExit{Stdout: out(true, limitText, map[string]any{"api_error_status": 429, "api_error_type": "rate_limit_error", "terminal_reason": "api_error"}), Status: 1}
	}
	// It acts on, and its answer names, the last line of the last message.
	lines := strings.Split(cmd.Stdin, "\n")
	last := ""
	for i := len(lines) - 1; i >= 0 && last == ""; i-- {
		if l := lines[i]; l != "" && !strings.HasPrefix(l, "This is an ask") && !strings.HasPrefix(l, "Answer each ask") {
			last = l
		}
	}
	switch {
	case strings.HasPrefix(last, "NOCREDS"):
		b, _ := json.Marshal(map[string]any{"type": "result", "subtype": "success", "is_error": true,
			"result": "Not logged in · Please run /login", "session_id": session, "total_cost_usd": 0})
		return turnExit{Stdout: b, Status: 1}
	case strings.HasPrefix(last, "CRASH"):
		return turnExit{StderrTail: []string{"panic: boom", "goroutine 1"}, Status: 2}
	case strings.HasPrefix(last, "SLOW"): // killed at --turn-timeout: no output
		return turnExit{TimedOut: true, Status: -1}
	}
	w.mu.Lock()
	w.totals[session] += turnTokens
	w.mu.Unlock()
	return turnExit{Stdout: out(false, "done: "+last, nil)}
}

func (w *wakeWorld) turnsSoFar() []scriptedTurn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.turns)
}

// received waits for the boss to have n unread messages and returns them.
func (w *wakeWorld) received(n int) []intercom.MessageView {
	w.t.Helper()
	var got []intercom.MessageView
	require.Eventually(w.t, func() bool {
		res, err := w.boss.Pending(context.Background(), intercom.PendingRequest{})
		got = res.Unread
		return err == nil && len(got) >= n
	}, 10*time.Second, 10*time.Millisecond, "boss got %d of %d messages", len(got), n)
	res, err := w.boss.Pending(context.Background(), intercom.PendingRequest{MarkRead: true})
	require.NoError(w.t, err)
	return res.Unread
}

// stateWhen waits for the turn record to satisfy ok and returns it.
func (w *wakeWorld) stateWhen(ok func(*harness.TurnState) bool) *harness.TurnState {
	w.t.Helper()
	var st *harness.TurnState
	require.Eventually(w.t, func() bool {
		var err error
		st, err = harness.ReadTurnState(fleet.WorkerDir(w.p, "w1", "0123456789ab"))
		return err == nil && st != nil && ok(st)
	}, 10*time.Second, 10*time.Millisecond)
	return st
}

func (w *wakeWorld) send(from *intercom.Session, text string) {
	w.t.Helper()
	res, err := from.Send(context.Background(), intercom.SendRequest{To: "w1", Text: text})
	require.NoError(w.t, err)
	require.True(w.t, res.OK, "%+v", res)
}

func TestWakeTaskThenResumedTurns(t *testing.T) {
	w := newWakeWorld(t, "write the parser")
	<-w.ready
	got := w.received(1)
	require.Equal(t, "done: write the parser", got[0].Text, "the task turn's final answer reaches the manager")
	first := w.turnsSoFar()[0]
	sid := first.argv[slices.Index(first.argv, "--session-id")+1]
	require.Contains(t, first.prompt, "Your task from boss")

	// The second turn is held while a burst arrives (below), so that the
	// burst is one turn however slow the machine.
	release := make(chan struct{})
	w.mu.Lock()
	w.behave = func(prompt string) {
		if strings.Contains(prompt, "now the tests") {
			<-release
		}
	}
	w.mu.Unlock()
	w.send(w.boss, "now the tests")
	require.Eventually(t, func() bool { return len(w.turnsSoFar()) == 2 }, 30*time.Second, 10*time.Millisecond)

	// A burst while a turn runs is one turn after it.
	for i := range 5 {
		w.send(w.boss, fmt.Sprintf("item %d", i))
	}
	close(release)
	got = w.received(1)
	require.Equal(t, "done: now the tests", got[0].Text)
	second := w.turnsSoFar()[1]
	require.Equal(t, sid, second.argv[slices.Index(second.argv, "--resume")+1], "the same conversation resumed")
	require.NotContains(t, second.argv, "--session-id")
	require.Contains(t, second.prompt, "📨 From boss:\nnow the tests")

	got = w.received(1)
	require.Len(t, w.turnsSoFar(), 3, "five messages, one turn")
	burst := w.turnsSoFar()[2].prompt
	require.Contains(t, burst, "📨 Intercom batch (5 messages)")
	require.Contains(t, burst, "[5/5] From boss:\nitem 4")
	require.Equal(t, "done: item 4", got[0].Text)

	st := w.stateWhen(func(st *harness.TurnState) bool { return len(st.Last.Delivered) > 0 })
	require.Equal(t, 3, st.Turns)
	require.Equal(t, sid, st.Session)
	require.True(t, st.Last.OK)
	require.Equal(t, []string{"boss"}, st.Last.Delivered)
}

func TestWakeFinalAnswerRouting(t *testing.T) {
	w := newWakeWorld(t, "")
	<-w.ready
	require.Empty(t, w.turnsSoFar(), "no task: no turn until a message")
	peer := openTestSession(t, w.p, "peer")

	// The turn messaged the manager itself: its final answer is not sent
	// a second time.
	w.behave = func(prompt string) {
		if strings.Contains(prompt, "TELL-BOSS") {
			_, err := w.tracker.Send(context.Background(), intercom.SendRequest{To: "boss", Text: "progress from the turn"})
			require.NoError(t, err)
		}
	}
	w.send(w.boss, "TELL-BOSS")
	got := w.received(1)
	require.Equal(t, "progress from the turn", got[0].Text)
	time.Sleep(300 * time.Millisecond)
	res, _ := w.boss.Pending(context.Background(), intercom.PendingRequest{})
	require.Empty(t, res.Unread, "not told twice")

	// An ask the turn left unanswered gets the final answer as its reply,
	// threaded; the manager hears of it too.
	ans, err := peer.Ask(context.Background(), intercom.AskRequest{To: "w1", Text: "what is 6*7?", Wait: 10 * time.Second})
	require.NoError(t, err)
	require.True(t, ans.Replied, "%+v", ans)
	require.Equal(t, "done: what is 6*7?", ans.Reply.Text)
	require.Equal(t, ans.MessageID, ans.Reply.ReplyTo)
	got = w.received(1)
	require.Equal(t, "done: what is 6*7?", got[0].Text)
	require.Contains(t, w.turnsSoFar()[1].prompt, "· ask ask-")

	// Messages the turn read through intercom_pending (marked read) are not
	// batched again.
	w.behave = func(prompt string) {
		if strings.Contains(prompt, "READ-MID-TURN") {
			w.send(peer, "arrives during the turn")
			require.Eventually(t, func() bool {
				r, _ := w.tracker.Pending(context.Background(), intercom.PendingRequest{})
				return len(r.Unread) == 1
			}, 5*time.Second, 10*time.Millisecond)
			_, err := w.tracker.Pending(context.Background(), intercom.PendingRequest{MarkRead: true})
			require.NoError(t, err)
		}
	}
	w.send(w.boss, "READ-MID-TURN")
	w.received(1)
	time.Sleep(batchMaxWait + 300*time.Millisecond)
	require.Len(t, w.turnsSoFar(), 3, "the message read during the turn started no turn")

	// One that nobody read during the turn starts the next.
	w.behave = func(prompt string) {
		if strings.Contains(prompt, "LEAVE-UNREAD") {
			w.send(peer, "read me next turn")
		}
	}
	w.send(w.boss, "LEAVE-UNREAD")
	w.received(2)
	require.Len(t, w.turnsSoFar(), 5, "the message left unread started the next turn")
	require.Contains(t, w.turnsSoFar()[4].prompt, "📨 From peer:\nread me next turn")
}

// A turn ended at its time limit says no session, but the conversation it
// resumed is still there: the next turn resumes it, with no recap.
func TestWakeTimedOutTurnKeepsTheConversation(t *testing.T) {
	w := newWakeWorld(t, "")
	<-w.ready
	w.send(w.boss, "first")
	require.Equal(t, "done: first", w.received(1)[0].Text)
	sid := argAfterTest(w.turnsSoFar()[0].argv, "--session-id")
	w.send(w.boss, "SLOW")
	require.Contains(t, w.received(1)[0].Text, "the turn ran past its limit")
	st := w.stateWhen(func(st *harness.TurnState) bool { return st.Last != nil && st.Last.N == 2 })
	require.Equal(t, sid, st.Session)
	require.False(t, st.ContextLost)
	w.stateWhen(func(st *harness.TurnState) bool { return st.NextTurnAt.IsZero() || !st.NextTurnAt.After(time.Now()) })
	w.send(w.boss, "third")
	require.Equal(t, "done: third", w.received(1)[0].Text)
	third := w.turnsSoFar()[2]
	require.Equal(t, sid, argAfterTest(third.argv, "--resume"), "the same conversation")
	require.NotContains(t, third.prompt, "new conversation")
}

func TestWakeFailedTurnsAreReportedAndBackedOff(t *testing.T) {
	w := newWakeWorld(t, "NOCREDS task")
	<-w.ready
	got := w.received(1)
	require.Contains(t, got[0].Text, "turn 1 of worker w1 (claude) failed: Not logged in · Please run /login")
	require.Contains(t, got[0].Text, "your next message starts a new turn")
	st := w.stateWhen(func(st *harness.TurnState) bool { return st.Last != nil })
	require.False(t, st.Last.OK)
	require.Equal(t, 1, st.Consecutive)
	firstSession := st.Session
	require.NotEmpty(t, firstSession, "Claude reported the conversation it began")

	// A crash with no output: reported with its error lines; the next
	// turn waits for the backoff.
	w.send(w.boss, "CRASH please")
	got = w.received(1)
	require.Contains(t, got[0].Text, "turn 2 of worker w1 (claude) failed: goroutine 1 (exit status 2)")
	require.Contains(t, got[0].Text, "panic: boom")
	require.Contains(t, got[0].Text, "2 failed turns in a row")
	st = w.stateWhen(func(st *harness.TurnState) bool { return st.Last.N == 2 })
	require.Equal(t, 2, st.Consecutive)
	require.True(t, st.ContextLost)
	require.Empty(t, st.Session, "a conversation that cannot be resumed is dropped")
	backoffUntil := st.NextTurnAt

	// The next message works, in a new conversation told its task again,
	// not before the backoff.
	w.send(w.boss, "try again")
	got = w.received(1)
	require.Equal(t, "done: try again", got[0].Text)
	third := w.turnsSoFar()[2]
	require.Contains(t, third.prompt, "The task you were spawned for:)\n\nNOCREDS task")
	require.Contains(t, third.argv, "--session-id")
	st = w.stateWhen(func(st *harness.TurnState) bool { return st.Last.N == 3 })
	require.Zero(t, st.Consecutive)
	require.Equal(t, 2, st.Failures)
	require.False(t, st.Last.StartedAt.Before(backoffUntil), "the turn waited for the backoff")
}

func TestWakeStopDuringATurn(t *testing.T) {
	w := newWakeWorld(t, "")
	<-w.ready
	inTurn := make(chan struct{})
	w.behave = func(string) {
		close(inTurn)
		time.Sleep(200 * time.Millisecond)
	}
	w.send(w.boss, "long work")
	<-inTurn
	w.stop()
	select {
	case err := <-w.done:
		require.NoError(t, err)
		w.done <- err
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not end on stop")
	}
	st, err := harness.ReadTurnState(fleet.WorkerDir(w.p, "w1", "0123456789ab"))
	require.NoError(t, err)
	require.Equal(t, "stopped during the turn", st.Last.Error)
	time.Sleep(100 * time.Millisecond)
	res, _ := w.boss.Pending(context.Background(), intercom.PendingRequest{})
	require.Empty(t, res.Unread, "a stopped turn reports nothing")
}

func TestBatcherTiming(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := batcher{notify: make(chan struct{}, 1)}
	_, ok := b.due()
	require.False(t, ok)
	// A burst: flushed 300 ms after its last message.
	for _, ms := range []int{0, 100, 200} {
		b.arrived(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	due, ok := b.due()
	require.True(t, ok)
	require.Equal(t, t0.Add(500*time.Millisecond), due)
	// A steady stream: at most 1 s after the first.
	for ms := 300; ms <= 1500; ms += 200 {
		b.arrived(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	due, _ = b.due()
	require.Equal(t, t0.Add(time.Second), due)
	b.take()
	_, ok = b.due()
	require.False(t, ok)
	b.arrived(t0.Add(2 * time.Second))
	due, _ = b.due()
	require.Equal(t, t0.Add(2300*time.Millisecond), due, "a new batch starts its own window")
}

// The manager is read per turn: after an adoption, answers go to the new
// manager; the registry shows the turn state.
func TestWakeFollowsTheCurrentManager(t *testing.T) {
	w := newWakeWorld(t, "")
	reg, err := fleet.OpenRegistry(context.Background(), fleet.RegistryPath(w.p))
	require.NoError(t, err)
	defer reg.Close()
	require.NoError(t, reg.Insert(context.Background(), &fleet.Worker{ID: "w1", RunID: "0123456789ab", Kind: "claude",
		Unit: fleet.WorkerUnitName("w1", "0123456789ab"), State: fleet.StateRunning, Manager: "boss", FirstManager: "boss"}))
	<-w.ready
	w.send(w.boss, "first")
	require.Equal(t, "done: first", w.received(1)[0].Text)
	require.Eventually(t, func() bool {
		rec, err := reg.GetRun(context.Background(), "w1", "0123456789ab")
		return err == nil && rec.StateReason == "idle"
	}, 5*time.Second, 10*time.Millisecond)

	boss2 := openTestSession(t, w.p, "boss2")
	_, err = reg.Update(context.Background(), "w1", "0123456789ab", func(r *fleet.Worker) error { r.Manager = "boss2"; return nil })
	require.NoError(t, err)
	w.send(w.boss, "second")
	var got []intercom.MessageView
	require.Eventually(t, func() bool {
		res, err := boss2.Pending(context.Background(), intercom.PendingRequest{})
		got = res.Unread
		return err == nil && len(got) == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "done: second", got[0].Text, "the adopting manager gets the answer")
	require.Contains(t, w.turnsSoFar()[1].prompt, "your manager: boss2")
	require.Contains(t, argAfterTest(w.turnsSoFar()[1].argv, "--append-system-prompt"), `working for your manager "boss2"`)

	w.send(boss2, "NOCREDS")
	require.Eventually(t, func() bool {
		rec, err := reg.GetRun(context.Background(), "w1", "0123456789ab")
		return err == nil && rec.StateReason == "turn-failed" && strings.Contains(rec.LastError, "turn 3 failed: Not logged in")
	}, 10*time.Second, 10*time.Millisecond, "status shows the failed turn")
}

func argAfterTest(argv []string, flag string) string {
	if i := slices.Index(argv, flag); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

// A manager that is not connected when a turn ends gets its outcomes when
// it connects, in order; until then status shows them held.
func TestWakeHoldsOutcomesForAnAbsentManager(t *testing.T) {
	w := newWakeWorld(t, "")
	<-w.ready
	require.NoError(t, w.boss.Close())
	other := openTestSession(t, w.p, "other")
	w.send(other, "first")
	st := w.stateWhen(func(st *harness.TurnState) bool {
		return len(st.Held) == 1 && st.Last != nil && len(st.Last.Undelivered) > 0
	})
	require.Equal(t, "boss", st.Held[0].To)
	require.Equal(t, "done: first", st.Held[0].Text)
	require.Contains(t, st.Last.Undelivered, "boss: not connected; held and sent when it connects")
	w.send(other, "NOCREDS")
	st = w.stateWhen(func(st *harness.TurnState) bool { return len(st.Held) == 2 })
	require.Equal(t, 2, st.Held[1].Turn)

	w.boss = openTestSession(t, w.p, "boss") // the manager connects
	got := w.received(2)
	require.Equal(t, "done: first", got[0].Text)
	require.Contains(t, got[1].Text, "turn 2 of worker w1 (claude) failed: Not logged in")
	w.stateWhen(func(st *harness.TurnState) bool { return len(st.Held) == 0 })
	require.NoFileExists(t, filepath.Join(w.loop.cfg.Dir, "held.json"))

	// Connected again: outcomes go out at once, nothing is held.
	w.send(w.boss, "third")
	require.Equal(t, "done: third", w.received(1)[0].Text)
}

// Held outcomes are retried on a timer too: a manager in another scope is
// never announced to the worker.
func TestWakeRetriesHeldOutcomes(t *testing.T) {
	w := newWakeWorld(t, "", func(c *wakeConfig) { c.Joined, c.HeldRetry = nil, 50*time.Millisecond })
	<-w.ready
	require.NoError(t, w.boss.Close())
	other := openTestSession(t, w.p, "other")
	w.send(other, "first")
	w.stateWhen(func(st *harness.TurnState) bool { return len(st.Held) == 1 })
	w.boss = openTestSession(t, w.p, "boss")
	require.Equal(t, "done: first", w.received(1)[0].Text)
}

// An outcome past the wire limit is cut at a character boundary, and says
// so.
func TestFitText(t *testing.T) {
	long := strings.Repeat("é", 200<<10)
	fit := fitText(long)
	require.LessOrEqual(t, len(fit), 256<<10)
	require.Contains(t, fit, "cut by agent-fleet")
	require.True(t, json.Valid([]byte(`"`+strings.ReplaceAll(fit, "\n", `\n`)+`"`)), "still valid UTF-8")
}
