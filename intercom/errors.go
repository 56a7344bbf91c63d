package intercom

import (
	"errors"
	"fmt"
)

// Errors of session operations. Each maps to one CLI exit code (docs/architecture.md "CLI").
var (
	// ErrTargetNotFound: no session matches the target (exit 3).
	ErrTargetNotFound = errors.New("target session not found")
	// ErrAmbiguousTarget: several sessions match the target (exit 7).
	ErrAmbiguousTarget = errors.New("target matches several sessions")
	// ErrNoPendingAsk: no pending ask matches the reply selection (exit 3).
	ErrNoPendingAsk = errors.New("no matching pending ask")
	// ErrOutcomeUnknown: the broker's answer never came; the message may have
	// been delivered and stays in the outbox for replay (exit 8).
	ErrOutcomeUnknown = errors.New("outcome unknown: the message may have been delivered and will be retried from the outbox; do not resend it")
	// ErrInvalidInput: the request itself is malformed (exit 2).
	ErrInvalidInput = errors.New("invalid request")
	// ErrSelfTarget: a session may not message itself.
	ErrSelfTarget = errors.New("Cannot message the current session")
)

// DeliveryError is a send the broker refused or failed (spec §3.2).
type DeliveryError struct {
	Code     string // FailureCode
	Reason   string
	Accepted bool // the broker had routed it before it failed
}

func (e *DeliveryError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Reason) }

// Is maps delivery failures onto the operation errors.
func (e *DeliveryError) Is(target error) bool {
	switch target {
	case ErrTargetNotFound:
		return e.Code == "SESSION_NOT_FOUND"
	case ErrAmbiguousTarget:
		return e.Code == "AMBIGUOUS_TARGET"
	}
	return false
}

// OpError is an error carried across a holder socket: a stable kind plus
// the message, turned back into the matching sentinel on the other side.
type OpError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (e *OpError) Error() string { return e.Message }

// Is matches the sentinel named by Kind.
func (e *OpError) Is(target error) bool {
	s, ok := errorKinds[e.Kind]
	return ok && s == target
}

var errorKinds = map[string]error{
	"not_found":       ErrTargetNotFound,
	"ambiguous":       ErrAmbiguousTarget,
	"no_pending_ask":  ErrNoPendingAsk,
	"outcome_unknown": ErrOutcomeUnknown,
	"invalid":         ErrInvalidInput,
	"self":            ErrSelfTarget,
	"unavailable":     ErrBrokerUnavailable,
	"incompatible":    ErrIncompatibleBroker,
	"not_connected":   ErrNotConnected,
}

// errorKind names err for a holder response ("" for anything else).
func errorKind(err error) string {
	for kind, s := range errorKinds {
		if errors.Is(err, s) {
			return kind
		}
	}
	return ""
}
