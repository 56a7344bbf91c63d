package main

import (
	"errors"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/node"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/teams"
	"github.com/agent-fleet/agent-fleet/units"
)

// Exit codes, in one place (docs/architecture.md "CLI").
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
	exitInterrupted = 130 // factory.ErrInterrupted (128 + SIGINT, as shells say)
)

// Exit codes of wait (docs/architecture.md "CLI"): past those of agent-fleet's
// own failures, so that a worker's end never reads as one of them.
const (
	exitWaitTimeout = 9  // --timeout passed before the workers ended
	exitEndNonZero  = 10 // exited with a status other than 0
	exitEndKilled   = 11 // killed by a signal nobody in the fleet sent
	exitEndStopped  = 12 // stopped by stop
	exitEndLease    = 13 // stopped by the janitor: its lease expired
	exitEndRuntime  = 14 // stopped at its maximum runtime
	exitEndFailed   = 15 // failed (spawn, or unverified cleanup) or lost
)

// endSeverity orders wait's statuses for several workers, the most
// serious first.
var endSeverity = []int{exitEndFailed, exitEndNonZero, exitEndKilled, exitEndRuntime, exitEndLease, exitEndStopped}

// endExit is the exit status of a worker that ended as how (fleet.EndOf).
func endExit(how string) int {
	switch how {
	case fleet.EndExited:
		return exitEndNonZero
	case fleet.EndKilled:
		return exitEndKilled
	case fleet.EndStopped:
		return exitEndStopped
	case fleet.EndLeaseExpired:
		return exitEndLease
	case fleet.EndMaxRuntime:
		return exitEndRuntime
	}
	return exitEndFailed
}

// waitExit is a wait's exit status: 9 on a timeout, else the most serious
// of its workers' ends.
func waitExit(e *fleet.WaitError) int {
	if e.TimedOut {
		return exitWaitTimeout
	}
	worst := len(endSeverity) - 1
	for _, how := range e.Ends {
		worst = min(worst, slices.Index(endSeverity, endExit(how)))
	}
	return endSeverity[worst]
}

// severity orders exit statuses from the most serious, for a command that
// reports several outcomes (a stop of several workers): a cleanup that
// could not be verified first, a wrong id last.
var severity = []int{exitFailure, exitUnknown, exitUnavailable, exitUnsupported, exitConflict, exitAmbiguous, exitNotFound, exitUsage}

// exitCode maps an error to the process exit code.
func exitCode(err error) int {
	var ue *factory.UsageError
	var several *verbs.StopsError
	var waited *fleet.WaitError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, factory.ErrInterrupted):
		return exitInterrupted
	case errors.As(err, &waited):
		return waitExit(waited)
	case errors.As(err, &several):
		worst := -1
		for _, e := range several.Errs {
			if i := slices.Index(severity, exitCode(e)); i >= 0 && (worst < 0 || i < worst) {
				worst = i
			}
		}
		if worst < 0 {
			return exitFailure
		}
		return severity[worst]
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, remote.ErrUnknownHost):
		return exitNotFound
	case errors.Is(err, remote.ErrHostUnreachable):
		return exitUnavailable
	case errors.Is(err, factory.ErrNoNode):
		return exitUnsupported
	case errors.Is(err, units.ErrUnsupported), errors.Is(err, units.ErrFreezeUnsupported), errors.Is(err, fleet.ErrLimitUnsupported), errors.Is(err, fleet.ErrProfileUnenforceable):
		return exitUnsupported
	case errors.Is(err, fleet.ErrUnsupportedKind), strings.HasPrefix(err.Error(), "required flag(s)"):
		return exitUsage // an unknown --kind; cobra's missing required flags
	case errors.Is(err, broker.ErrAlreadyRunning), errors.Is(err, intercom.ErrSessionIDInUse),
		errors.Is(err, intercom.ErrOutboxConflict), errors.Is(err, intercom.ErrListening), errors.Is(err, intercom.ErrDeferredFull), errors.Is(err, intercom.ErrAskEdgeOpen), errors.Is(err, fleet.ErrConflict), errors.Is(err, fleet.ErrNotOwner),
		errors.Is(err, fleet.ErrManagerConnected), errors.Is(err, fleet.ErrNotTerminal), errors.Is(err, fleet.ErrReadOnly),
		errors.Is(err, fleet.ErrEnded), errors.Is(err, fleet.ErrNotPaused), errors.Is(err, fleet.ErrBranchCheckedOut),
		errors.Is(err, fleet.ErrWorktreeConflict), errors.Is(err, federation.ErrWrongCluster), errors.Is(err, federation.ErrNodeNameTaken), errors.Is(err, node.ErrConfigExists):
		return exitConflict
	case errors.Is(err, fleet.ErrInvalidID), errors.Is(err, fleet.ErrInvalidRequest), errors.Is(err, fleet.ErrNeedsAcknowledge),
		errors.Is(err, fleet.ErrInvalidLimit), errors.Is(err, fleet.ErrNotRepository):
		return exitUsage
	case errors.Is(err, fleet.ErrNotFound), errors.Is(err, fleet.ErrCommandNotFound), errors.Is(err, federation.ErrNoConfig), errors.Is(err, units.ErrNoPrivateManager):
		return exitNotFound
	case errors.Is(err, factory.ErrNoSystemd), errors.Is(err, units.ErrNoUserBus), errors.Is(err, units.ErrManagerUnreachable),
		errors.Is(err, units.ErrTimeout), errors.Is(err, federation.ErrUnreachable), errors.Is(err, federation.ErrLinkDown):
		return exitUnavailable
	case errors.As(err, new(*federation.ConfigError)), errors.Is(err, federation.ErrBadCredentials), errors.Is(err, federation.ErrTLS):
		return exitUsage // the node's configuration or credential is refused: no restart fixes it
	case errors.Is(err, intercom.ErrInvalidInput), errors.Is(err, intercom.ErrSelfTarget), errors.Is(err, intercom.ErrSocketPathTooLong),
		errors.Is(err, intercom.ErrInvalidSessionID), errors.Is(err, wire.ErrInvalidScope):
		return exitUsage
	case errors.Is(err, intercom.ErrTargetNotFound), errors.Is(err, intercom.ErrNoPendingAsk):
		return exitNotFound
	case errors.Is(err, intercom.ErrAmbiguousTarget):
		return exitAmbiguous
	case errors.Is(err, intercom.ErrOutcomeUnknown):
		return exitUnknown
	case errors.Is(err, intercom.ErrBrokerUnavailable), errors.Is(err, intercom.ErrIncompatibleBroker),
		errors.Is(err, intercom.ErrNotConnected):
		return exitUnavailable
	case errors.Is(err, teams.ErrInvalidTeamName), errors.Is(err, teams.ErrNoSwitch):
		return exitUsage
	case errors.Is(err, teams.ErrTeamNotFound), errors.Is(err, teams.ErrNotMember):
		return exitNotFound
	case errors.Is(err, teams.ErrTeamExists), errors.Is(err, teams.ErrManagedSession), errors.Is(err, teams.ErrLocked), errors.Is(err, teams.ErrNotManager), errors.Is(err, teams.ErrManagerLeaves), errors.Is(err, teams.ErrHomeTeam),
		errors.Is(err, teams.ErrInspectionDenied): // not the caller's to inspect, as ErrNotOwner; not connected is ErrTargetNotFound above
		return exitConflict
	default:
		return exitFailure
	}
}
