package fleet

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of fleet operations (beside the registry's in errors.go).
var (
	// ErrInvalidRequest: a spawn/stop request is malformed (exit 2).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrCommandNotFound: the worker's command is not on the caller's PATH
	// or not executable (exit 3).
	ErrCommandNotFound = errors.New("command not found")
	// ErrUnsupportedKind: the worker kind is not available (exit 5).
	ErrUnsupportedKind = errors.New("unsupported worker kind")
	// ErrSpawnFailed: the worker did not become ready (exit 1); the record
	// is kept as failed.
	ErrSpawnFailed = errors.New("spawn failed")
	// ErrNotOwner: the worker belongs to another manager (exit 4).
	ErrNotOwner = errors.New("worker belongs to another manager")
	// ErrCleanupIncomplete: processes of a stopped worker survived SIGKILL
	// (exit 1); the record says which.
	ErrCleanupIncomplete = errors.New("cleanup could not be verified")
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

// OwnerError is an operation refused because another manager owns the
// worker.
type OwnerError struct {
	ID, Owner, Caller string
	Op                string
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("%s %s: it belongs to manager %q, not %q; adopt it first (agent-fleet adopt %s)", e.Op, e.ID, e.Owner, e.Caller, e.ID)
}

// Unwrap makes errors.Is(err, ErrNotOwner) true.
func (e *OwnerError) Unwrap() error { return ErrNotOwner }
