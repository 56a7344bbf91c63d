package output

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// SpawnReport is a spawn's outcome: the new worker.
type SpawnReport struct{ W *fleet.Worker }

// JSON implements Report.
func (r SpawnReport) JSON() any { return ViewWorker(r.W) }

// Structured implements Report.
func (r SpawnReport) Structured() any { return ViewWorker(r.W) }

// Text implements Report.
func (r SpawnReport) Text(s Surface) string {
	w := r.W
	pid := "" // unknown (never "pid 0")
	if w.MainPID > 0 {
		pid = fmt.Sprintf(", pid %d", w.MainPID)
	}
	t, sep := fmt.Sprintf("Spawned worker %s: run %s, unit %s%s, %s.", w.ID, w.RunID, w.Unit, pid, StateText(w)), "\n"
	if s == Tool {
		t, sep = fmt.Sprintf("Spawned worker %s (run %s, unit %s%s, %s). It is on the intercom as %q; you are its manager.",
			w.ID, w.RunID, w.Unit, pid, StateText(w), w.ID), " "
	}
	if w.Worktree != nil {
		t += sep + worktreeSpawnNote(w.Worktree)
	}
	if w.ProfileDegraded != "" {
		t += sep + fmt.Sprintf("Its %s profile is DEGRADED: %s.", ProfileOf(w), w.ProfileDegraded)
	}
	if harness.IsKind(w.Kind) {
		t += sep + HarnessSpawnNote(w)
	}
	return t
}

// HarnessSpawnNote says what a coding-agent worker does next.
func HarnessSpawnNote(w *fleet.Worker) string {
	if w.Task == "" {
		return fmt.Sprintf("It has no task yet: your first message to %s starts its first turn, and each turn's final answer reaches you as a message.", w.ID)
	}
	return fmt.Sprintf("Its first turn (the task) is running; its final answer reaches you as a message. Send %s more work with intercom send; status shows its turns.", w.ID)
}

// WorkersReport is a list of workers (list, adopt, renew).
type WorkersReport struct {
	Verb string // "list", "adopt" or "renew"
	WS   []*fleet.Worker
	// Others is, for a list of the caller's own workers that came out
	// empty, how many records other managers have: what list --all shows.
	Others int
	// LiveUnknown: no user manager answered; live states are the
	// registry's last known (each live worker's liveState is "unknown").
	LiveUnknown bool
	// Hosts, for list --all on a host joined to others, are the other
	// hosts' workers: each worker then has its host.
	Hosts *HostsList
}

// JSON implements Report: an array of workers.
func (r WorkersReport) JSON() any {
	if r.Hosts != nil {
		return viewHostsWorkers(r.WS, r.LiveUnknown, r.Hosts)
	}
	return viewWorkersUnknown(r.WS, r.LiveUnknown)
}

// Structured implements Report: the array under "workers" (over several
// hosts, with what is known of those that did not answer under
// "hostNotes").
func (r WorkersReport) Structured() any {
	m := map[string]any{"workers": r.JSON()}
	if r.Hosts != nil {
		if notes := r.Hosts.notes(); len(notes) > 0 {
			m["hostNotes"] = notes
		}
	}
	return m
}

// unknownNote is what a model is told when no user manager answered.
const unknownNote = "No systemd user manager answers: these are the registry's last known states, and whether live workers still run is unknown."

// Text implements Report.
func (r WorkersReport) Text(s Surface) string {
	switch r.Verb {
	case "adopt":
		return adoptText(r.WS, s)
	case "renew":
		return renewText(r.WS, s)
	case "pause", "resume":
		return pauseResumeText(r.Verb, r.WS, s)
	}
	if r.Hosts != nil {
		if s == Tool {
			return hostsLines(r.WS, r.Hosts)
		}
		return hostsTable(r.WS, r.LiveUnknown, r.Hosts)
	}
	if len(r.WS) == 0 && r.Others > 0 {
		if s == Tool {
			return fmt.Sprintf("You have no workers (%s of other managers: list with all: true shows them).", plural(r.Others, "worker"))
		}
		return fmt.Sprintf("No workers of yours (%d of other managers: list --all).", r.Others)
	}
	if s == Tool {
		if r.LiveUnknown {
			return unknownNote + "\n" + workerLines(r.WS)
		}
		return workerLines(r.WS)
	}
	return workersTable(r.WS, r.LiveUnknown)
}

