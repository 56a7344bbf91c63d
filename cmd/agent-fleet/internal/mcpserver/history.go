package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/intercom/history"
	"github.com/agent-fleet/agent-fleet/teams"
)

// HistoryFunc lists the session's message history (verbs.History).
type HistoryFunc func(ctx context.Context, args verbs.HistoryArgs) ([]history.Entry, error)

type historyArgs struct {
	With   string `json:"with,omitempty"`
	Team   string `json:"team,omitempty"`
	Search string `json:"search,omitempty"`
	Since  string `json:"since,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// addHistoryTool adds intercom_history over list.
func addHistoryTool(server *mcp.Server, list HistoryFunc) {
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_history", Annotations: readOnly,
		Description: "Search the messages this session sent and received (also those already read), with their receipts: queued, accepted, delivered, read. Newest last.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"with":   map[string]any{"type": "string", "description": "only messages with this session (id or name)"},
			"team":   map[string]any{"type": "string", "pattern": teams.TeamNamePattern, "description": "only messages exchanged in this named team"},
			"search": map[string]any{"type": "string", "description": "only messages whose text contains this (any letter case)"},
			"since":  map[string]any{"type": "string", "description": "only messages since a duration ago (\"2h\", \"7d\") or a time (RFC 3339)"},
			"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": history.MaxLimit,
				"description": "at most this many of the newest messages (default 50)"},
		}}}, func(ctx context.Context, _ *mcp.CallToolRequest, a historyArgs) (*mcp.CallToolResult, any, error) {
		es, err := list(ctx, verbs.HistoryArgs{With: a.With, Team: a.Team, Search: a.Search, Since: a.Since, Limit: a.Limit})
		if err != nil {
			return failure(err), nil, nil
		}
		text, structured := output.HistoryTool(es)
		return result(text, structured, false), nil, nil
	})
}
