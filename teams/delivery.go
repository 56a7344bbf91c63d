package teams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Team-addressed targets of a send.
const (
	// TeamTargetPrefix addresses the live members of a named team:
	// team:NAME, or team:NAME/ROLE with RoleManager or RoleMember.
	TeamTargetPrefix = "team:"
	// AllTeamsTarget addresses the live members of every team the sender
	// belongs to, each once.
	AllTeamsTarget = "*"
	// workflowTargetPrefix is the Atomic intercom's workflow addressing,
	// which agent-fleet has no workflows for.
	workflowTargetPrefix = "workflow:"
)

// TeamOps adds named-team delivery to a session's operations, in the
// caller's process and without a frame of its own on the v4 wire:
//
//   - a name that is not a session of the sender's scope is looked up in
//     the rosters of the teams the sender belongs to and sent to by exact
//     session id (which the broker delivers across scopes): members of a
//     shared team reach each other by name, others do not;
//   - team:NAME[/ROLE] and * expand into one ordinary send per live
//     recipient (SendResult.Recipients), for teams the sender belongs to;
//   - a message between members of exactly one shared team carries that
//     team (content.team), as the Codex adapter's task teams do; with
//     several, the sender names one (SendRequest.Team).
//
// Reply, Pending and the rest pass through; Status adds the memberships.
type TeamOps struct {
	intercom.Ops
	Self  string
	Store *Store
	// Peer: see ServiceConfig.Peer.
	Peer func(ctx context.Context, id string) (*intercom.PeerInfo, error)
	// Teams, when set, gives the session's team service (for the team
	// whose scope it is in, in Status).
	Teams func() Teams
}

// Send implements intercom.Ops.
func (t *TeamOps) Send(ctx context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	if err := intercom.CheckTarget(req.To); err != nil {
		return nil, err
	}
	to := strings.TrimSpace(req.To)
	switch {
	case to == AllTeamsTarget || strings.HasPrefix(to, TeamTargetPrefix):
		return t.fanOut(ctx, req, to)
	case strings.HasPrefix(to, workflowTargetPrefix):
		return nil, fmt.Errorf("%w: agent-fleet has no workflows to address (%q); address a named team with team:NAME, or every team you belong to with *", intercom.ErrInvalidInput, to)
	}
	target, team, err := t.route(ctx, to, req.Team)
	if err != nil {
		return nil, err
	}
	req.To, req.Team = target, team
	res, err := t.Ops.Send(ctx, req)
	if res != nil {
		res.To = to
	}
	return res, err
}

// Ask implements intercom.Ops: one session, routed as Send routes it.
func (t *TeamOps) Ask(ctx context.Context, req intercom.AskRequest) (*intercom.AskResult, error) {
	if err := intercom.CheckTarget(req.To); err != nil {
		return nil, err
	}
	to := strings.TrimSpace(req.To)
	if to == AllTeamsTarget || strings.HasPrefix(to, TeamTargetPrefix) || strings.HasPrefix(to, workflowTargetPrefix) {
		return nil, fmt.Errorf("%w: an ask goes to one session; send to %q instead, or ask one member", intercom.ErrInvalidInput, to)
	}
	target, team, err := t.route(ctx, to, req.Team)
	if err != nil {
		return nil, err
	}
	req.To, req.Team = target, team
	res, err := t.Ops.Ask(ctx, req)
	if res != nil {
		res.To = to
	}
	return res, err
}

// Status implements intercom.Ops, listing the session's memberships.
func (t *TeamOps) Status(ctx context.Context) (*intercom.StatusResult, error) {
	res, err := t.Ops.Status(ctx)
	if err != nil {
		return res, err
	}
	var list []NamedTeam
	if t.Teams != nil && t.Teams() != nil {
		list, _ = t.Teams().NamedTeams(ctx)
	} else {
		list, _ = t.Store.Memberships(t.Self)
	}
	res.Teams = nil
	for _, nt := range list {
		if nt.Joined {
			role := nt.Role
			if role == "" {
				role = RoleMember // in its scope without being on the roster
			}
			res.Teams = append(res.Teams, intercom.TeamMembership{Name: nt.Name, Role: role, Current: nt.Current})
		}
	}
	return res, nil
}

