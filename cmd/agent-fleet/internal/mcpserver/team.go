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
	Name    string   `json:"name,omitempty"`
	Create  bool     `json:"create,omitempty"`
	Leave   bool     `json:"leave,omitempty"`
	Members []string `json:"members,omitempty"`
	Work    *string  `json:"work,omitempty"`
}

type teamArgs struct {
	Team string `json:"team,omitempty"`
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
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_team", Annotations: readOnlyPeers,
		Description: "Show your manager and coworkers (fleet workers, TmuxDeck team, named team or same-scope roster) and whether each is connected. " +
			"Start here when you work in a team; send to the returned target. With team, show that named team's roster; without, also the rosters of every named team you belong to.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"team": map[string]any{"type": "string", "pattern": teams.TeamNamePattern, "description": "a named team you belong to: show its roster"},
		}}}, t.teamTool)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_join",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(false)}, // leave gives a membership up
		Description: "List, join, create or leave named teams. Membership is additive: joining keeps your other teams. " +
			"Omit name to list the teams; create: true makes you its manager; leave: true leaves the team. " +
			"A plain join moves you into the team's private scope; members and work form a task team (as the Codex adapter's) where nobody moves. " +
			"Ask the user once before forming or joining a team.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"name":    map[string]any{"type": "string", "pattern": teams.TeamNamePattern, "description": "the team's name"},
			"create":  map[string]any{"type": "boolean", "description": "create the team and manage it (default false: join an existing one)"},
			"leave":   map[string]any{"type": "boolean", "description": "leave the team (its manager cannot; only the CLI deletes a team: agent-fleet teams delete NAME)"},
			"members": map[string]any{"type": "array", "items": map[string]any{"type": "string", "minLength": 1}, "description": "connected sessions (name or id) to add; the manager's to give"},
			"work":    map[string]any{"type": "string", "minLength": 1, "maxLength": teams.MaxWorkChars, "description": "the task of a team being created"},
		}}}, t.join)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_pending", Annotations: changes,
		Description: "Read unread inbound messages and unresolved asks for this session; pass askId to read one ask in full. " +
			"A manager of fleet workers may pass session (an owned coworker's exact target from intercom_team) to see that coworker's pending asks, read-only.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"mark_read": map[string]any{"type": "boolean", "description": "mark the returned messages read (default false; refused with session: inspection is read-only)"},
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
	return result(toolHints(err.Error()), output.Failure(err), true)
}

func (t *teamTools) teamTool(ctx context.Context, _ *mcp.CallToolRequest, a teamArgs) (*mcp.CallToolResult, any, error) {
	if a.Team != "" {
		rosters, err := teamCall(ctx, t, func(svc teams.Teams) ([]teams.Roster, error) { return svc.Rosters(ctx, a.Team) })
		if err != nil {
			return teamFailure(err), nil, nil
		}
		return t.tools.withFooter(ctx, result(output.RostersText(rosters), map[string]any{"teams": rosters}, false)), nil, nil
	}
	team, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.Team, error) { return svc.Team(ctx) })
	if err != nil {
		return teamFailure(err), nil, nil
	}
	// As the Codex adapter's intercom_team without a team: the rosters of
	// every named team the session belongs to, after its own team.
	rosters, _ := teamCall(ctx, t, func(svc teams.Teams) ([]teams.Roster, error) { return svc.Rosters(ctx, "") })
	text, structured := output.TeamView(team, rosters)
	return t.tools.withFooter(ctx, result(text, structured, false)), nil, nil
}

func (t *teamTools) join(ctx context.Context, _ *mcp.CallToolRequest, a joinArgs) (*mcp.CallToolResult, any, error) {
	if a.Name == "" {
		if a.Create || a.Leave || len(a.Members) > 0 || a.Work != nil {
			return teamFailure(fmt.Errorf("%w: name the team to create, extend or leave", intercom.ErrInvalidInput)), nil, nil
		}
		list, err := teamCall(ctx, t, func(svc teams.Teams) ([]teams.NamedTeam, error) { return svc.NamedTeams(ctx) })
		if err != nil {
			return teamFailure(err), nil, nil
		}
		return result(output.NamedTeamsText(list, output.Tool), map[string]any{"teams": list}, false), nil, nil
	}
	if a.Leave {
		if a.Create || len(a.Members) > 0 || a.Work != nil {
			return teamFailure(fmt.Errorf("%w: leave takes only the team's name", intercom.ErrInvalidInput)), nil, nil
		}
		res, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.LeaveResult, error) {
			return svc.Leave(ctx, teams.LeaveRequest{Name: a.Name})
		})
		if err != nil {
			return teamFailure(err), nil, nil
		}
		return result(output.LeftText(res), res, false), nil, nil
	}
	req := teams.JoinRequest{Name: a.Name, Create: a.Create, Members: a.Members}
	if a.Work != nil {
		if req.Work = *a.Work; req.Work == "" {
			return teamFailure(fmt.Errorf("%w: work must describe the task", intercom.ErrInvalidInput)), nil, nil
		}
	}
	res, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.JoinResult, error) { return svc.Join(ctx, req) })
	if err != nil {
		return teamFailure(err), nil, nil
	}
	structured := map[string]any{"ok": true, "team": res.Team, "role": res.Role, "manager": res.Manager}
	if res.Roster != nil {
		structured["roster"] = res.Roster
	}
	return result(output.JoinedText(res, "", output.Tool), structured, false), nil, nil
}

func (t *teamTools) pending(ctx context.Context, req *mcp.CallToolRequest, a teamPendingArgs) (*mcp.CallToolResult, any, error) {
	if a.Session == "" {
		return t.tools.pending(ctx, req, pendingArgs{MarkRead: a.MarkRead, AskID: a.AskID})
	}
	if w, err := t.ops.Whoami(ctx); err == nil && w.SessionID == a.Session {
		return t.tools.pending(ctx, req, pendingArgs{MarkRead: a.MarkRead, AskID: a.AskID})
	}
	if a.MarkRead {
		// As pending --inbox-of --mark-read (spec §7.4): never a silent no-op.
		return teamFailure(fmt.Errorf("%w: mark_read cannot be used with session: another session's inbox is inspected read-only; call again without mark_read", intercom.ErrInvalidInput)), nil, nil
	}
	insp, err := teamCall(ctx, t, func(svc teams.Teams) (*teams.Inspection, error) {
		return svc.InspectInbox(ctx, teams.InspectRequest{Session: a.Session, AskID: a.AskID})
	})
	if err != nil {
		return teamFailure(fmt.Errorf("Failed to inspect pending asks: %w", err)), nil, nil
	}
	return result(output.InspectionText(insp, a.AskID != ""), insp, false), nil, nil
}
