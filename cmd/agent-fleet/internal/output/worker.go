package output

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// Worker is a worker record as --json prints it and agent_fleet returns
// it: one incarnation (id + run) with its unit, state, manager, lease and
// how it ended. Times are RFC 3339 in UTC; durations are whole seconds.
// How it ended: exitCode is the status as a shell reports it (the exit
// status, or 128 + the signal that killed it), exitKind is "exited",
// "killed" or "dumped" (systemd's ExecMainCode), and exitStatus is the exit
// status or the signal number (systemd's ExecMainStatus). A coding-agent
// worker carries its usage (Usage: what its turns consumed), its budget
// when it has one, while a rate limit pauses it pausedUntil, and while it
// waits for its manager's answer needsInput.
type Worker struct {
	ID            string   `json:"id"`
	RunID         string   `json:"runId"`
	Generation    int      `json:"generation"`
	Kind          string   `json:"kind"`
	Role          string   `json:"role,omitempty"`
	Task          string   `json:"task,omitempty"`
	Cwd           string   `json:"cwd"`
	Command       []string `json:"command"`
	EnvKeys       []string `json:"envKeys,omitempty"`
	Unit          string   `json:"unit"`
	MainPID       int      `json:"mainPid,omitempty"`
	ControlGroup  string   `json:"controlGroup,omitempty"`
	State         string   `json:"state"`
	StateReason   string   `json:"stateReason,omitempty"`
	Manager       string   `json:"manager"`
	FirstManager  string   `json:"firstManager"`
	LeaseDeadline string   `json:"leaseDeadline,omitempty"`
	LeaseSeconds  int64    `json:"leaseSeconds,omitempty"`
	LastActivity  string   `json:"lastActivity,omitempty"`
	Checkpoints   int      `json:"checkpointsSent,omitempty"`
	GraceDeadline string   `json:"graceDeadline,omitempty"`
	CreatedAt     string   `json:"createdAt"`
	ReadyAt       string   `json:"readyAt,omitempty"`
	EndedAt       string   `json:"endedAt,omitempty"`
	ExitCode      *int     `json:"exitCode,omitempty"`
	ExitKind      string   `json:"exitKind,omitempty"`
	ExitStatus    *int     `json:"exitStatus,omitempty"`
	LastError     string   `json:"lastError,omitempty"`
	StopReason    string   `json:"stopReason,omitempty"`
	LogPath       string   `json:"logPath,omitempty"`
	Usage         *Usage   `json:"usage,omitempty"`
	Budget        *Budget  `json:"budget,omitempty"`
	PausedUntil   string   `json:"pausedUntil,omitempty"`
	// PausedAt is when pause froze the worker (its state is then
	// "paused"); Limits its unit's resource limits.
	PausedAt string  `json:"pausedAt,omitempty"`
	Limits   *Limits `json:"limits,omitempty"`
	// Worktree is the worker's git worktree (spawn --worktree).
	Worktree *Worktree `json:"worktree,omitempty"`
	// Profile is the sandbox profile (trusted for records from before
	// profiles); ProfileDegraded says what of it the user manager did not
	// enforce, omitted when it enforced all of it.
	Profile         string `json:"profile"`
	ProfileDegraded string `json:"profileDegraded,omitempty"`
	// NeedsInput is what a live worker waits for from its manager now (a
	// permission prompt: "permission to run `npm install`"; stateReason
	// needs-input); PermissionWaitSeconds how long such a prompt waits for
	// the answer, when the spawn set it.
	NeedsInput            string `json:"needsInput,omitempty"`
	PermissionWaitSeconds int64  `json:"permissionWaitSeconds,omitempty"`
	// LiveState is "unknown" when no user manager answered and State is
	// the registry's last known live state (the worker may have ended);
	// omitted when systemd was asked, and for ended workers.
	LiveState string `json:"liveState,omitempty"`
	// Host is the node name of the host the worker runs on, in a list of
	// several hosts' workers (list --all on a host joined to others).
	// State is "unreachable" for a worker of a host that does not answer:
	// lastKnownState is then the state its host last published, at
	// publishedAt.
	Host           string `json:"host,omitempty"`
	LastKnownState string `json:"lastKnownState,omitempty"`
	PublishedAt    string `json:"publishedAt,omitempty"`
}

// Limits are a worker's resource limits: memoryMax in bytes, cpuQuota in
// percent of one CPU, tasksMax in tasks; an absent field is no limit.
type Limits struct {
	MemoryMax uint64 `json:"memoryMax,omitempty"`
	CPUQuota  uint32 `json:"cpuQuotaPercent,omitempty"`
	TasksMax  uint64 `json:"tasksMax,omitempty"`
}

// StatePaused is the state lists and status show, and JSON gives, for a
// running worker that pause froze (the registry keeps it running).
const StatePaused = fleet.ShownPaused

// ViewState is the state JSON gives w: StatePaused for a worker pause
// froze, else its registry state.
func ViewState(w *fleet.Worker) string { return w.ShownState() }

// LiveUnknown is Worker.LiveState (and Status.UnitActive) when no user
// manager answered.
const LiveUnknown = "unknown"

// viewWorkersUnknown is ViewWorkers with each live worker's state marked
// unknown (no user manager answered).
func viewWorkersUnknown(ws []*fleet.Worker, unknown bool) []Worker {
	out := ViewWorkers(ws)
	for i, w := range ws {
		if unknown && w.State.Live() {
			out[i].LiveState = LiveUnknown
		}
	}
	return out
}

