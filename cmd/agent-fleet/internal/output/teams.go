package output

import (
	"fmt"
	"strings"

	"github.com/agent-fleet/agent-fleet/teams"
)

// TeamText is a team as the adapters' intercom_team text (teams.Format),
// on both surfaces, with every id, target, harness, role and state escaped
// (Inline): they come from worker records, manifests and other sessions.
func TeamText(t *teams.Team) string {
	c := *t
	c.Self.ID, c.Self.WorkerID, c.Self.Role = Inline(t.Self.ID), Inline(t.Self.WorkerID), Inline(t.Self.Role)
	if t.Manager != nil {
		m := *t.Manager
		m.Target = Inline(m.Target)
		c.Manager = &m
	}
	if t.Controller != nil {
		ctl := *t.Controller
		ctl.Target = Inline(ctl.Target)
		c.Controller = &ctl
	}
	c.Coworkers = make([]teams.Member, len(t.Coworkers))
	for i, m := range t.Coworkers {
		m.ID, m.Target, m.Harness, m.Role, m.State = Inline(m.ID), Inline(m.Target), Inline(m.Harness), Inline(m.Role), Inline(m.State)
		c.Coworkers[i] = m
	}
	return teams.Format(&c)
}

// TeamView is intercom_team without a team (and agent-fleet team): the
// session's team, then the rosters of the named teams it belongs to, as
// the Codex adapter's intercom_team; text and structured form.
func TeamView(t *teams.Team, rosters []teams.Roster) (string, any) {
	if len(rosters) == 0 {
		return TeamText(t), t
	}
	return TeamText(t) + "\n\nYour named teams:\n\n" + RostersText(rosters), struct {
		*teams.Team
		Teams []teams.Roster `json:"teams"`
	}{t, rosters}
}

// InspectionText renders a coworker's pending asks like the Pi adapter
// (docs/protocol.md §7.4), on both surfaces; full shows the one ask asked
// for in full.
func InspectionText(insp *teams.Inspection, full bool) string {
	if full && len(insp.Asks) == 1 {
		a := insp.Asks[0]
		return fmt.Sprintf("Pending ask %s\nInbox: %s\nFrom: %s\n\n%s%s", Inline(a.AskID), Inline(insp.InboxSessionID), DisplayName(a.From), Block(a.Text, ""), Lines(AttachmentsTool(a.Attachments)))
	}
	if len(insp.Asks) == 0 {
		return fmt.Sprintf("No unresolved inbound asks in the inbox of %s.", Inline(insp.InboxSessionID))
	}
	lines := []string{fmt.Sprintf("Pending asks of %s (read-only):", Inline(insp.InboxSessionID))}
	for _, a := range insp.Asks {
		lines = append(lines, AskLine(a))
	}
	return strings.Join(lines, "\n")
}

// NamedTeamsText lists the named teams (never their scopes) with their
// live member counts, marking the caller's memberships ([joined]) and the
// team whose scope it is in (current).
func NamedTeamsText(list []teams.NamedTeam, s Surface) string {
	if len(list) == 0 {
		if s == Tool {
			return "No named teams. Create one with intercom_join({ name, create: true })."
		}
		return "No named teams. Create one with agent-fleet teams create NAME."
	}
	var lines []string
	if s == Tool {
		lines = append(lines, "Named teams:")
	}
	for _, nt := range list {
		count := plural(nt.MemberCount, "member")
		if nt.Live != nil {
			count = fmt.Sprintf("%d of %s live", *nt.Live, count)
		} else {
			count += ", live unknown" // no broker answers who is connected
		}
		line := fmt.Sprintf("- %s (manager: %s; %s)", Inline(nt.Name), Inline(nt.ManagerSessionID), count)
		switch {
		case nt.Joined && nt.Current:
			line += " [joined, current]"
		case nt.Joined:
			line += " [joined]"
		}
		lines = append(lines, line)
	}
	if s == Tool {
		lines = append(lines, "Join one with intercom_join({ name }); leave with intercom_join({ name, leave: true }). Scopes are private and never listed.")
	}
	return strings.Join(lines, "\n")
}

// JoinedText says that self joined (or created) a named team, and whether
// it moved into the team's scope.
func JoinedText(res *teams.JoinResult, self string, s Surface) string {
	verb := "Joined team " + Inline(res.Team)
	if res.Created {
		verb = "Created team " + Inline(res.Team) + " and joined it"
	}
	head := fmt.Sprintf("%s as %s (manager: %s).", verb, Inline(res.Role), Inline(res.Manager))
	switch {
	case s == Tool && res.Moved:
		return head + " You now see only this team's sessions; intercom_team lists them. Other team memberships are unchanged."
	case s == Tool:
		return head + " Other team memberships are unchanged; members reach each other by name, and messages carry the team."
	case res.Moved:
		return fmt.Sprintf("%s\nSession %s is now in the team's scope: agent-fleet team lists who is there. Its other memberships stay.", head, Inline(self))
	}
	return fmt.Sprintf("%s\nSession %s stays where it is; the team's members reach it by name while it is connected.", head, Inline(self))
}

// LeftText says that a session left or deleted a team.
func LeftText(res *teams.LeaveResult) string {
	text := "Left team " + Inline(res.Team) + "."
	switch {
	case res.Deleted && res.Team == "":
		text = "Left the scope of a team that was deleted."
	case res.Deleted:
		text = "Deleted team " + Inline(res.Team) + "."
	}
	if res.Home {
		text += " The session is back in its home scope."
	}
	return text
}

// RostersText renders the rosters of named teams (intercom_team with a
// team).
func RostersText(list []teams.Roster) string {
	parts := make([]string, len(list))
	for i := range list {
		r := list[i]
		r.Name, r.Work, r.Self.ID, r.Manager.Target = Inline(r.Name), Inline(r.Work), Inline(r.Self.ID), Inline(r.Manager.Target)
		members := make([]teams.RosterMember, len(r.Members))
		for j, m := range r.Members {
			m.ID, m.Name = Inline(m.ID), Inline(m.Name)
			members[j] = m
		}
		r.Members = members
		parts[i] = teams.FormatRoster(&r)
	}
	return strings.Join(parts, "\n\n")
}
