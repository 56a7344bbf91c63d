package intercom

import (
	"errors"
	"fmt"
)

// The error vocabulary of the intercom client, in one place. Callers test
// with errors.Is; the CLI maps each to one exit code (docs/architecture.md
// "CLI").

// Errors of session operations.
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

// Client errors. Outcome-unknown errors mean the message may have been
// delivered: it stays in the outbox and is replayed on the next
// registration, so do not blindly send it again under a new id.
var (
	// ErrNotConnected: the client has no registered connection.
	ErrNotConnected = errors.New("not connected to the intercom broker")
	// ErrConnectionLost: the connection dropped before the outcome arrived.
	ErrConnectionLost = errors.New("connection to the intercom broker lost before the outcome was known")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("intercom client closed")
	// ErrSessionIDInUse: another live runtime holds the session id.
	ErrSessionIDInUse = errors.New("session id is in use by another live runtime")
)

// Broker errors.
var (
	// ErrIncompatibleBroker: a live broker speaks another protocol version.
	ErrIncompatibleBroker = errors.New("incompatible live intercom broker; expected pi-intercom v4 (it was left running)")
	// ErrBrokerUnavailable: no broker could be reached or started.
	ErrBrokerUnavailable = errors.New("intercom broker unavailable")
)

// Outbox errors.
var (
	// ErrOutboxFull: 256 messages wait for an outcome; the send is refused.
	ErrOutboxFull = errors.New("Durable outbox is full (256 messages)")
	// ErrOutboxConflict: a queued message id was reused with another payload.
	ErrOutboxConflict = errors.New("message id is already queued with a different payload")
)

// Errors of holders, identities, inboxes, the local API and paths.
var (
	// ErrHeld means another live holder already serves the session id.
	ErrHeld = errors.New("session is already held by another live process")
	// ErrListening means a consuming listen runs for the session already
	// (in its holder, or streamed from it): a second one would split the
	// messages between the two (exit 4).
	ErrListening = errors.New("session already has a listener")
	// ErrNoHolder means no live holder serves the session: DialHolder found
	// none, or a HolderClient call could not connect to it (the operation was
	// not performed).
	ErrNoHolder = errors.New("no live session holder")
	// ErrHolderNotServed: Hold registered the session but could not serve its
	// holder socket (HoldConfig.RequireHolder); the session was closed again.
	ErrHolderNotServed = errors.New("cannot serve the session holder")
	// ErrInvalidSessionID is returned for a configured id that does not match
	// SessionIDPattern.
	ErrInvalidSessionID = errors.New("session id must match " + SessionIDPattern)
	// ErrInboxVersion is returned by ReadPendingAsks for an inbox file of a
	// version other than 3: a foreign inbox is read only when fully understood.
	ErrInboxVersion = errors.New("unsupported inbox version for read-only inspection")
	// ErrNoLocalAPI means nothing answers on the local API socket: no broker
	// runs, or the broker is not agent-fleet's (a TypeScript broker has none).
	ErrNoLocalAPI = errors.New("broker local API unavailable")
	// ErrUnknownOp means the broker's local API does not have the
	// operation: a broker without federation asked for a node's ops.
	ErrUnknownOp = errors.New("unknown op")
	// ErrAskEdgeOpen: an ask between this session and the target is still
	// open, one way (ASK_ALREADY_PENDING) or the other (MUTUAL_ASK), spec
	// §3.2, §5.7; a DeliveryError matches it.
	ErrAskEdgeOpen = errors.New("an ask between the two sessions is already open")
	// ErrSocketPathTooLong is returned when a socket path exceeds
	// MaxSocketPathBytes; the error text names the path and says what to do.
	ErrSocketPathTooLong = errors.New("socket path too long")
)

// CodeOutcomeUnknown is the code agent-fleet gives one recipient's
// outcome in a send to several (a team) when that send failed with
// ErrOutcomeUnknown: not a wire code.
const CodeOutcomeUnknown = "OUTCOME_UNKNOWN"

// DeliveryError is a send the broker refused or failed (spec §3.2).
type DeliveryError struct {
	Code     string // FailureCode
	Reason   string
	Accepted bool // the broker had routed it before it failed
}

func (e *DeliveryError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Reason) }

// Is maps delivery failures onto the operation errors. DELIVERY_TIMEOUT is
// ErrOutcomeUnknown: the broker handed the message to the recipient, which
// did not acknowledge it within 8 s (spec §3.2) but may still read it — a
// paused worker does once it is resumed. So is RECIPIENT_DISCONNECTED once
// accepted: the recipient went away (or its host stopped answering) after
// the message was handed on, and may have read it first.
func (e *DeliveryError) Is(target error) bool {
	switch target {
	case ErrTargetNotFound:
		return e.Code == "SESSION_NOT_FOUND"
	case ErrAmbiguousTarget:
		return e.Code == "AMBIGUOUS_TARGET"
	case ErrOutcomeUnknown:
		return e.Code == "DELIVERY_TIMEOUT" || e.Code == "RECIPIENT_DISCONNECTED" && e.Accepted || e.Code == CodeOutcomeUnknown
	case ErrAskEdgeOpen:
		return e.Code == "ASK_ALREADY_PENDING" || e.Code == "MUTUAL_ASK"
	}
	return false
}

// OpError is an error carried across a holder socket: a stable kind plus
// the message, turned back into the matching sentinel on the other side.
type OpError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Code is the error's own code, when it has one (Coded: a Boss
	// refusal's BOSS_TEAM_SCOPE_DENIED), for the other side to act on.
	Code string `json:"code,omitempty"`
}

// Coded is an error with a code of its own that a holder passes on
// (OpError.Code).
type Coded interface{ ErrorCode() string }

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
	"listening":       ErrListening,
	"deferred_full":   ErrDeferredFull,
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