// Stamp is t in RFC 3339 (UTC, nanoseconds), "" for the zero time.
func Stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ViewWorker is w's JSON view.
func ViewWorker(w *fleet.Worker) Worker {
	v := Worker{ID: w.ID, RunID: w.RunID, Generation: w.Generation, Kind: w.Kind, Role: w.Role, Task: w.Task,
		Cwd: w.Cwd, Command: w.Command, EnvKeys: w.EnvKeys, Unit: w.Unit, MainPID: w.MainPID, ControlGroup: w.ControlGroup,
		State: ViewState(w), StateReason: w.StateReason, Manager: w.Manager, FirstManager: w.FirstManager,
		LeaseDeadline: Stamp(w.LeaseDeadline), LeaseSeconds: int64(w.LeaseDuration / time.Second), LastActivity: Stamp(w.LastActivity),
		Checkpoints: w.CheckpointAttempts, GraceDeadline: Stamp(w.GraceDeadline), CreatedAt: Stamp(w.CreatedAt), ReadyAt: Stamp(w.ReadyAt), EndedAt: Stamp(w.EndedAt),
		LastError: w.LastError, StopReason: w.StopReason, LogPath: w.LogPath,
		Profile: string(ProfileOf(w)), ProfileDegraded: w.ProfileDegraded}
	if harness.IsKind(w.Kind) {
		u := ViewUsage(w.Usage)
		v.Usage = &u
	}
	if !w.Budget.IsZero() {
		v.Budget = &Budget{USD: w.Budget.USD, Tokens: w.Budget.Tokens}
	}
	if w.State.Live() {
		v.PausedUntil, v.NeedsInput = Stamp(w.PausedUntil), w.NeedsInput
	}
	if w.Paused() {
		v.PausedAt = Stamp(w.FrozenAt)
	}
	if !w.Limits.IsZero() {
		v.Limits = &Limits{MemoryMax: w.Limits.MemoryMax, CPUQuota: w.Limits.CPUQuotaPercent, TasksMax: w.Limits.TasksMax}
	}
	v.Worktree = ViewWorktree(w.Worktree)
	v.PermissionWaitSeconds = int64(w.PermissionWait / time.Second)
	if w.HasExit {
		status, code := w.ExitStatus, w.ExitStatus
		if w.ExitCode != "exited" {
			code = 128 + w.ExitStatus // killed or dumped by that signal
		}
		v.ExitCode, v.ExitKind, v.ExitStatus = &code, w.ExitCode, &status
	}
	return v
}

// ProfileOf is w's sandbox profile; trusted for a record from before
// profiles.
func ProfileOf(w *fleet.Worker) fleet.Profile {
	if w.Profile == "" {
		return fleet.ProfileTrusted
	}
	return w.Profile
}

// ProfileText is w's profile for people: "workspace", "workspace
// (degraded: …)".
func ProfileText(w *fleet.Worker) string {
	if w.ProfileDegraded != "" {
		return string(ProfileOf(w)) + " (DEGRADED, " + w.ProfileDegraded + ")"
	}
	return string(ProfileOf(w))
}

// ViewWorkers is the JSON view of ws, never null.
func ViewWorkers(ws []*fleet.Worker) []Worker {
	out := make([]Worker, len(ws))
	for i, w := range ws {
		out[i] = ViewWorker(w)
	}
	return out
}

// ExitText is how a worker ended, for people: "exit 3", "killed by
// signal 9"; "" while it has not.
func ExitText(w *fleet.Worker) string {
	if !w.HasExit {
		return ""
	}
	if w.ExitCode == "exited" {
		return fmt.Sprintf("exit %d", w.ExitStatus)
	}
	return fmt.Sprintf("%s by signal %d", w.ExitCode, w.ExitStatus)
}

// StateText is a worker's state for people, with how it ended when it did:
// "running", "paused", "exited (exit 3)", "failed (killed by signal 9,
// OOM-killed)".
func StateText(w *fleet.Worker) string {
	state := string(w.State)
	if w.Paused() && w.State == fleet.StateRunning {
		state = StatePaused
	}
	e := ExitText(w)
	if w.StateReason == fleet.ReasonOOMKilled && !w.State.Live() {
		e = strings.TrimPrefix(e+", OOM-killed", ", ")
	}
	if e != "" {
		return state + " (" + e + ")"
	}
	return state
}

// WorkerCommand is what a worker runs, for lists: a coding agent's kind
// and model, or the command (at most 40 bytes), escaped for people.
func WorkerCommand(w *fleet.Worker) string {
	if harness.IsKind(w.Kind) {
		if w.Model != "" {
			return w.Kind + " (" + Inline(w.Model) + ")"
		}
		return w.Kind
	}
	return ShortCommand(w.Command)
}

// ShortCommand is argv shell-quoted and joined (ShellJoin), cut to 40
// bytes on a character boundary.
func ShortCommand(argv []string) string {
	s := ShellJoin(argv)
	if len(s) > 40 {
		cut := 37
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// ShortText is s cut to n runes, "…" marking the cut.
func ShortText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// reasonText is a state or stop reason for people: "turn-failed" → "turn
// failed".
func reasonText(r string) string { return strings.ReplaceAll(r, "-", " ") }