// route resolves to (see TeamOps) and picks the message's team. A target
// that resolves nowhere goes to the broker as given.
func (t *TeamOps) route(ctx context.Context, to, team string) (target, msgTeam string, err error) {
	mine, err := t.Store.Memberships(t.Self)
	if err != nil {
		return "", "", err
	}
	if len(mine) == 0 {
		if team != "" {
			return "", "", t.notMember(team)
		}
		return to, "", nil
	}
	target = to
	if team != "" {
		// The team named settles a name its roster has once, whatever
		// other teams or the scope hold.
		i := slices.IndexFunc(mine, func(nt NamedTeam) bool { return nt.Name == team })
		if i < 0 {
			return "", "", t.notMember(team)
		}
		id, err := t.rosterMatch(ctx, mine[i:i+1], to)
		if err != nil {
			return "", "", err
		}
		if id != "" {
			return id, team, nil
		}
	}
	list, err := t.Ops.List(ctx, intercom.ListRequest{IncludeSelf: true})
	if err != nil {
		return "", "", err
	}
	id, err := matchSession(list.Sessions, to)
	if err != nil {
		return "", "", err
	}
	if id == "" {
		if id, err = t.rosterMatch(ctx, mine, to); err != nil {
			return "", "", err
		}
	}
	if id != "" {
		target = id
	}
	if id == t.Self {
		return "", "", intercom.ErrSelfTarget
	}
	var shared []string
	for _, nt := range mine {
		if nt.IsMember(target) {
			shared = append(shared, nt.Name)
		}
	}
	switch {
	case team != "": // one of mine: checked above
		if !slices.Contains(shared, team) {
			return "", "", fmt.Errorf("%w: %q is not a member of team %s; both sessions must belong to it", ErrNotMember, to, team)
		}
		return target, team, nil
	case len(shared) == 1:
		return target, shared[0], nil
	case len(shared) > 1:
		return "", "", fmt.Errorf("%w: you and %q share teams %s; say which team this message is in (--team NAME, or team in the tools)",
			ErrTeamChoice, to, strings.Join(shared, ", "))
	}
	return target, "", nil
}

func (t *TeamOps) notMember(team string) error {
	if _, _, err := t.Store.Lookup(team); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s is not a member of team %s (agent-fleet teams list shows yours)", ErrNotMember, t.Self, team)
}

// rosterMatch finds to among the live members of the teams in mine, by
// exact id or case-insensitive name ("" when none is).
func (t *TeamOps) rosterMatch(ctx context.Context, mine []NamedTeam, to string) (string, error) {
	look := newLookup(ctx, t.Ops, t.Peer)
	var found []string
	for _, nt := range mine {
		for _, id := range nt.MemberIDs() {
			if id == t.Self || slices.Contains(found, id) {
				continue
			}
			name, live, _ := look(id)
			if id == to || live && name != "" && wire.SameName(name, to) {
				found = append(found, id)
			}
		}
	}
	if len(found) > 1 {
		return "", fmt.Errorf("%w: %d members of your teams are named %q (%s); use the session id", intercom.ErrAmbiguousTarget, len(found), to, strings.Join(found, ", "))
	}
	if len(found) == 1 {
		return found[0], nil
	}
	return "", nil
}

