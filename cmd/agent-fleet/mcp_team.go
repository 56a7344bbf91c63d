package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

type joinArgs struct {
	Name   string `json:"name,omitempty"`
	Create bool   `json:"create,omitempty"`
}

type teamPendingArgs struct {
	MarkRead bool   `json:"mark_read,omitempty"`
	AskID    string `json:"askId,omitempty"`
	Session  string `json:"session,omitempty"`
}

// addTeamTools adds intercom_team and intercom_join to an MCP server built
// by newMCPServer, and extends intercom_pending with session (a manager's
// read-only look at an owned coworker's pending asks, spec §7.4). In Boss
// team-only mode intercom_list is withdrawn (spec §7.3).
func addTeamTools(server *mcp.Server, ops intercom.Ops, st *sessionTeam) {
	if st == nil || st.service() == nil {
		return
	}
	t := &mcpTeamTools{ops: ops, st: st, tools: &mcpTools{ops: ops}}
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)}
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_team", InputSchema: emptySchema, Annotations: readOnly,
		Description: "Show your manager and coworkers (fleet workers, TmuxDeck team, named team or same-scope roster) and whether each is connected. " +
			"Start here when you work in a team; send to the returned target."}, t.teamTool)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_join",
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: boolPtr(false)},
		Description: "List, join, or create a named team (a private scope: its members see only each other). " +
			"Omit name to list the teams; create: true makes you its manager. Ask the user before forming or joining a team.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"name":   map[string]any{"type": "string", "pattern": teams.TeamNamePattern, "description": "the team's name"},
			"create": map[string]any{"type": "boolean", "description": "create the team and manage it (default false: join an existing one)"},
		}}}, t.join)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_pending",
		Description: "Read unread inbound messages and unresolved asks for this session; pass askId to read one ask in full. " +
			"A manager of fleet workers may pass session (an owned coworker's exact target from intercom_team) to see that coworker's pending asks, read-only.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"mark_read": map[string]any{"type": "boolean", "description": "mark the returned messages read (default false)"},
			"askId":     map[string]any{"type": "string", "description": "Show this pending ask in full."},
			"session":   map[string]any{"type": "string", "description": "An owned coworker's exact target whose pending asks to inspect (managers only)."},
		}}}, t.pending)
	if st.boss.Present && st.boss.Restricted {
		server.RemoveTools("intercom_list")
	}
}

type mcpTeamTools struct {
	ops   intercom.Ops
	st    *sessionTeam
	tools *mcpTools
}

// teamCall runs call on the session's team operations. When the holder
// they went through is gone, an intercom call first lets a failoverOps
// take the session over, and call runs again on what replaced them.
func teamCall[T any](ctx context.Context, t *mcpTeamTools, call func(teams.Teams) (T, error)) (T, error) {
	r, err := call(t.st.service())
	if errors.Is(err, intercom.ErrNoHolder) {
		if _, werr := t.ops.Whoami(ctx); werr == nil {
			return call(t.st.service())
		}
	}
	return r, err
}

func teamFailure(err error) *mcp.CallToolResult {
	return result(err.Error(), map[string]any{"ok": false, "error": err.Error()}, true)
}

func (t *mcpTeamTools) teamTool(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	team, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.Team, error) { return svc.Team(ctx) })
	if err != nil {
		return teamFailure(err), nil, nil
	}
	return t.tools.withFooter(ctx, result(teams.Format(team), team, false)), nil, nil
}

