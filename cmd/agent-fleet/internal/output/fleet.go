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
}

// JSON implements Report: an array of workers.
func (r WorkersReport) JSON() any { return viewWorkersUnknown(r.WS, r.LiveUnknown) }

// Structured implements Report: the array under "workers".
func (r WorkersReport) Structured() any {
	return map[string]any{"workers": viewWorkersUnknown(r.WS, r.LiveUnknown)}
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
		if !w.LeaseDeadline.IsZero() && w.State.Live() {
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
	v := Stop{Worker: ViewWorker(res.Worker), AlreadyEnded: res.AlreadyEnded, Killed: res.Killed}
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
	case r.Res.AlreadyEnded:
		return fmt.Sprintf("Worker %s had already ended (%s).", w.ID, w.State)
	case len(r.Res.Killed) > 0:
		return fmt.Sprintf("Stopped %s; %s outlived the stop and %s killed; its cgroup is empty.", w.ID,
			plural(len(r.Res.Killed), "process"), wasWere(len(r.Res.Killed)))
	default:
		return fmt.Sprintf("Stopped %s; its cgroup is empty.", w.ID)
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

// LogsReport is a worker's last log lines.
type LogsReport struct {
	ID    string // the worker's
	Lines []string
	// LiveUnknown: no user manager answered (the lines are read all the
	// same; whether the worker still writes them is unknown).
	LiveUnknown bool
}

// JSON implements Report.
func (r LogsReport) JSON() any { return r.Structured() }

// Structured implements Report: {"lines": […]}, and "liveState":
// "unknown" when no user manager answered.
func (r LogsReport) Structured() any {
	lines := r.Lines
	if lines == nil {
		lines = []string{}
	}
	if r.LiveUnknown {
		return map[string]any{"lines": lines, "liveState": LiveUnknown}
	}
	return map[string]any{"lines": lines}
}

// Text implements Report: the lines as they are. An empty log is nothing
// for people, as tail prints nothing (a script reading stdout gets no
// made-up line; EmptyLogNote is for a terminal's stderr), and a sentence
// for a model, which would otherwise get an empty text.
func (r LogsReport) Text(s Surface) string {
	if len(r.Lines) == 0 && s == Tool {
		return "(" + EmptyLogNote(r.ID) + ")"
	}
	return strings.Join(r.Lines, "\n")
}

// EmptyLogNote says that id's log has no lines.
func EmptyLogNote(id string) string { return "the log of " + Inline(id) + " is empty" }

// DeletedReport is what forget or prune deleted.
type DeletedReport struct {
	ID      string // forget's worker; "" for prune
	Deleted int
}

// JSON implements Report.
func (r DeletedReport) JSON() any { return r.Structured() }

// Structured implements Report: {"deleted": n}.
func (r DeletedReport) Structured() any { return map[string]any{"deleted": r.Deleted} }

// Text implements Report.
func (r DeletedReport) Text(Surface) string {
	if r.ID != "" {
		return fmt.Sprintf("Forgot %s of %s.", plural(r.Deleted, "ended record"), r.ID)
	}
	return fmt.Sprintf("Pruned %s.", plural(r.Deleted, "ended record"))
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
		if s == Tool {
			lines = append(lines, fmt.Sprintf("- %s %s: %s (%s)", a.Kind, Inline(a.ID), Inline(a.Reason), Inline(state)))
		} else {
			lines = append(lines, fmt.Sprintf("%-10s %-20s %s (%s)", a.Kind, Inline(a.ID), Inline(a.Reason), Inline(state)))
		}
	}
	if s == CLI && !r.Rep.Executed {
		lines = append(lines, "Preview only: run with --execute to act.")
	}
	return strings.Join(lines, "\n")
}