// fanOut sends req to every live member that pattern selects, each once
// (on a broker that cannot say who is live, to every member).
func (t *TeamOps) fanOut(ctx context.Context, req intercom.SendRequest, pattern string) (*intercom.SendResult, error) {
	if req.MessageID != "" {
		return nil, fmt.Errorf("%w: a send to several sessions gives each its own message id", intercom.ErrInvalidInput)
	}
	mine, err := t.Store.Memberships(t.Self)
	if err != nil {
		return nil, err
	}
	teams, role := mine, ""
	if pattern != AllTeamsTarget {
		name := strings.TrimPrefix(pattern, TeamTargetPrefix)
		if i := strings.IndexByte(name, '/'); i >= 0 {
			name, role = name[:i], name[i+1:]
			if role != RoleManager && role != RoleMember {
				return nil, fmt.Errorf("%w: %q: a team target's role is %s or %s", intercom.ErrInvalidInput, pattern, RoleManager, RoleMember)
			}
		}
		if err := ValidateTeamName(name); err != nil {
			return nil, err
		}
		if req.Team != "" && req.Team != name {
			return nil, fmt.Errorf("%w: %q is a send to team %s, not %s", intercom.ErrInvalidInput, pattern, name, req.Team)
		}
		i := slices.IndexFunc(mine, func(nt NamedTeam) bool { return nt.Name == name })
		if i < 0 {
			return nil, t.notMember(name)
		}
		teams = mine[i : i+1]
	} else if len(mine) == 0 {
		return nil, fmt.Errorf("%w: * addresses the members of your named teams, and %s belongs to none (agent-fleet teams join NAME)", ErrNotMember, t.Self)
	}
	look := newLookup(ctx, t.Ops, t.Peer)
	out := &intercom.SendResult{OK: true, Delivered: true, Accepted: true, To: pattern}
	if len(teams) == 1 {
		out.Team = teams[0].Name
	}
	var sent []string
	for _, nt := range teams {
		for _, id := range nt.MemberIDs() {
			if id == t.Self || slices.Contains(sent, id) || (role != "" && nt.RoleOf(id) != role) {
				continue
			}
			// Not known to be offline (a broker that cannot tell): send,
			// and let the broker report.
			if _, live, known := look(id); !live && known {
				if !slices.Contains(out.Offline, id) {
					out.Offline = append(out.Offline, id)
				}
				continue
			}
			sent = append(sent, id)
			// A member of several of the sender's teams gets one message,
			// for the first of them it was found in.
			r := t.sendOne(ctx, req, id, nt.Name)
			out.Recipients = append(out.Recipients, r)
			out.OK = out.OK && r.OK
			out.Delivered = out.Delivered && r.Delivered
			out.Accepted = out.Accepted && r.Accepted
		}
	}
	out.Offline = slices.DeleteFunc(out.Offline, func(id string) bool { return slices.Contains(sent, id) })
	if len(out.Recipients) == 0 {
		off := ""
		if len(out.Offline) > 0 {
			off = "; not connected: " + strings.Join(out.Offline, ", ")
		}
		return nil, fmt.Errorf("%w: %s selects no connected session besides you%s", intercom.ErrTargetNotFound, pattern, off)
	}
	if !out.OK {
		// Who did not get it, and why, so that the error line says it too.
		var failed []string
		unknown := 0
		for _, r := range out.Recipients {
			if !r.OK {
				failed = append(failed, fmt.Sprintf("%s (%s)", r.To, cmp.Or(r.Code, "not delivered")))
				if r.OutcomeUnknown() {
					unknown++
				}
			}
		}
		out.Code = "PARTIAL_DELIVERY"
		out.Reason = fmt.Sprintf("%d of %d recipients did not get it: %s", len(failed), len(out.Recipients), strings.Join(failed, ", "))
		if unknown == len(failed) {
			// None surely missed it: the outcome is unknown (exit 8).
			out.Code = intercom.CodeOutcomeUnknown
			out.Reason = fmt.Sprintf("%d of %d recipients may or may not have it: %s", len(failed), len(out.Recipients), strings.Join(failed, ", "))
		}
	}
	return out, nil
}

// sendOne is one ordinary send of a fan-out, by exact id; an error becomes
// the recipient's outcome.
func (t *TeamOps) sendOne(ctx context.Context, req intercom.SendRequest, id, team string) intercom.SendResult {
	req.To, req.Team = id, team
	res, err := t.Ops.Send(ctx, req)
	if err != nil {
		r := intercom.SendResult{To: id, TargetID: id, Team: team, Code: "SEND_FAILED", Reason: err.Error()}
		if errors.Is(err, intercom.ErrOutcomeUnknown) {
			r.Code = intercom.CodeOutcomeUnknown // may have arrived: not a failure to report as one
		}
		if res != nil {
			r.MessageID = res.MessageID
		}
		return r
	}
	return *res
}
