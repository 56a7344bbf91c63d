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
	t, sep := fmt.Sprintf("Spawned worker %s: run %s, unit %s, pid %d, %s.", w.ID, w.RunID, w.Unit, w.MainPID, StateText(w)), "\n"
	if s == Tool {
		t, sep = fmt.Sprintf("Spawned worker %s (run %s, unit %s, pid %d, %s). It is on the intercom as %q; you are its manager.",
			w.ID, w.RunID, w.Unit, w.MainPID, StateText(w), w.ID), " "
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
}

// JSON implements Report: an array of workers.
func (r WorkersReport) JSON() any { return ViewWorkers(r.WS) }

// Structured implements Report: the array under "workers".
func (r WorkersReport) Structured() any { return map[string]any{"workers": ViewWorkers(r.WS)} }

// Text implements Report.
func (r WorkersReport) Text(s Surface) string {
	switch r.Verb {
	case "adopt":
		return adoptText(r.WS, s)
	case "renew":
		return renewText(r.WS, s)
	}
	if s == Tool {
		return workerLines(r.WS)
	}
	return WorkersTable(r.WS)
}

// WorkersTable is list's table for people.
func WorkersTable(ws []*fleet.Worker) string {
	if len(ws) == 0 {
		return "No workers."
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUN\tSTATE\tROLE\tMANAGER\tAGE\tLEASE\tCOMMAND")
	now := time.Now()
	for _, w := range ws {
		state := StateText(w)
		if harness.IsKind(w.Kind) && w.State.Live() && w.StateReason != "" {
			state += " (" + reasonText(w.StateReason) + ")"
		}
		lease := "-"
		if !w.LeaseDeadline.IsZero() && w.State.Live() {
			lease = Span(w.LeaseDeadline.Sub(now)) + " left"
			if w.LeaseDeadline.Before(now) {
				lease = "expired " + Span(now.Sub(w.LeaseDeadline)) + " ago"
			}
		}
		role := w.Role
		if role == "" {
			role = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.RunID, state, role, w.Manager,
			Span(now.Sub(w.CreatedAt)), lease, WorkerCommand(w))
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
			role = " " + w.Role + ","
		}
		lines[i] = fmt.Sprintf("- %s [%s]%s manager %s: %s", w.ID, StateText(w), role, w.Manager, WorkerCommand(w))
	}
	return strings.Join(lines, "\n")
}

func adoptText(ws []*fleet.Worker, s Surface) string {
	if len(ws) == 0 {
		return "No orphaned workers to adopt."
	}
	if s == Tool {
		ids := make([]string, len(ws))
		for i, w := range ws {
			ids[i] = w.ID
		}
		return "You now manage " + strings.Join(ids, ", ") + "; leases renewed. Their messages now reach you."
	}
	lines := make([]string, len(ws))
	for i, w := range ws {
		lines[i] = fmt.Sprintf("You now manage %s (run %s); its lease is renewed.", w.ID, w.RunID)
	}
	return strings.Join(lines, "\n")
}

func renewText(ws []*fleet.Worker, s Surface) string {
	if len(ws) == 0 {
		if s == Tool {
			return "You have no live workers."
		}
		return ""
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

// LogsReport is a worker's last log lines.
type LogsReport struct{ Lines []string }

// JSON implements Report.
func (r LogsReport) JSON() any { return r.Structured() }

// Structured implements Report: {"lines": […]}.
func (r LogsReport) Structured() any {
	lines := r.Lines
	if lines == nil {
		lines = []string{}
	}
	return map[string]any{"lines": lines}
}

// Text implements Report: the lines as they are.
func (r LogsReport) Text(Surface) string { return strings.Join(r.Lines, "\n") }

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
			lines = append(lines, fmt.Sprintf("- %s %s: %s (%s)", a.Kind, a.ID, a.Reason, state))
		} else {
			lines = append(lines, fmt.Sprintf("%-10s %-20s %s (%s)", a.Kind, a.ID, a.Reason, state))
		}
	}
	if s == CLI && !r.Rep.Executed {
		lines = append(lines, "Preview only: run with --execute to act.")
	}
	return strings.Join(lines, "\n")
}
