package fleet

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// The error vocabulary of fleet: of the registry, of the operations on
// workers, and of ownership. Callers test with errors.Is (or errors.As for
// the two error types); every returned error wraps one of these with the
// operation and its subject ("reserve worker \"w1\": ..."). The CLI's exit
// codes (docs/architecture.md "CLI") are mapped from them in one place in cmd/; each
// note below says which code that is.

// Errors of the registry file and its records.
var (
	// ErrNotFound: no incarnation of that id (or id+run) is recorded
	// (exit 3).
	ErrNotFound = errors.New("worker not found")

	// ErrConflict: a live incarnation of the id exists, or the exact id+run
	// is already recorded, or the id's unit still runs (exit 4).
	ErrConflict = errors.New("worker conflict")

	// ErrSchemaNewer: the registry file was written by a newer agent-fleet
	// whose schema this build does not know. Nothing was written to the file;
	// upgrade agent-fleet (never downgrade the file) (exit 1).
	ErrSchemaNewer = errors.New("registry schema is newer than this agent-fleet supports")

	// ErrCorrupt: the registry file is not a SQLite database or fails
	// PRAGMA quick_check. The file is left as it was; the caller decides
	// whether to keep it aside and rebuild (exit 1).
	ErrCorrupt = errors.New("registry file is corrupt")

	// ErrInvalidID: a worker id does not match docs/architecture.md's
	// ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$, or a run id is not 12 lowercase hex
	// (exit 2).
	ErrInvalidID = errors.New("invalid worker id")

	// ErrInvalidRecord: a record handed to the registry breaks an invariant
	// (unknown state, a non-live state for Reserve, an Update callback that
	// changed ID, RunID or Generation). A programming error, not user input
	// (exit 1).
	ErrInvalidRecord = errors.New("invalid worker record")

	// ErrBusy: another process held the registry's write lock for longer than
	// the busy timeout (5 s by default). Nothing was written; retrying later
	// is safe (exit 1).
	ErrBusy = errors.New("registry busy")
)

// Errors of operations on workers.
var (
	// ErrInvalidRequest: a spawn/stop request is malformed, or a coding
	// agent's model, effort or permission is not one its kind takes
	// (exit 2).
	ErrInvalidRequest = errors.New("invalid request")

	// ErrCommandNotFound: the worker's command is not on the caller's PATH
	// or not executable, or a pi worker's MCP adapter is missing (exit 3).
	ErrCommandNotFound = errors.New("command not found")

	// ErrUnsupportedKind: the worker kind is none of exec, claude, codex,
	// opencode, pi (exit 2, like any unknown flag value). It is the harness
	// package's, so errors.Is holds for errors of either package.
	ErrUnsupportedKind = harness.ErrUnsupportedKind

	// ErrSpawnFailed: the worker did not become ready; the record is kept
	// as failed (exit 1). The error is a *SpawnError.
	ErrSpawnFailed = errors.New("spawn failed")

	// ErrProfileUnenforceable: the spawn named a sandbox profile that this
	// user manager cannot enforce in full, and did not allow degradation
	// (exit 5).
	ErrProfileUnenforceable = errors.New("sandbox profile cannot be enforced here")

	// ErrCleanupIncomplete: processes of a stopped worker survived SIGKILL;
	// the record says which (exit 1).
	ErrCleanupIncomplete = errors.New("cleanup could not be verified")

	// ErrCleanupInProgress: another janitor run holds the cleanup lock. The
	// cleanup verb reports it and exits 0: that run does the work.
	ErrCleanupInProgress = errors.New("cleanup in progress")

	// ErrInvalidLimit: a resource limit (spawn --memory, --cpu, --tasks)
	// is not a size, percentage or count this takes, or is too small for
	// a worker to start (exit 2).
	ErrInvalidLimit = errors.New("invalid resource limit")

	// ErrLimitUnsupported: the user manager cannot apply a requested
	// resource limit (its cgroup lacks the controller): systemd would
	// accept it and enforce nothing, so the spawn is refused and doctor
	// says why (exit 5).
	ErrLimitUnsupported = errors.New("the user manager cannot apply this resource limit")

	// ErrNotPaused: pause of a worker that is not running (provisioning or
	// stopping) (exit 4).
	ErrNotPaused = errors.New("worker is not in a state to pause")
	// ErrNotRepository: spawn --worktree from a directory that is not in a
	// git work tree (no repository, a bare one, or inside a .git directory),
	// or whose HEAD has no commit to branch from (exit 2).
	ErrNotRepository = errors.New("not a git repository")

	// ErrBranchCheckedOut: the branch spawn --worktree asked for is checked
	// out in another worktree — a live worker's, or any other; git checks a
	// branch out in one worktree at a time (exit 4).
	ErrBranchCheckedOut = errors.New("branch is checked out elsewhere")

	// ErrWorktreeConflict: the worktree cannot be made where it goes: the
	// default branch agent-fleet/<id> exists already, or the directory
	// holds an earlier worktree that still has work in it (exit 4).
	ErrWorktreeConflict = errors.New("worktree conflict")

	// ErrGit: a git command failed for another reason; the error carries
	// git's own message (exit 1).
	ErrGit = errors.New("git failed")

	// ErrReadOnly: the fleet found something it cannot resolve on its own
	// (e.g. two live units claiming one worker id) and refuses changes until
	// it is resolved; `agent-fleet doctor` says what (exit 4).
	ErrReadOnly = errors.New("the fleet is read-only until an ambiguity is resolved")
)

