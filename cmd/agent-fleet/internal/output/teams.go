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

// NamedTeamsText lists the named teams (never their scopes), marking the
// caller's.
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
		line := fmt.Sprintf("- %s (manager: %s)", Inline(nt.Name), Inline(nt.ManagerSessionID))
		if nt.Joined {
			line += " [joined]"
		}
		lines = append(lines, line)
	}
	if s == Tool {
		lines = append(lines, "Join one with intercom_join({ name }); nothing else is listed (scopes are private).")
	}
	return strings.Join(lines, "\n")
}

// JoinedText says that self joined (or created) a named team.
func JoinedText(res *teams.JoinResult, self string, s Surface) string {
	verb := "Joined team " + Inline(res.Team)
	if res.Created {
		verb = "Created team " + Inline(res.Team) + " and joined it"
	}
	if s == Tool {
		return fmt.Sprintf("%s as %s (manager: %s). You now see only this team's sessions; intercom_team lists them.", verb, Inline(res.Role), Inline(res.Manager))
	}
	return fmt.Sprintf("%s as %s (manager: %s).\nSession %s now sees only its team: agent-fleet team lists it.", verb, Inline(res.Role), Inline(res.Manager), Inline(self))
}
