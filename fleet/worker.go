package fleet

import (
	"fmt"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// State is where a worker incarnation is in its life. The three live states
// (provisioning, running, stopping) hold the id: at most one incarnation of an
// id is live at a time, and the registry enforces it. The four terminal
// states never change back on their own; the registry does not police
// transitions (that is the caller's state machine), only that a state is one
// of these seven and that one id has at most one live incarnation.
type State string

const (
	StateProvisioning State = "provisioning" // record reserved, unit starting (live)
	StateRunning      State = "running"      // the shim signalled READY (live)
	StateStopping     State = "stopping"     // a stop was requested: durable fence (live)
	StateStopped      State = "stopped"      // stopped on request, cleanup verified (terminal)
	StateExited       State = "exited"       // the command ended on its own; see ExitStatus (terminal)
	StateFailed       State = "failed"       // failed spawn or cleanup that could not be verified (terminal)
	StateLost         State = "lost"         // the unit vanished without an observed end (terminal)
)

// States lists every state, live ones first.
var States = []State{
	StateProvisioning, StateRunning, StateStopping,
	StateStopped, StateExited, StateFailed, StateLost,
}

// Live reports whether s holds its id: provisioning, running or stopping.
func (s State) Live() bool {
	switch s {
	case StateProvisioning, StateRunning, StateStopping:
		return true
	}
	return false
}

// Terminal reports whether s is stopped, exited, failed or lost.
func (s State) Terminal() bool {
	switch s {
	case StateStopped, StateExited, StateFailed, StateLost:
		return true
	}
	return false
}

// Valid reports whether s is one of the seven states.
func (s State) Valid() bool { return s.Live() || s.Terminal() }

// Worker is one incarnation of a worker: the record the registry keeps for
// the unit agent-fleet-worker-<ID>-<RunID>.service. An id can have many
// incarnations over time (one per spawn), at most one of them live.
//
// Times are stored with millisecond precision (sub-millisecond parts are
// truncated) and read back in UTC; the zero time.Time means "not yet / none"
// and is stored as 0, so the instant 1970-01-01T00:00:00Z itself reads back as
// the zero time. Durations are stored in whole milliseconds. Command and
// EnvKeys read back as nil when empty.
type Worker struct {
	// ID is the worker id, which is also its intercom session id
	// (intercom.SessionIDPattern). RunID is the incarnation: 12 lowercase hex,
	// never reused for an id.
	ID, RunID string
	// Generation is 1 for an id's first incarnation, +1 per later one; the
	// registry's ledger keeps it across Forget and Prune.
	Generation int
	// Kind is exec | claude | codex | opencode | pi.
	Kind            string
	Role, Task, Cwd string
	// Command is the argv as resolved (absolute argv[0]).
	Command []string
	// EnvKeys names the --env variables. Their values are never stored: they
	// may be secrets.
	EnvKeys                   []string
	Model, Effort, Permission string

	// Unit is agent-fleet-worker-<ID>-<RunID>.service.
	Unit         string
	MainPID      int
	ControlGroup string
	InvocationID string
	LogPath      string

	State       State
	StateReason string
	// Manager is the current manager's session id; FirstManager is who spawned
	// the worker (also in the unit environment).
	Manager      string
	FirstManager string

	// Lease fields (docs/architecture.md "Leases" gives their meaning; the
	// registry stores them faithfully).
	LeaseDuration      time.Duration // 0 = no idle lease
	LeaseDeadline      time.Time     // zero = none
	LastActivity       time.Time
	CheckpointSentAt   time.Time
	CheckpointAttempts int
	GraceDeadline      time.Time

	CreatedAt, UpdatedAt, ReadyAt, StopRequestedAt, EndedAt time.Time

	// HasExit says whether ExitCode and ExitStatus were recorded.
	HasExit bool
	// ExitCode is systemd's ExecMainCode name: "exited", "killed", "dumped".
	ExitCode string
	// ExitStatus is the exit status, or the signal number when killed/dumped.
	ExitStatus int
	LastError  string
	// StopReason says why the worker was stopped: "manager-requested",
	// "lease-expired" (the janitor), StopMaxRuntime; "" when it ended by
	// itself.
	StopReason string

	// Budget bounds a coding-agent worker's spending (zero: none). Usage is
	// what its turns consumed so far, as its shim recorded them
	// (RecordTurnUsage). PausedUntil: a worker paused by a rate limit
	// starts no turn before it (zero: not paused by one).
	Budget      Budget
	Usage       harness.UsageTotals
	PausedUntil time.Time

	// Limits are the unit's MemoryMax=, CPUQuota= and TasksMax= (spawn
	// --memory, --cpu, --tasks; zero fields: none).
	Limits units.Limits
	// FrozenAt is when pause froze the worker's cgroup (zero: not paused).
	// Its idle lease does not run down meanwhile: the janitor leaves it,
	// and resume moves the deadlines on by the time it was paused.
	FrozenAt time.Time
	// Worktree is the worker's git worktree (spawn --worktree), nil for
	// none. It is kept in a table of its own (Registry.Worktree): the
	// registry's worker reads leave it nil, and the fleet's (Spawn, List,
	// Status, Stop) fill it in.
	Worktree *Worktree
	// Profile is the sandbox the worker runs in ("" for a record from
	// before profiles: trusted). ProfileDegraded says what of it the user
	// manager did not enforce ("" = all of it enforced).
	Profile         Profile
	ProfileDegraded string
	// PermissionWait is how long a coding-agent worker waits for its
	// manager's answer to a permission prompt (0: the default,
	// harness.DefaultPermissionWait). NeedsInput says what it waits for
	// now ("permission to run `npm install`"; StateReason "needs-input"),
	// "" when nothing.
	PermissionWait time.Duration
	NeedsInput     string
	// StopTimeout is the unit's TimeoutStopSec= as spawn set it (0: not
	// recorded, for a record from before schema 9 or one recovered from a
	// unit; a stop then reads it from the user manager).
	StopTimeout time.Duration
}

// Limits are a worker unit's resource limits (units.Limits), and
// CgroupUsage what its cgroup uses now (units.Usage): named here so that
// what shows a worker needs the fleet's types only.
type (
	Limits      = units.Limits
	CgroupUsage = units.Usage
)

// Paused reports whether w is a live worker that pause froze.
func (w *Worker) Paused() bool { return w.State.Live() && !w.FrozenAt.IsZero() }

// ShownPaused is the state shown for a worker pause froze (the registry
// keeps it running).
const ShownPaused = "paused"

// ShownState is the state lists, status and teams show for w: ShownPaused
// for a worker pause froze, else its registry state.
func (w *Worker) ShownState() string {
	if w.Paused() {
		return ShownPaused
	}
	return string(w.State)
}

// ReasonOOMKilled is the StateReason of a worker whose unit the kernel's
// OOM killer ended (systemd's result "oom-kill": a process of it went
// past its memory limit).
const ReasonOOMKilled = "oom-killed"

// StopMaxRuntime is the StopReason of a worker systemd stopped when its
// maximum runtime (spawn --max-runtime) ran out.
const StopMaxRuntime = "max-runtime"

// Clone returns a deep copy of w (slices included).
func (w *Worker) Clone() *Worker {
	if w == nil {
		return nil
	}
	c := *w
	c.Command = cloneStrings(w.Command)
	c.EnvKeys = cloneStrings(w.EnvKeys)
	c.Worktree = w.Worktree.Clone()
	return &c
}

func cloneStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

// RunIDPattern is what a RunID looks like: 12 lowercase hex digits.
const RunIDPattern = "^[0-9a-f]{12}$"

// validRunID reports whether runID matches RunIDPattern (spelled out, as
// intercom.ValidSessionID).
func validRunID(runID string) bool {
	if len(runID) != 12 {
		return false
	}
	for i := 0; i < len(runID); i++ {
		if c := runID[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidID checks id against docs/architecture.md's id pattern
// (intercom.SessionIDPattern, at most 64 characters). The error wraps
// ErrInvalidID.
func ValidID(id string) error {
	if !intercom.ValidSessionID(id) {
		return fmt.Errorf("%w: %q does not match %s", ErrInvalidID, id, intercom.SessionIDPattern)
	}
	return nil
}

// ValidRunID checks runID against RunIDPattern. The error wraps ErrInvalidID.
func ValidRunID(runID string) error {
	if !validRunID(runID) {
		return fmt.Errorf("%w: run id %q does not match %s", ErrInvalidID, runID, RunIDPattern)
	}
	return nil
}

// WorkerUnitName is the unit of an incarnation:
// agent-fleet-worker-<id>-<runID>.service. Both parts are unit-name safe once
// validated; the name is never reused because RunIDs are not.
func WorkerUnitName(id, runID string) string {
	return "agent-fleet-worker-" + id + "-" + runID + ".service"
}