// Errors of ownership: managers, adoption, leases and history.
var (
	// ErrNotOwner: the worker belongs to another manager (exit 4). The error
	// is an *OwnerError.
	ErrNotOwner = errors.New("worker belongs to another manager")

	// ErrManagerConnected: adoption refused while the current manager's
	// session is connected; --force overrides (exit 4).
	ErrManagerConnected = errors.New("the worker's manager is connected")

	// ErrNotTerminal: forget/prune touch only ended workers (exit 4).
	ErrNotTerminal = errors.New("worker is still live")

	// ErrEnded: adopt takes over only live workers; this one has ended
	// (exit 4, a conflict with its state like ErrNotTerminal the other way
	// round: the record exists). The error is an *EndedError.
	ErrEnded = errors.New("worker has ended")

	// ErrNeedsAcknowledge: forget and prune delete history and must be
	// acknowledged (exit 2).
	ErrNeedsAcknowledge = errors.New("deleting records needs --acknowledge")

	// ErrUnverifiedActivity: a message claimed to come from a worker, but the
	// sending connection's pid is not in the worker's cgroup; its lease is
	// not renewed. Never a command's outcome: the activity recorder logs it.
	ErrUnverifiedActivity = errors.New("activity not verified")
)

// SpawnError is a spawn whose worker did not become ready.
type SpawnError struct {
	ID, RunID string
	Reason    string // what happened, e.g. "exited with status 3 before it was ready"
	LogTail   []string
}

func (e *SpawnError) Error() string {
	msg := fmt.Sprintf("spawn %s (run %s): %s", e.ID, e.RunID, e.Reason)
	if len(e.LogTail) > 0 {
		msg += "\nlast log lines:\n  " + strings.Join(e.LogTail, "\n  ")
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrSpawnFailed) true.
func (e *SpawnError) Unwrap() error { return ErrSpawnFailed }

// EndedError is an operation on a live worker refused because the
// worker has ended. Its text says so plainly and how to drop the record.
type EndedError struct {
	ID    string
	State State // stopped, exited, failed or lost
	Op    string
	// Owner and Caller, when Owner is set and not Caller: the record is
	// another manager's to forget, and the hint says so.
	Owner, Caller string
}

func (e *EndedError) Error() string {
	how := map[State]string{StateStopped: "was stopped", StateExited: "has exited", StateFailed: "has failed", StateLost: "was lost"}[e.State]
	if how == "" {
		how = "has ended (" + string(e.State) + ")"
	}
	if e.Owner != "" && e.Owner != e.Caller {
		return fmt.Sprintf("%s %s; nothing to %s (its record is manager %q's to forget; the janitor prunes it a week after its end, and agent-fleet prune --all --acknowledge deletes every manager's ended records now)",
			e.ID, how, e.Op, e.Owner)
	}
	return fmt.Sprintf("%s %s; nothing to %s (forget it with agent-fleet forget %s --acknowledge)", e.ID, how, e.Op, e.ID)
}

// Unwrap makes errors.Is(err, ErrEnded) true.
func (e *EndedError) Unwrap() error { return ErrEnded }

// OwnerError is an operation refused because another manager owns the
// worker.
type OwnerError struct {
	ID, Owner, Caller string
	Op                string
	// Ended: the worker has ended, and an ended worker cannot be adopted.
	Ended bool
}

func (e *OwnerError) Error() string {
	if e.Ended {
		return fmt.Sprintf("%s %s: it belongs to manager %q, not %q, and has ended, so it cannot be adopted: its manager can forget it, "+
			"the janitor prunes it a week after its end, and agent-fleet prune --all --acknowledge deletes every manager's ended records now",
			e.Op, e.ID, e.Owner, e.Caller)
	}
	return fmt.Sprintf("%s %s: it belongs to manager %q, not %q; adopt it first (agent-fleet adopt %s)", e.Op, e.ID, e.Owner, e.Caller, e.ID)
}

// Unwrap makes errors.Is(err, ErrNotOwner) true.
func (e *OwnerError) Unwrap() error { return ErrNotOwner }
