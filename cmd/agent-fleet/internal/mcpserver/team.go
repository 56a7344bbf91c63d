package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
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

// addTeamTools adds intercom_team and intercom_join, and extends
// intercom_pending with session (a manager's read-only look at an owned
// coworker's pending asks, spec §7.4). In Boss team-only mode
// intercom_list is withdrawn (spec §7.3).
func addTeamTools(server *mcp.Server, it *intercomTools, st *teams.SessionTeam) {
	if st == nil || st.Service() == nil {
		return
	}
	t := &teamTools{ops: it.ops, st: st, tools: it}
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
	if b := st.Boss(); b.Present && b.Restricted {
		server.RemoveTools("intercom_list")
	}
}

type teamTools struct {
	ops   intercom.Ops
	st    *teams.SessionTeam
	tools *intercomTools
}

// teamCall runs call on the session's team operations. When the holder
// they went through is gone, an intercom call first lets a failoverOps
// take the session over, and call runs again on what replaced them.
func teamCall[T any](ctx context.Context, t *teamTools, call func(teams.Teams) (T, error)) (T, error) {
	r, err := call(t.st.Service())
	if errors.Is(err, intercom.ErrNoHolder) {
		if _, werr := t.ops.Whoami(ctx); werr == nil {
			return call(t.st.Service())
		}
	}
	return r, err
}

func teamFailure(err error) *mcp.CallToolResult {
	return result(err.Error(), output.Failure(err), true)
}

func (t *teamTools) teamTool(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	team, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.Team, error) { return svc.Team(ctx) })
	if err != nil {
		return teamFailure(err), nil, nil
	}
	return t.tools.withFooter(ctx, result(output.TeamText(team), team, false)), nil, nil
}

func (t *teamTools) join(ctx context.Context, _ *mcp.CallToolRequest, a joinArgs) (*mcp.CallToolResult, any, error) {
	if a.Name == "" {
		if a.Create {
			return teamFailure(fmt.Errorf("name the team to create")), nil, nil
		}
		list, err := teamCall(ctx, t, func(svc teams.Teams) ([]teams.NamedTeam, error) { return svc.NamedTeams(ctx) })
		if err != nil {
			return teamFailure(err), nil, nil
		}
		return result(output.NamedTeamsText(list, output.Tool), map[string]any{"teams": list}, false), nil, nil
	}
	res, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.JoinResult, error) {
		return svc.Join(ctx, teams.JoinRequest{Name: a.Name, Create: a.Create})
	})
	if err != nil {
		return teamFailure(err), nil, nil
	}
	return result(output.JoinedText(res, "", output.Tool),
		map[string]any{"ok": true, "team": res.Team, "role": res.Role, "manager": res.Manager}, false), nil, nil
}

func (t *teamTools) pending(ctx context.Context, req *mcp.CallToolRequest, a teamPendingArgs) (*mcp.CallToolResult, any, error) {
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
	return result(output.InspectionText(insp, a.AskID != ""), insp, false), nil, nil
}