func (t *mcpTeamTools) join(ctx context.Context, _ *mcp.CallToolRequest, a joinArgs) (*mcp.CallToolResult, any, error) {
	if a.Name == "" {
		if a.Create {
			return teamFailure(fmt.Errorf("name the team to create")), nil, nil
		}
		list, err := teamCall(ctx, t, func(svc teams.Teams) ([]teams.NamedTeam, error) { return svc.NamedTeams(ctx) })
		if err != nil {
			return teamFailure(err), nil, nil
		}
		return result(namedTeamsText(list), map[string]any{"teams": list}, false), nil, nil
	}
	res, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.JoinResult, error) {
		return svc.Join(ctx, teams.JoinRequest{Name: a.Name, Create: a.Create})
	})
	if err != nil {
		return teamFailure(err), nil, nil
	}
	verb := "Joined team " + res.Team
	if res.Created {
		verb = "Created team " + res.Team + " and joined it"
	}
	text := fmt.Sprintf("%s as %s (manager: %s). You now see only this team's sessions; intercom_team lists them.", verb, res.Role, res.Manager)
	return result(text, map[string]any{"ok": true, "team": res.Team, "role": res.Role, "manager": res.Manager}, false), nil, nil
}

func namedTeamsText(list []teams.NamedTeam) string {
	if len(list) == 0 {
		return "No named teams. Create one with intercom_join({ name, create: true })."
	}
	lines := []string{"Named teams:"}
	for _, nt := range list {
		line := fmt.Sprintf("- %s (manager: %s)", nt.Name, nt.ManagerSessionID)
		if nt.Joined {
			line += " [joined]"
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n") + "\nJoin one with intercom_join({ name }); nothing else is listed (scopes are private)."
}

func (t *mcpTeamTools) pending(ctx context.Context, req *mcp.CallToolRequest, a teamPendingArgs) (*mcp.CallToolResult, any, error) {
	if a.Session == "" {
		return t.tools.pending(ctx, req, pendingArgs{MarkRead: a.MarkRead, AskID: a.AskID})
	}
	if w, err := t.ops.Whoami(ctx); err == nil && w.SessionID == a.Session {
		return t.tools.pending(ctx, req, pendingArgs{MarkRead: a.MarkRead, AskID: a.AskID})
	}
	insp, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.Inspection, error) {
		return svc.InspectInbox(ctx, teams.InspectRequest{Session: a.Session, AskID: a.AskID})
	})
	if err != nil {
		return teamFailure(fmt.Errorf("Failed to inspect pending asks: %w", err)), nil, nil
	}
	return result(inspectionText(insp, a.AskID != ""), insp, false), nil, nil
}

// inspectionText renders a coworker's pending asks like the Pi adapter:
// "- <askId> · <sender>[ · oldest|latest|queued] · <N>s ago[ · async] · <preview>".
func inspectionText(insp *teams.Inspection, full bool) string {
	if full && len(insp.Asks) == 1 {
		a := insp.Asks[0]
		return fmt.Sprintf("Pending ask %s\nInbox: %s\nFrom: %s\n\n%s%s", a.AskID, insp.InboxSessionID, displayName(a.From), a.Text, formatAttachments(a.Attachments))
	}
	if len(insp.Asks) == 0 {
		return fmt.Sprintf("No unresolved inbound asks in the inbox of %s.", insp.InboxSessionID)
	}
	lines := []string{fmt.Sprintf("Pending asks of %s (read-only):", insp.InboxSessionID)}
	for _, a := range insp.Asks {
		lines = append(lines, askLine(a))
	}
	return strings.Join(lines, "\n")
}

func askLine(a intercom.AskView) string {
	line := fmt.Sprintf("- %s · %s", a.AskID, displayName(a.From))
	if a.Selector != "" {
		line += " · " + a.Selector
	}
	line += fmt.Sprintf(" · %ds ago", a.ElapsedSeconds)
	if a.DeferredAt != 0 {
		line += " · async"
	}
	return line + " · " + a.Preview
}

// deniedMCPSession is the MCP session of a process whose Boss contract is
// present but unusable: it never registers, and every intercom tool answers
// with the contract's error (spec §7.3, deny-all).
func deniedMCPSession(log *slog.Logger, id intercom.Identity, err error) *mcpSession {
	log.Error("not registering: the Boss team contract is unusable", "err", err)
	who := intercom.WhoamiResult{SessionID: id.SessionID, Name: id.Name, Cwd: id.Cwd, Model: id.Model}
	return &mcpSession{ops: teams.DeniedOps(who, err), id: id.SessionID, stop: func() {}}
}
