package fleet

import "errors"

// The error vocabulary of the fleet registry. Callers test with errors.Is;
// every returned error wraps one of these with the operation and its subject
// ("reserve worker \"w1\": ..."). CLI exit codes (DESIGN.md "CLI") map from
// them in cmd/.
var (
	// ErrNotFound: no incarnation of that id (or id+run) is recorded (exit 3).
	ErrNotFound = errors.New("worker not found")

	// ErrConflict: a live incarnation of the id exists, or the exact id+run
	// is already recorded (exit 4).
	ErrConflict = errors.New("worker conflict")

	// ErrSchemaNewer: the registry file was written by a newer agent-fleet
	// whose schema this build does not know. Nothing was written to the file;
	// upgrade agent-fleet (never downgrade the file).
	ErrSchemaNewer = errors.New("registry schema is newer than this agent-fleet supports")

	// ErrCorrupt: the registry file is not a SQLite database or fails
	// PRAGMA quick_check. The file is left as it was; the caller decides
	// whether to keep it aside and rebuild (issue 6).
	ErrCorrupt = errors.New("registry file is corrupt")

	// ErrInvalidID: a worker id does not match DESIGN.md's
	// ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$, or a run id is not 12 lowercase hex
	// (exit 2).
	ErrInvalidID = errors.New("invalid worker id")

	// ErrInvalidRecord: a record handed to the registry breaks an invariant
	// (unknown state, a non-live state for Reserve, an Update callback that
	// changed ID, RunID or Generation). A programming error, not user input.
	ErrInvalidRecord = errors.New("invalid worker record")

	// ErrBusy: another process held the registry's write lock for longer than
	// the busy timeout (5 s by default). Nothing was written; retrying later
	// is safe.
	ErrBusy = errors.New("registry busy")
)