// WorkersTable is list's table for people.
func WorkersTable(ws []*fleet.Worker) string { return workersTable(ws, false) }

// workersTable is list's table; with unknown, live states read "running
// (last known)".
func workersTable(ws []*fleet.Worker, unknown bool) string {
	if len(ws) == 0 {
		return "No workers."
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUN\tSTATE\tROLE\tMANAGER\tAGE\tLEASE\tUSAGE\tCOMMAND")
	now := time.Now()
	for _, w := range ws {
		state := StateText(w)
		if p := pausedState(w, CLI); p != "" {
			state += " (" + p + ")"
		} else if harness.IsKind(w.Kind) && w.State.Live() && w.StateReason != "" {
			state += " (" + reasonText(w.StateReason) + ")"
		}
		if unknown && w.State.Live() {
			state += " (last known)"
		}
		lease := "-"
		switch {
		case !w.LeaseDeadline.IsZero() && w.Paused():
			lease = "held (paused)"
		case !w.LeaseDeadline.IsZero() && w.State.Live():
			lease = Span(w.LeaseDeadline.Sub(now)) + " left"
			if w.LeaseDeadline.Before(now) {
				lease = "expired " + Span(now.Sub(w.LeaseDeadline)) + " ago"
			}
		}
		role := Inline(w.Role)
		if role == "" {
			role = "-"
		}
		usage := "-"
		if harness.IsKind(w.Kind) {
			usage = usageCell(w)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", Inline(w.ID), Inline(w.RunID), state, role, Inline(w.Manager),
			Span(now.Sub(w.CreatedAt)), lease, usage, WorkerCommand(w))
	}
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// workerLines is list for a model: "- id [state] role, manager m: command".
func workerLines(ws []*fleet.Worker) string {
	if len(ws) == 0 {
		return "No workers."
	}
	lines := make([]string, len(ws))
	for i, w := range ws {
		role := ""
		if w.Role != "" {
			role = " " + Inline(w.Role) + ","
		}
		state := StateText(w)
		if p := pausedState(w, Tool); p != "" {
			state += ", " + p
		}
		lines[i] = fmt.Sprintf("- %s [%s]%s manager %s: %s", Inline(w.ID), state, role, Inline(w.Manager), WorkerCommand(w))
		if harness.IsKind(w.Kind) && (w.Usage.Turns > 0 || !w.Budget.IsZero()) {
			lines[i] += "; usage " + usageCell(w)
		}
		if w.Worktree != nil {
			lines[i] += "; worktree branch " + Inline(w.Worktree.Branch)
		}
	}
	return strings.Join(lines, "\n")
}

// pauseResumeText says what pause or resume did, and what it means for
// the worker's lease and session.
func pauseResumeText(verb string, ws []*fleet.Worker, s Surface) string {
	lines := make([]string, len(ws))
	for i, w := range ws {
		lease := ""
		if !w.LeaseDeadline.IsZero() {
			lease = "; its idle lease is held"
			if verb == "resume" {
				lease = "; its idle lease runs again, until " + HumanWhen(w.LeaseDeadline, time.Now())
			}
		}
		if verb == "pause" {
			lines[i] = fmt.Sprintf("Paused %s (run %s): its processes are frozen and use no CPU%s. "+
				"Messages to it wait until it is resumed (agent-fleet resume %s); stop still works.", w.ID, w.RunID, lease, w.ID)
			if s == Tool {
				lines[i] = fmt.Sprintf("Paused %s: its processes are frozen%s. It cannot read or answer messages until you resume it (action resume).", w.ID, lease)
			}
			continue
		}
		lines[i] = fmt.Sprintf("Resumed %s (run %s): it runs again%s.", w.ID, w.RunID, lease)
	}
	return strings.Join(lines, "\n")
}

func adoptText(ws []*fleet.Worker, s Surface) string {
	if len(ws) == 0 {
		return "No orphaned workers to adopt."
	}
	if s == Tool {
		ids := make([]string, len(ws))
		leased := false
		for i, w := range ws {
			ids[i] = w.ID
			leased = leased || !w.LeaseDeadline.IsZero()
		}
		t := "You now manage " + strings.Join(ids, ", ")
		if leased {
			t += "; leases renewed"
		}
		return t + ". Their messages now reach you."
	}
	lines := make([]string, len(ws))
	for i, w := range ws {
		if w.LeaseDeadline.IsZero() {
			lines[i] = fmt.Sprintf("You now manage %s (run %s); it has no idle lease.", w.ID, w.RunID)
			continue
		}
		lines[i] = fmt.Sprintf("You now manage %s (run %s); its lease is renewed.", w.ID, w.RunID)
	}
	return strings.Join(lines, "\n")
}

func renewText(ws []*fleet.Worker, s Surface) string {
	if len(ws) == 0 {
		if s == Tool {
			return "You have no live workers."
		}
		return "No live workers of yours to renew."
	}
	lines := make([]string, len(ws))
	for i, w := range ws {
		switch {
		case s == Tool && w.LeaseDeadline.IsZero():
			lines[i] = fmt.Sprintf("%s has no idle lease.", w.ID)
		case s == Tool:
			lines[i] = fmt.Sprintf("%s renewed until %s.", w.ID, toolTime(w.LeaseDeadline))
		case w.LeaseDeadline.IsZero():
			lines[i] = fmt.Sprintf("Renewed %s (it has no idle lease).", w.ID)
		default:
			lines[i] = fmt.Sprintf("Renewed %s until %s.", w.ID, HumanWhen(w.LeaseDeadline, time.Now()))
		}
		if !w.Budget.IsZero() {
			lines[i] += " Budget: " + budgetText(w) + "."
		}
	}
	return strings.Join(lines, "\n")
}

// Stop is a stop's outcome as --json prints it: the worker's record after
// the stop, whether it had already ended, the pids that outlived the unit's
// stop and were SIGKILLed through the cgroup, and those that survived even
// that (then the stop failed).
type Stop struct {
	Worker       Worker     `json:"worker"`
	AlreadyEnded bool       `json:"alreadyEnded"`
	Killed       []int      `json:"killed"`
	Survivors    []Survivor `json:"survivors"`
}

// Survivor is a process still in a stopped worker's cgroup. Its keys are
// "PID" and "Name" (as since the first release).
type Survivor struct {
	PID  int
	Name string
}

// StopReport is a stop's outcome.
type StopReport struct{ Res *fleet.StopResult }

// ViewStop is res's JSON view.
func ViewStop(res *fleet.StopResult) Stop {
	// Empty lists, never null: "nothing was killed", "nothing survived".
	v := Stop{Worker: ViewWorker(res.Worker), AlreadyEnded: res.AlreadyEnded, Killed: []int{}, Survivors: []Survivor{}}
	v.Killed = append(v.Killed, res.Killed...)
	for _, p := range res.Survivors {
		v.Survivors = append(v.Survivors, Survivor{PID: p.PID, Name: p.Name})
	}
	return v
}

// JSON implements Report.
func (r StopReport) JSON() any { return ViewStop(r.Res) }

// Structured implements Report.
func (r StopReport) Structured() any { return ViewStop(r.Res) }

// Text implements Report: the same on both surfaces.
func (r StopReport) Text(Surface) string {
	w := r.Res.Worker
	switch {
	case r.Res.AlreadyEnded && len(r.Res.Killed) > 0:
		return fmt.Sprintf("Worker %s had already ended (%s); %s it left %s killed; nothing of it is left in its cgroup.", w.ID, w.State,
			plural(len(r.Res.Killed), "process"), wasWere(len(r.Res.Killed)))
	case r.Res.AlreadyEnded:
		return fmt.Sprintf("Worker %s had already ended (%s).", w.ID, w.State)
	case len(r.Res.Killed) > 0:
		return fmt.Sprintf("Stopped %s; %s outlived the stop and %s killed; nothing of it is left in its cgroup.", w.ID,
			plural(len(r.Res.Killed), "process"), wasWere(len(r.Res.Killed)))
	default:
		return fmt.Sprintf("Stopped %s; nothing of it is left in its cgroup.", w.ID)
	}
}

// StopItem is one worker's stop among several: what the stop did, why it
// failed, or both (a stop whose cleanup could not be verified).
type StopItem struct {
	ID  string
	Res *fleet.StopResult
	Err error
}

// StopOutcome is one worker's part of a stop of several as --json prints
// it: its id, ok, the error when it failed, and the stop's view when there
// was a worker to stop.
type StopOutcome struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	*Stop
}

// StopsReport is a stop of several workers (ids or all), each reported.
type StopsReport struct{ Stops []StopItem }

// JSON implements Report: one StopOutcome per worker, in the order given.
func (r StopsReport) JSON() any {
	out := make([]StopOutcome, len(r.Stops))
	for i, it := range r.Stops {
		out[i] = StopOutcome{ID: it.ID, OK: it.Err == nil}
		if it.Err != nil {
			out[i].Error = it.Err.Error()
		}
		if it.Res != nil {
			v := ViewStop(it.Res)
			out[i].Stop = &v
		}
	}
	return out
}

// Structured implements Report: the outcomes under "stops".
func (r StopsReport) Structured() any { return map[string]any{"stops": r.JSON()} }

// Text implements Report: a line per worker.
func (r StopsReport) Text(s Surface) string {
	if len(r.Stops) == 0 {
		if s == Tool {
			return "You have no live workers to stop."
		}
		return "No live workers of yours to stop."
	}
	lines := make([]string, len(r.Stops))
	for i, it := range r.Stops {
		switch {
		case it.Err != nil:
			lines[i] = fmt.Sprintf("Not stopped: %v", it.Err)
		default:
			lines[i] = StopReport{Res: it.Res}.Text(s)
		}
	}
	return strings.Join(lines, "\n")
}

// StopStepText is a signal a stop sent, for a person watching it on a
// terminal: "w1: SIGTERM sent; SIGKILL in 10 s".
func StopStepText(st fleet.StopStep) string {
	switch {
	case st.Signal == "SIGTERM":
		return fmt.Sprintf("%s: SIGTERM sent; SIGKILL in %s", st.ID, seconds(st.Grace))
	case st.Grace > 0:
		return fmt.Sprintf("%s: still running %s after SIGTERM; SIGKILL sent", st.ID, seconds(st.Grace))
	default:
		return fmt.Sprintf("%s: SIGKILL sent", st.ID)
	}
}

// seconds is d for people: "8 s" when whole seconds, else Go's form.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}

// LogsReport is a worker's log lines.
type LogsReport struct {
	ID    string // the worker's
	Lines []fleet.LogLine
	// Timestamps: show when each line was written ("times" in JSON).
	Timestamps bool
	// LiveUnknown: no user manager answered (the lines are read all the
	// same; whether the worker still writes them is unknown).
	LiveUnknown bool
}

// JSON implements Report.
func (r LogsReport) JSON() any { return r.Structured() }

// Structured implements Report: {"lines": […]}, with Timestamps
// "times": […] beside it (RFC 3339, "" when unknown), and "liveState":
// "unknown" when no user manager answered.
func (r LogsReport) Structured() any {
	lines := make([]string, len(r.Lines))
	for i, l := range r.Lines {
		lines[i] = l.Text
	}
	res := map[string]any{"lines": lines}
	if r.Timestamps {
		times := make([]string, len(r.Lines))
		for i, l := range r.Lines {
			times[i] = Stamp(l.At)
		}
		res["times"] = times
	}
	if r.LiveUnknown {
		res["liveState"] = LiveUnknown
	}
	return res
}

// Text implements Report: the lines as they are (LogLineText). An empty
// log is nothing for people, as tail prints nothing (a script reading
// stdout gets no made-up line; EmptyLogNote is for a terminal's stderr),
// and a sentence for a model, which would otherwise get an empty text.
func (r LogsReport) Text(s Surface) string {
	if len(r.Lines) == 0 && s == Tool {
		return "(" + EmptyLogNote(r.ID) + ")"
	}
	out := make([]string, len(r.Lines))
	for i, l := range r.Lines {
		out[i] = LogLineText(l, r.Timestamps, s)
	}
	return strings.Join(out, "\n")
}

// logStampLayout is a log line's time for people: local, milliseconds,
// zone.
const logStampLayout = "2006-01-02 15:04:05.000 MST"

// LogLineText is a log line as it was written, with timestamps preceded
// by when: local time for people, RFC 3339 in UTC for a model, "?" padded
// to the same width when the time is unknown.
func LogLineText(l fleet.LogLine, timestamps bool, s Surface) string {
	if !timestamps {
		return l.Text
	}
	switch {
	case s == Tool && l.At.IsZero():
		return "? " + l.Text
	case s == Tool:
		return l.At.UTC().Format(time.RFC3339Nano) + " " + l.Text
	case l.At.IsZero():
		return fmt.Sprintf("%-*s %s", len(time.Now().Format(logStampLayout)), "?", l.Text)
	}
	return l.At.Local().Format(logStampLayout) + " " + l.Text
}

// EmptyLogNote says that id's log has no lines.
func EmptyLogNote(id string) string { return "the log of " + Inline(id) + " is empty" }

// DeletedReport is what forget or prune deleted, and what became of the
// worktrees of the records deleted (and of those deleted before whose
// worktrees were kept).
type DeletedReport struct {
	ID        string // forget's worker; "" for prune
	Deleted   int
	Worktrees []fleet.WorktreeOutcome
}

// JSON implements Report.
func (r DeletedReport) JSON() any { return r.Structured() }

// Structured implements Report: {"deleted": n}, and "worktrees", a
// WorktreeOutcome each, when there were any.
func (r DeletedReport) Structured() any {
	if len(r.Worktrees) > 0 {
		return map[string]any{"deleted": r.Deleted, "worktrees": viewOutcomes(r.Worktrees)}
	}
	return map[string]any{"deleted": r.Deleted}
}

// Text implements Report.
func (r DeletedReport) Text(Surface) string {
	t := fmt.Sprintf("Pruned %s.", plural(r.Deleted, "ended record"))
	if r.ID != "" {
		t = fmt.Sprintf("Forgot %s of %s.", plural(r.Deleted, "ended record"), r.ID)
	}
	if len(r.Worktrees) > 0 {
		t += "\n" + outcomeText(r.Worktrees)
	}
	return t
}

// CleanupReport is a janitor run's outcome; Skipped when another process
// runs one.
type CleanupReport struct {
	Rep     *fleet.CleanupReport
	Skipped bool
}

// JSON implements Report.
func (r CleanupReport) JSON() any { return r.Structured() }

// Structured implements Report: the janitor's report, or {"skipped": "in
// progress"}.
func (r CleanupReport) Structured() any {
	if r.Skipped {
		return map[string]any{"skipped": "in progress"}
	}
	return r.Rep
}

// Text implements Report.
func (r CleanupReport) Text(s Surface) string {
	if r.Skipped {
		if s == Tool {
			return "A cleanup is in progress in another process."
		}
		return "Cleanup in progress in another process; nothing to do."
	}
	if len(r.Rep.Actions) == 0 {
		return "Nothing to clean up."
	}
	var lines []string
	for _, a := range r.Rep.Actions {
		state := "would do"
		if a.Done {
			state = "done"
		}
		if a.Error != "" {
			state = "failed: " + a.Error
		}
		reason := a.Reason
		if a.Format != "" {
			times := make([]any, len(a.Times))
			for i, t := range a.Times {
				times[i] = "spawn"
				if !t.IsZero() {
					times[i] = HumanTime(t)
				}
			}
			reason = fmt.Sprintf(a.Format, times...)
		}
		if s == Tool {
			lines = append(lines, fmt.Sprintf("- %s %s: %s (%s)", a.Kind, Inline(a.ID), Inline(reason), Inline(state)))
		} else {
			lines = append(lines, fmt.Sprintf("%-10s %-20s %s (%s)", a.Kind, Inline(a.ID), Inline(reason), Inline(state)))
		}
	}
	if s == CLI && !r.Rep.Executed {
		lines = append(lines, "Preview only: run with --execute to act.")
	}
	return strings.Join(lines, "\n")
}
