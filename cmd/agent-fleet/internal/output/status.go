package output

import (
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// Status is one worker in full as `status --json` prints it and
// agent_fleet status returns it: the record, the unit's state, its
// processes (pid and executable name, at most 64; processCount is the full
// count), how lease activity is judged ("verified" or "sender-id") and a
// coding-agent worker's turns.
type Status struct {
	Worker       Worker    `json:"worker"`
	UnitActive   string    `json:"unitActiveState"`
	UnitSub      string    `json:"unitSubState,omitempty"`
	Processes    []Process `json:"processes"`
	ProcessCount int       `json:"processCount"`
	// LeaseActivity: "verified" or "sender-id" (see fleet.Status).
	LeaseActivity string `json:"leaseActivity,omitempty"`
	// Turns: a coding-agent worker's turns.
	Turns *harness.TurnState `json:"turns,omitempty"`
	// Resources: what a live worker's cgroup uses now (its limits are
	// worker.limits).
	Resources *Resources `json:"resources,omitempty"`
	// Worktree: what the worker's worktree holds now (its record is the
	// worker's "worktree").
	Worktree *WorktreeNow `json:"worktree,omitempty"`
}

// Process is a process of a worker's cgroup.
type Process struct {
	PID  int    `json:"pid"`
	Name string `json:"name"`
}

// StatusReport is a status verb's outcome. LiveUnknown: no user manager
// answered, so the unit's state is unknown ("unknown" in
// unitActiveState, and liveState "unknown" on a live worker).
type StatusReport struct {
	St          *fleet.Status
	LiveUnknown bool
}

// ViewStatus is st's JSON view.
func ViewStatus(st *fleet.Status) Status { return viewStatus(st, false) }

func viewStatus(st *fleet.Status, unknown bool) Status {
	v := Status{Worker: ViewWorker(st.Worker), UnitActive: st.Unit.ActiveState, UnitSub: st.Unit.SubState,
		ProcessCount: st.ProcessCount, Processes: []Process{}, LeaseActivity: st.LeaseActivity, Turns: utcTurns(st.Turns),
		Resources: viewResources(st.Usage), Worktree: viewWorktreeNow(st.Worktree)}
	switch {
	case unknown:
		v.UnitActive, v.UnitSub = LiveUnknown, ""
		if st.Worker.State.Live() {
			v.Worker.LiveState = LiveUnknown
		}
	case st.Unit.Gone():
		v.UnitActive = "not-loaded"
	}
	for _, p := range st.Processes {
		v.Processes = append(v.Processes, Process{PID: p.PID, Name: p.Name})
	}
	return v
}

// utcTurns is t with every time in UTC, as all fleet JSON has them (the
// shim records its turns in its own local time).
func utcTurns(t *harness.TurnState) *harness.TurnState {
	if t == nil {
		return nil
	}
	c := *t
	c.NextTurnAt = utc(t.NextTurnAt)
	if t.Pause != nil {
		p := *t.Pause
		p.Since, p.Until = utc(p.Since), utc(p.Until)
		c.Pause = &p
	}
	for _, r := range []**harness.TurnRecord{&c.Current, &c.Last} {
		if *r != nil {
			rec := **r
			rec.StartedAt, rec.EndedAt = utc(rec.StartedAt), utc(rec.EndedAt)
			if rec.RateLimit != nil {
				rl := *rec.RateLimit
				rl.ResetAt = utc(rl.ResetAt)
				rec.RateLimit = &rl
			}
			*r = &rec
		}
	}
	c.Held = make([]harness.HeldMessage, len(t.Held))
	for i, h := range t.Held {
		h.HeldAt = utc(h.HeldAt)
		c.Held[i] = h
	}
	if t.Held == nil {
		c.Held = nil
	}
	return &c
}

// utc is t in UTC; the zero time stays zero (omitted).
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// JSON implements Report.
func (r StatusReport) JSON() any { return viewStatus(r.St, r.LiveUnknown) }

// Structured implements Report.
func (r StatusReport) Structured() any { return viewStatus(r.St, r.LiveUnknown) }

// Text implements Report: the same lines on both surfaces.
func (r StatusReport) Text(s Surface) string { return statusText(r.St, r.LiveUnknown, s) }

// WorkerStatusText shows one worker for people: state, role, turns,
// manager, lease, unit, cgroup, command, cwd, log, error and processes, one
// line each, every string from the record escaped (Inline).
func WorkerStatusText(st *fleet.Status) string { return statusText(st, false, CLI) }

// statusText is WorkerStatusText; with unknown, the state is the last
// known one and the unit's state is unknown.
func statusText(st *fleet.Status, unknown bool, s Surface) string {
	var b strings.Builder
	w := st.Worker
	fmt.Fprintf(&b, "Worker %s (run %s, generation %d)\n", Inline(w.ID), Inline(w.RunID), w.Generation)
	state := StateText(w)
	if w.StateReason != "" && w.State.Live() {
		state += " (" + reasonText(w.StateReason) + ")"
	}
	if w.StopReason != "" {
		state += ", stop: " + reasonText(w.StopReason)
	}
	if unknown && w.State.Live() {
		state += " (last known: no user manager answers)"
	}
	fmt.Fprintf(&b, "  state:    %s\n", state)
	if w.Paused() {
		fmt.Fprintf(&b, "  paused:   %s\n", pausedText(w, st.Usage, s))
	}
	if w.NeedsInput != "" && w.State.Live() {
		fmt.Fprintf(&b, "  needs:    %s, from %s\n", Inline(w.NeedsInput), Inline(w.Manager))
	}
	if w.Role != "" {
		fmt.Fprintf(&b, "  role:     %s\n", Inline(w.Role))
	}
	writeTimes(&b, w, time.Now())
	writeTurns(&b, w, st.Turns)
	fmt.Fprintf(&b, "  manager:  %s (spawned by %s)\n", Inline(w.Manager), Inline(w.FirstManager))
	if l := LeaseText(st); l != "" {
		fmt.Fprintf(&b, "  lease:    %s\n", l)
	}
	unit := unitText(st)
	if unknown {
		unit = "state unknown"
	}
	fmt.Fprintf(&b, "  unit:     %s (%s)\n", Inline(w.Unit), Inline(unit))
	if w.ControlGroup != "" {
		fmt.Fprintf(&b, "  cgroup:   %s\n", Inline(w.ControlGroup))
	}
	if l := LimitsText(w.Limits); l != "" {
		fmt.Fprintf(&b, "  limits:   %s\n", l)
	}
	if st.Usage != nil {
		if u := usageText(st.Usage, w.Limits); u != "" {
			fmt.Fprintf(&b, "  uses:     %s\n", u)
		}
	}
	fmt.Fprintf(&b, "  command:  %s\n  cwd:      %s\n", ShellJoin(w.Command), Inline(w.Cwd))
	fmt.Fprintf(&b, "  profile:  %s\n", Inline(ProfileText(w)))
	writeWorktree(&b, w.Worktree, st.Worktree)
	if w.LogPath != "" {
		fmt.Fprintf(&b, "  log:      %s\n", Inline(w.LogPath))
	}
	if w.LastError != "" {
		fmt.Fprintf(&b, "  error:    %s\n", Inline(w.LastError))
	}
	if st.ProcessCount > 0 {
		fmt.Fprintf(&b, "  processes (%d):\n", st.ProcessCount)
		for _, p := range st.Processes {
			fmt.Fprintf(&b, "    %d %s\n", p.PID, Inline(p.Name))
		}
		if st.ProcessCount > len(st.Processes) {
			fmt.Fprintf(&b, "    … %d more\n", st.ProcessCount-len(st.Processes))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// writeTimes shows when a worker started and, once it ended, when and
// after how long; while it runs, for how long it has.
func writeTimes(b *strings.Builder, w *fleet.Worker, now time.Time) {
	started := w.ReadyAt
	if started.IsZero() {
		started = w.CreatedAt
	}
	if started.IsZero() {
		return
	}
	fmt.Fprintf(b, "  started:  %s\n", HumanWhen(started, now))
	switch {
	case !w.EndedAt.IsZero():
		fmt.Fprintf(b, "  ended:    %s, ran %s\n", HumanWhen(w.EndedAt, now), Span(w.EndedAt.Sub(started)))
	case w.State.Live():
		fmt.Fprintf(b, "  running:  for %s\n", Span(now.Sub(started)))
	}
}

// LeaseText describes a live worker's idle lease for people ("" once it
// ended).
func LeaseText(st *fleet.Status) string {
	w := st.Worker
	if !w.State.Live() {
		return ""
	}
	if w.LeaseDeadline.IsZero() {
		return "none (no idle expiry)"
	}
	now := time.Now()
	if w.Paused() {
		return fmt.Sprintf("%s idle lease, held while paused (%s left when paused; resume moves it on)",
			Span(w.LeaseDuration), Span(w.LeaseDeadline.Sub(w.FrozenAt)))
	}
	t := fmt.Sprintf("%s idle lease, until %s", Span(w.LeaseDuration), HumanWhen(w.LeaseDeadline, now))
	if !w.LastActivity.IsZero() {
		t += ", last activity " + HumanWhen(w.LastActivity, now)
	}
	if w.CheckpointAttempts > 0 {
		t += fmt.Sprintf(", %s sent, stop at %s", plural(w.CheckpointAttempts, "checkpoint"), HumanWhen(w.GraceDeadline, now))
	}
	switch st.LeaseActivity {
	case fleet.ActivityVerified:
		t += "; renewed by its messages to its manager (verified by cgroup)"
	case fleet.ActivitySenderID:
		t += "; renewed by messages carrying its id (no agent-fleet local API: sender ids are not verified)"
	}
	return t
}

func unitText(st *fleet.Status) string {
	if st.Unit.Gone() {
		return "not loaded"
	}
	return st.Unit.ActiveState + "/" + st.Unit.SubState
}

// writeTurns shows a coding-agent worker's turns: its conversation, the
// turn running now, and how the last one ended (with its error lines).
func writeTurns(b *strings.Builder, w *fleet.Worker, t *harness.TurnState) {
	if t == nil {
		return
	}
	conv := "no conversation yet"
	if t.Session != "" {
		conv = "conversation " + Inline(t.Session)
	}
	fmt.Fprintf(b, "  harness:  %s, %s; %s, %d failed\n", t.Kind, conv, plural(t.Turns, "turn"), t.Failures)
	usage := w.Usage
	if usage.Turns == 0 {
		usage = t.Usage // the registry could not take it
	}
	fmt.Fprintf(b, "  usage:    %s\n", UsageText(usage))
	if !w.Budget.IsZero() {
		fmt.Fprintf(b, "  budget:   %s\n", budgetText(w))
	}
	if p := t.Pause; p != nil && w.State.Live() {
		fmt.Fprintf(b, "  paused:   %s\n", pauseText(p))
	}
	if c := t.Current; c != nil {
		fmt.Fprintf(b, "  turn:     #%d (%s) running since %s\n", c.N, turnReason(c), HumanWhen(c.StartedAt, time.Now()))
	}
	if l := t.Last; l != nil {
		how := "ok"
		switch {
		case l.RateLimit != nil:
			how = "ended on a " + pauseWhat(l.RateLimit.Kind) + " (not a failure): " + Inline(l.Error)
		case !l.OK:
			how = "failed: " + Inline(l.Error)
		}
		fmt.Fprintf(b, "  last:     #%d (%s) ended %s after %s, %s\n", l.N, turnReason(l), HumanWhen(l.EndedAt, time.Now()),
			l.EndedAt.Sub(l.StartedAt).Round(100*time.Millisecond), how)
		if !l.OK && l.RateLimit == nil {
			for _, line := range l.ErrorLines[max(0, len(l.ErrorLines)-5):] {
				fmt.Fprintf(b, "            | %s\n", Inline(line))
			}
		}
		if l.Final != "" {
			first, _, _ := strings.Cut(l.Final, "\n")
			fmt.Fprintf(b, "  answer:   %s\n", Inline(ShortText(first, 100)))
		}
		if len(l.Delivered) > 0 {
			fmt.Fprintf(b, "  sent to:  %s\n", Inline(strings.Join(l.Delivered, ", ")))
		}
		for _, u := range l.Undelivered {
			if to, ok := strings.CutSuffix(u, ": "+harness.HeldNote); ok {
				if len(t.Held) == 0 {
					fmt.Fprintf(b, "  sent to:  %s (held until it connected)\n", Inline(to))
				}
				continue // else the held line says it
			}
			fmt.Fprintf(b, "  unsent:   %s\n", Inline(u))
		}
	}
	if len(t.Held) > 0 {
		h := t.Held[0]
		what := plural(len(t.Held), "message")
		if w.State.Live() {
			fmt.Fprintf(b, "  held:     %s for %s since %s (not connected): sent when it connects\n", what, Inline(h.To), HumanTime(h.HeldAt))
		} else {
			fmt.Fprintf(b, "  unsent:   %s held for %s since %s %s never delivered: the worker ended first (logs has every turn's output)\n", what, Inline(h.To), HumanTime(h.HeldAt), wasWere(len(t.Held)))
		}
	}
	if t.Consecutive > 1 && t.NextTurnAt.After(time.Now()) {
		fmt.Fprintf(b, "  backoff:  %s in a row; no turn before %s\n", plural(t.Consecutive, "failed turn"), HumanWhen(t.NextTurnAt, time.Now()))
	}
}

// pauseText says why a worker is paused, until when, and what it keeps:
// "rate limit until … (in 4m): turn 3 ended on it (…); it keeps 2
// messages".
func pauseText(p *harness.Pause) string {
	kept := plural(p.Messages, "message")
	if p.Task {
		kept = "its task"
	}
	if p.Reason == harness.PauseBudget {
		return fmt.Sprintf("budget %s: it keeps %s until renew --budget-usd or --budget-tokens raises it", Inline(p.Error), kept)
	}
	return fmt.Sprintf("%s until %s: turn %d ended on it (%s); it keeps %s and resumes the same conversation then",
		pauseWhat(p.Reason), HumanWhen(p.Until, time.Now()), p.Turn, Inline(ShortText(p.Error, 160)), kept)
}

// pauseWhat names a rate-limit kind for people.
func pauseWhat(kind string) string {
	if kind == harness.Overloaded {
		return "provider overload"
	}
	return "rate limit"
}

func turnReason(r *harness.TurnRecord) string {
	if r.Reason == "task" {
		return "task"
	}
	return plural(r.Messages, "message")
}
