package broker

import (
	"errors"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Federation is the broker's side of several hosts joined over NATS
// (docs/federation.md). The broker stays the only thing local clients see;
// a session of another host appears in it as a proxy session: a session
// with SessionInfo origin "remote", trustedLocal false and remoteHostId set
// to its host, listed, resolved and broadcast like a local one, whose
// frames go to the Federation instead of a socket.
//
// Every method is called with the broker's lock held: it must not block and
// must not call back into the broker. Byte slices are the callee's to keep.
type Federation interface {
	// LocalJoined reports a local session that registered (or
	// re-registered, possibly with new info or scope).
	LocalJoined(s LocalSession)
	// LocalPresence reports a presence change of a local session.
	LocalPresence(s LocalSession)
	// LocalLeft reports a local session that left: unregistered is true
	// for an unregister without preserveAsks, false for a closed socket
	// or a preserving unregister (edges defer, spec §5.7).
	LocalLeft(id string, unregistered bool)
	// Forward hands a message for a proxy session to its host. The
	// sender has not been told accepted yet: the broker tells it when
	// ForwardAccepted (or ForwardFailed) comes back.
	Forward(f Forward)
	// Outcome reports what became of a send injected by ProxySend.
	Outcome(o Outcome)
	// AskControl reports a defer_ask or cancel_ask by a local asker of an
	// edge whose recipient is a proxy session.
	AskControl(a AskControl)
}

// LocalSession is a local session as announced to other hosts.
type LocalSession struct {
	ID string
	// Info is the SessionInfo JSON the broker emits for it (origin local).
	Info []byte
	// ScopeToken is the Scoper's token of its scope; "" is unscoped. The
	// scope itself never leaves the broker (spec §4.2).
	ScopeToken string
	// PID is the kernel-verified pid of its connection, 0 where unknown.
	PID int
}

// Forward is one message routed to a proxy session.
type Forward struct {
	Host       string // the recipient's host
	DeliveryID string // this broker's deliveryId of the delivery
	From, To   string // sender (local) and recipient (proxy) session ids
	// FromInfo is the sender's SessionInfo JSON.
	FromInfo []byte
	// Message is the message object exactly as the sender sent it, so its
	// key order survives (spec §5.2).
	Message []byte
}

// OutcomeKind says what an Outcome reports.
type OutcomeKind int

// Outcome kinds, in the order a delivery reports them (spec §5.1).
const (
	OutcomeAccepted OutcomeKind = iota + 1
	OutcomeDelivered
	OutcomeFailed
)

// Outcome is the fate of a send injected by ProxySend, for the sender's
// host.
type Outcome struct {
	Host             string // the sender's host
	From             string // the sender's (proxy) session id
	MessageID        string
	RemoteDeliveryID string // as given to ProxySend
	Kind             OutcomeKind
	// Accepted, Code and Reason are set for OutcomeFailed as in
	// delivery_failed (spec §3.2).
	Accepted bool
	Code     wire.FailureCode
	Reason   string
}

// AskControl is a defer or cancel of an ask edge by its asker.
type AskControl struct {
	Host      string // the recipient's host
	Action    string // "defer" or "cancel"
	From, To  string // asker and recipient session ids
	MessageID string
}

// Scoper maps a private scope to the token that stands for it on other
// hosts (an HMAC under the cluster key); "" maps to "". Sessions of two
// hosts share a scope iff their tokens are equal.
type Scoper func(scope string) string

// ErrSessionIDTaken means a proxy session's id is held by a local session:
// the local one keeps it and the remote one is not shown.
var ErrSessionIDTaken = errors.New("session id is held by a local session")
