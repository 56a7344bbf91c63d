package teams

import (
	"context"
	"fmt"
	"strings"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Roster is a named team as its members see it (the Codex adapter's
// roster): its manager and members, and which are connected now.
type Roster struct {
	Name    string         `json:"name"`
	Work    string         `json:"work,omitempty"`
	Self    RosterSelf     `json:"self"`
	Manager Endpoint       `json:"manager"`
	Members []RosterMember `json:"members"`
}

// RosterSelf is the asking session in a roster.
type RosterSelf struct {
	ID        string `json:"id"`
	IsManager bool   `json:"isManager"`
}

// RosterMember is one member of a roster; Target is what to send to (its
// exact session id, which reaches it from any scope).
type RosterMember struct {
	ID        string `json:"id"`
	Target    string `json:"target"`
	Name      string `json:"name,omitempty"`
	Role      string `json:"role"` // RoleManager or RoleMember
	Connected bool   `json:"connected"`
}

// FormatRoster renders a roster as the Codex adapter's intercom_team text
// for a named team.
func FormatRoster(r *Roster) string {
	lines := []string{"Team: " + r.Name}
	if r.Work != "" {
		lines = append(lines, "Work: "+r.Work)
	}
	you := "You: " + r.Self.ID
	if r.Self.IsManager {
		you += " [manager]"
	}
	manager := "Manager: " + r.Manager.Target
	if !r.Manager.Connected {
		manager += " [offline]"
	}
	lines = append(lines, you, manager, "Members:")
	for _, m := range r.Members {
		name := m.Name
		if name == "" {
			name = m.ID
		}
		line := fmt.Sprintf("- %s (%s) [%s]", name, m.ID, m.Role)
		if !m.Connected {
			line += " [offline]"
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// liveLookup says whether a session id is connected now, and its name;
// known is false when nobody can tell (a session of another scope on a
// broker without agent-fleet's local API).
type liveLookup func(id string) (name string, live, known bool)

// newLookup sees the sessions of the caller's own scope (one list) and,
// through peer (agent-fleet's local API), exact ids in any other scope.
func newLookup(ctx context.Context, ops intercom.Ops, peer func(context.Context, string) (*intercom.PeerInfo, error)) liveLookup {
	own := map[string]string{}
	if list, err := ops.List(ctx, intercom.ListRequest{IncludeSelf: true}); err == nil {
		for _, v := range list.Sessions {
			own[v.ID] = v.Name
		}
	}
	type answer struct {
		p   *intercom.PeerInfo
		err error
	}
	cache := map[string]answer{}
	return func(id string) (string, bool, bool) {
		if name, ok := own[id]; ok {
			return name, true, true
		}
		if peer == nil {
			return "", false, false
		}
		a, seen := cache[id]
		if !seen {
			a.p, a.err = peer(ctx, id)
			cache[id] = a
		}
		switch {
		case a.err != nil:
			return "", false, false
		case a.p == nil || !a.p.Connected:
			return "", false, true
		}
		return a.p.Name, true, true
	}
}

func (s *Service) lookup(ctx context.Context) liveLookup {
	return newLookup(ctx, s.cfg.Ops, s.cfg.Peer)
}

// rosterOf is team as self sees it, with look telling who is connected.
func rosterOf(team NamedTeam, self string, look liveLookup) Roster {
	r := Roster{Name: team.Name, Work: team.Work, Self: RosterSelf{ID: self, IsManager: self == team.ManagerSessionID},
		Members: []RosterMember{}}
	for _, id := range team.MemberIDs() {
		name, live, _ := look(id)
		r.Members = append(r.Members, RosterMember{ID: id, Target: id, Name: name, Role: team.RoleOf(id), Connected: live})
		if id == team.ManagerSessionID {
			r.Manager = Endpoint{Target: id, Connected: live}
		}
	}
	return r
}

func (s *Service) roster(ctx context.Context, self string, team NamedTeam) Roster {
	return rosterOf(team, self, s.lookup(ctx))
}

// Rosters is the rosters of the teams self belongs to (only name, when
// given: ErrNotMember when self is not in it).
func (s *Service) Rosters(ctx context.Context, name string) ([]Roster, error) {
	self, err := s.self(ctx)
	if err != nil {
		return nil, err
	}
	mine, err := s.store.Memberships(self)
	if err != nil {
		return nil, err
	}
	look := s.lookup(ctx)
	out := []Roster{}
	for _, t := range mine {
		if name == "" || t.Name == name {
			out = append(out, rosterOf(t, self, look))
		}
	}
	if name != "" && len(out) == 0 {
		if _, _, err := s.store.Lookup(name); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s is not a member of team %s", ErrNotMember, self, name)
	}
	return out, nil
}

// matchSession resolves to among sessions as the Claude/Codex adapters
// pre-resolve a target (spec §8.3): exact id, unique case-insensitive
// name, unique id prefix of at least 4 characters; "" when none matches.
func matchSession(sessions []intercom.SessionView, to string) (string, error) {
	var byName, byPrefix []string
	for _, v := range sessions {
		if v.ID == to {
			return to, nil
		}
		if v.Name != "" && wire.SameName(v.Name, to) {
			byName = append(byName, v.ID)
		}
		if len(to) >= intercom.MinTargetPrefix && strings.HasPrefix(v.ID, to) {
			byPrefix = append(byPrefix, v.ID)
		}
	}
	for _, ids := range [][]string{byName, byPrefix} {
		switch {
		case len(ids) == 1:
			return ids[0], nil
		case len(ids) > 1:
			return "", fmt.Errorf("%w: %d sessions match %q (%s); use the session id", intercom.ErrAmbiguousTarget, len(ids), to, strings.Join(ids, ", "))
		}
	}
	return "", nil
}
