package main

import (
	"errors"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// Exit codes, in one place (DESIGN.md "CLI").
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitConflict    = 4
	exitUnsupported = 5
	exitUnavailable = 6
	exitAmbiguous   = 7
	exitUnknown     = 8
)

// usageError marks a command-line mistake (exit 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// exitCode maps an error to the process exit code.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, broker.ErrAlreadyRunning):
		return exitConflict
	default:
		return exitFailure
	}
}
