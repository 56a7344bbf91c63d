package teams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/manifest"
)

// Holder operations a session holder serves for its team
// (intercom.HolderConfig.Extra): the holder resolves the team with its own
// scope and environment, and a join moves the held session.
const (
	HolderOpTeam       = "team"
	HolderOpTeamJoin   = "team_join"
	HolderOpNamedTeams = "team_list"
	HolderOpTeamInbox  = "team_inbox"
	HolderOpTeamLeave  = "team_leave"
	HolderOpTeamDelete = "team_delete"
	HolderOpRosters    = "team_rosters"
)

// reply is a team operation's answer on the holder socket: a result, or a
// team error with its kind, so errors.Is keeps working across processes.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *remoteError    `json:"error,omitempty"`
}

type remoteError struct {
	Kind    string `json:"kind"`
	Code    string `json:"code,omitempty"` // Boss code
	Message string `json:"message"`
}

func (e *remoteError) Error() string {
	if e.Kind == "boss" {
		return (&BossError{Code: e.Code, Message: e.Message}).Error() // as the holder's own text
	}
	return e.Message
}

func (e *remoteError) Is(target error) bool {
	if e.Kind == "boss" {
		return (&BossError{Code: e.Code, Message: e.Message}).Is(target)
	}
	if e.Kind == kindInspectionNotFound {
		return target == ErrInspectionDenied || target == intercom.ErrTargetNotFound
	}
	if s, ok := errorKinds[e.Kind]; ok {
		return s == target
	}
	return false
}

func (e *remoteError) As(target any) bool {
	if be, ok := target.(**BossError); ok && e.Kind == "boss" {
		*be = &BossError{Code: e.Code, Message: e.Message}
		return true
	}
	return false
}

var errorKinds = map[string]error{
	"registry": ErrRegistry, "managed": ErrManagedSession, "team_name": ErrInvalidTeamName,
	"team_not_found": ErrTeamNotFound, "team_exists": ErrTeamExists, "store": ErrStore, "locked": ErrLocked,
	"no_switch": ErrNoSwitch, "inspection_denied": ErrInspectionDenied, "boss": ErrBossDenied,
	"manifest_invalid": manifest.ErrInvalid, "manifest_unavailable": manifest.ErrUnavailable,
	"no_pending_ask": intercom.ErrNoPendingAsk, "inbox_version": intercom.ErrInboxVersion,
	"not_member": ErrNotMember, "not_manager": ErrNotManager, "manager_leaves": ErrManagerLeaves, "home_team": ErrHomeTeam,
	"invalid_input": intercom.ErrInvalidInput, "target_not_found": intercom.ErrTargetNotFound,
	"ambiguous_target": intercom.ErrAmbiguousTarget,
}

// kindInspectionNotFound is an inspection refused because its target is
// not connected: both ErrInspectionDenied and intercom.ErrTargetNotFound.
const kindInspectionNotFound = "inspection_not_found"

func toRemote(err error) *remoteError {
	var be *BossError
	if errors.As(err, &be) {
		return &remoteError{Kind: "boss", Code: be.Code, Message: be.Message}
	}
	if errors.Is(err, ErrInspectionDenied) && errors.Is(err, intercom.ErrTargetNotFound) {
		return &remoteError{Kind: kindInspectionNotFound, Message: err.Error()}
	}
	for kind, s := range errorKinds {
		if errors.Is(err, s) {
			return &remoteError{Kind: kind, Message: err.Error()}
		}
	}
	return nil
}

