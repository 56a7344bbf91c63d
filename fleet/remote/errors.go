package remote

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/units"
)

// Errors of reaching another host.
var (
	// ErrUnknownHost: no live host has that node name, and none ever
	// published records under it (exit 3).
	ErrUnknownHost = errors.New("unknown host")

	// ErrHostUnreachable: the host is known (it published records, or it
	// is live) but its fleet did not answer: its node is down, its link is
	// cut, or it did not answer in time (exit 6).
	ErrHostUnreachable = errors.New("host unreachable")

	// ErrRecordsUnavailable: the cluster keeps no last-known records (its
	// NATS server runs without JetStream), so what an unreachable host
	// runs is unknown (list --all says so; never an exit status of its own).
	ErrRecordsUnavailable = errors.New("no last-known worker records (the NATS server runs without JetStream)")
)

// Code names an error on the wire: errors.Is(err, Err) holds for every
// error sent with this code, on both ends.
type Code struct {
	Code string
	Err  error
}

// codes are the errors that cross the wire as themselves, the first that
// an error is wins. A host's Server and a Client may add their own
// (Server.Codes, Client.Codes), which come first.
var codes = []Code{
	{"not_owner", fleet.ErrNotOwner},
	{"manager_connected", fleet.ErrManagerConnected},
	{"ended", fleet.ErrEnded},
	{"not_terminal", fleet.ErrNotTerminal},
	{"wait_timeout", fleet.ErrWaitTimeout},
	{"spawn_failed", fleet.ErrSpawnFailed},
	{"cleanup_incomplete", fleet.ErrCleanupIncomplete},
	{"not_found", fleet.ErrNotFound},
	{"conflict", fleet.ErrConflict},
	{"read_only", fleet.ErrReadOnly},
	{"not_paused", fleet.ErrNotPaused},
	{"invalid_id", fleet.ErrInvalidID},
	{"invalid_request", fleet.ErrInvalidRequest},
	{"unsupported_kind", fleet.ErrUnsupportedKind},
	{"command_not_found", fleet.ErrCommandNotFound},
	{"profile_unenforceable", fleet.ErrProfileUnenforceable},
	{"invalid_limit", fleet.ErrInvalidLimit},
	{"limit_unsupported", fleet.ErrLimitUnsupported},
	{"not_repository", fleet.ErrNotRepository},
	{"branch_checked_out", fleet.ErrBranchCheckedOut},
	{"worktree_conflict", fleet.ErrWorktreeConflict},
	{"git", fleet.ErrGit},
	{"busy", fleet.ErrBusy},
	{"schema_newer", fleet.ErrSchemaNewer},
	{"corrupt", fleet.ErrCorrupt},
	{"socket_path_too_long", intercom.ErrSocketPathTooLong},
	{"invalid_scope", wire.ErrInvalidScope},
	{"invalid_input", intercom.ErrInvalidInput},
	{"unsupported", units.ErrUnsupported},
	{"no_user_bus", units.ErrNoUserBus},
	{"manager_unreachable", units.ErrManagerUnreachable},
	{"manager_timeout", units.ErrTimeout},
	{"host_unreachable", ErrHostUnreachable},
	{"unknown_host", ErrUnknownHost},
}

// wireError is an error on the wire: Code names its sentinel ("" for
// none: a plain failure), Message is its text, and Kind names the typed
// error it is, with Detail its fields.
type wireError struct {
	Code    string          `json:"code"`
	Message string          `json:"message"`
	Kind    string          `json:"kind,omitempty"`
	Detail  json.RawMessage `json:"detail,omitempty"`
}

// Kinds of typed errors.
const (
	kindOwner = "owner"
	kindSpawn = "spawn"
	kindEnded = "ended"
	kindWait  = "wait"
)

// encodeError puts err on the wire.
func encodeError(err error, extra []Code) *wireError {
	we := &wireError{Message: err.Error()}
	for _, c := range append(append([]Code(nil), extra...), codes...) {
		if errors.Is(err, c.Err) {
			we.Code = c.Code
			break
		}
	}
	var (
		owner *fleet.OwnerError
		spawn *fleet.SpawnError
		ended *fleet.EndedError
		wait  *fleet.WaitError
	)
	var detail any
	switch {
	case errors.As(err, &owner):
		we.Kind, detail = kindOwner, owner
	case errors.As(err, &spawn):
		we.Kind, detail = kindSpawn, spawn
	case errors.As(err, &ended):
		we.Kind, detail = kindEnded, ended
	case errors.As(err, &wait):
		we.Kind, detail = kindWait, wait
	}
	if detail != nil {
		we.Detail, _ = json.Marshal(detail)
	}
	return we
}

// Error is an error a host's fleet answered with: its text, as on that
// host, and the same error underneath (errors.Is the fleet sentinel its
// Code names; errors.As the typed error its Kind names).
type Error struct {
	Host    string
	Code    string
	Message string
	err     error
}

func (e *Error) Error() string { return fmt.Sprintf("host %s: %s", e.Host, e.Message) }

// Unwrap is the typed error, else the sentinel, else nil.
func (e *Error) Unwrap() error { return e.err }

// decodeError is the error we stands for, from host.
func decodeError(host string, we *wireError, extra []Code) error {
	e := &Error{Host: host, Code: we.Code, Message: we.Message}
	var sentinel error
	for _, c := range append(append([]Code(nil), extra...), codes...) {
		if c.Code == we.Code {
			sentinel = c.Err
			break
		}
	}
	var typed error
	switch we.Kind {
	case kindOwner:
		var v fleet.OwnerError
		if json.Unmarshal(we.Detail, &v) == nil {
			typed = &v
		}
	case kindSpawn:
		var v fleet.SpawnError
		if json.Unmarshal(we.Detail, &v) == nil {
			typed = &v
		}
	case kindEnded:
		var v fleet.EndedError
		if json.Unmarshal(we.Detail, &v) == nil {
			typed = &v
		}
	case kindWait:
		var v fleet.WaitError
		if json.Unmarshal(we.Detail, &v) == nil {
			typed = &v
		}
	}
	switch {
	case typed != nil && sentinel != nil && !errors.Is(typed, sentinel):
		e.err = errors.Join(typed, sentinel)
	case typed != nil:
		e.err = typed
	default:
		e.err = sentinel
	}
	return e
}