// HolderExtra serves the team operations of t on a session holder
// (intercom.HolderConfig.Extra).
func HolderExtra(t Teams) func(ctx context.Context, op string, args json.RawMessage) (any, bool, error) {
	return func(ctx context.Context, op string, args json.RawMessage) (any, bool, error) {
		var result any
		var err error
		switch op {
		case HolderOpTeam:
			result, err = t.Team(ctx)
		case HolderOpNamedTeams:
			result, err = t.NamedTeams(ctx)
		case HolderOpTeamJoin:
			var req JoinRequest
			if err := json.Unmarshal(args, &req); err != nil {
				return nil, true, fmt.Errorf("%w: %v", intercom.ErrInvalidInput, err)
			}
			result, err = t.Join(ctx, req)
		case HolderOpTeamLeave, HolderOpTeamDelete:
			var req LeaveRequest
			if err := json.Unmarshal(args, &req); err != nil {
				return nil, true, fmt.Errorf("%w: %v", intercom.ErrInvalidInput, err)
			}
			if op == HolderOpTeamLeave {
				result, err = t.Leave(ctx, req)
			} else {
				result, err = t.Delete(ctx, req)
			}
		case HolderOpRosters:
			var name string
			if err := json.Unmarshal(args, &name); err != nil {
				return nil, true, fmt.Errorf("%w: %v", intercom.ErrInvalidInput, err)
			}
			result, err = t.Rosters(ctx, name)
		case HolderOpTeamInbox:
			var req InspectRequest
			if err := json.Unmarshal(args, &req); err != nil {
				return nil, true, fmt.Errorf("%w: %v", intercom.ErrInvalidInput, err)
			}
			result, err = t.InspectInbox(ctx, req)
		default:
			return nil, false, nil
		}
		if err != nil {
			if re := toRemote(err); re != nil {
				return &reply{Error: re}, true, nil
			}
			return nil, true, err
		}
		data, err := json.Marshal(result)
		if err != nil {
			return nil, true, err
		}
		return &reply{Result: data}, true, nil
	}
}

// HolderTeams implements Teams through a session's holder. A holder that
// serves no team operations answers ErrUnsupported.
type HolderTeams struct {
	Client *intercom.HolderClient
}

func (h HolderTeams) call(ctx context.Context, op string, args, out any) error {
	var r reply
	if err := h.Client.Call(ctx, op, args, &r); err != nil {
		if errors.Is(err, intercom.ErrInvalidInput) {
			// Every team argument is checked before the call: an invalid
			// request here is an operation the holder does not know.
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		return err
	}
	if r.Error != nil {
		return r.Error
	}
	return json.Unmarshal(r.Result, out)
}

// Team implements Teams. The team crosses the socket as JSON: the holder
// keeps the right to inspect inboxes (FromRegistry is false here).
func (h HolderTeams) Team(ctx context.Context) (*Team, error) {
	var t Team
	if err := h.call(ctx, HolderOpTeam, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Join implements Teams.
func (h HolderTeams) Join(ctx context.Context, req JoinRequest) (*JoinResult, error) {
	if err := ValidateTeamName(req.Name); err != nil {
		return nil, err
	}
	var r JoinResult
	if err := h.call(ctx, HolderOpTeamJoin, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Leave implements Teams.
func (h HolderTeams) Leave(ctx context.Context, req LeaveRequest) (*LeaveResult, error) {
	var r LeaveResult
	if err := h.call(ctx, HolderOpTeamLeave, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Delete implements Teams.
func (h HolderTeams) Delete(ctx context.Context, req LeaveRequest) (*LeaveResult, error) {
	var r LeaveResult
	if err := h.call(ctx, HolderOpTeamDelete, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Rosters implements Teams.
func (h HolderTeams) Rosters(ctx context.Context, name string) ([]Roster, error) {
	var r []Roster
	if err := h.call(ctx, HolderOpRosters, name, &r); err != nil {
		return nil, err
	}
	return r, nil
}

// NamedTeams implements Teams.
func (h HolderTeams) NamedTeams(ctx context.Context) ([]NamedTeam, error) {
	var list []NamedTeam
	if err := h.call(ctx, HolderOpNamedTeams, nil, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// InspectInbox implements Teams.
func (h HolderTeams) InspectInbox(ctx context.Context, req InspectRequest) (*Inspection, error) {
	var r Inspection
	if err := h.call(ctx, HolderOpTeamInbox, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
