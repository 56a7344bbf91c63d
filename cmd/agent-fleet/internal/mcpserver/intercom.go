package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/teams"
)

// Input schemas follow the 0.13 line of the Claude adapter (spec §8.3),
// strict, plus askId on intercom_reply and intercom_pending. Defaults are
// stated in descriptions, not as "default" keywords: the SDK's default
// filling panics on a call whose arguments are null.
var (
	emptySchema       = map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false}
	attachmentsSchema = map[string]any{
		"type": "array",
		"items": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"type":     map[string]any{"type": "string", "enum": []any{"file", "snippet", "context"}},
				"name":     map[string]any{"type": "string"},
				"content":  map[string]any{"type": "string"},
				"language": map[string]any{"type": "string"},
			},
			"required":             []any{"type", "name", "content"},
			"additionalProperties": false,
		},
	}
	teamSchema = map[string]any{"type": "string", "pattern": teams.TeamNamePattern,
		"description": "The named team this message is for (both sessions must belong to it); needed when you share several teams. Omit for ungrouped contact."}
	// Hints after the Claude adapter's (spec A.2): reading tools are
	// read-only and idempotent, those that ask the broker about other
	// sessions open-world; send and ask add a message each call; what
	// overwrites or resolves something (a summary, read marks, an ask) is
	// destructive. MCP's defaults (destructive, open-world) are spelled out.
	readOnly      = &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)}
	readOnlyPeers = &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(true)}
	sends         = &mcp.ToolAnnotations{DestructiveHint: boolPtr(false), OpenWorldHint: boolPtr(true)}
	changes       = &mcp.ToolAnnotations{DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(true)}
)

type listArgs struct {
	Scope       string `json:"scope,omitempty"`
	IncludeSelf bool   `json:"include_self,omitempty"`
}

type summaryArgs struct {
	Summary string `json:"summary"`
}

type sendArgs struct {
	To          string            `json:"to"`
	Message     string            `json:"message"`
	Attachments []wire.Attachment `json:"attachments,omitempty"`
	TimeoutMs   int               `json:"timeout_ms,omitempty"`
	Team        string            `json:"team,omitempty"`
}

type pendingArgs struct {
	MarkRead bool   `json:"mark_read,omitempty"`
	AskID    string `json:"askId,omitempty"`
}

type replyArgs struct {
	Message     string            `json:"message"`
	To          string            `json:"to,omitempty"`
	Which       string            `json:"which,omitempty"`
	AskID       string            `json:"askId,omitempty"`
	ContextID   string            `json:"contextId,omitempty"`
	Team        string            `json:"team,omitempty"`
	Attachments []wire.Attachment `json:"attachments,omitempty"`
}

func boolPtr(b bool) *bool { return &b }

// addIntercomTools adds the eight intercom tools over ops.
func addIntercomTools(server *mcp.Server, t *intercomTools) {
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_whoami", InputSchema: emptySchema, Annotations: readOnly,
		Description: "Return this session's intercom identity (full session id, name, cwd) for reliable targeting."}, t.whoami)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_status", InputSchema: emptySchema, Annotations: readOnlyPeers,
		Description: "Show intercom connection status, active sessions, unread messages, and pending asks."}, t.status)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_list", Annotations: readOnlyPeers,
		Description: "List intercom-connected agent sessions on this machine.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"scope":        map[string]any{"type": "string", "enum": []any{"machine", "directory", "repo"}, "description": "machine (default), directory or repo"},
			"include_self": map[string]any{"type": "boolean", "description": "include this session (default false)"},
		}}}, t.list)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_set_summary", Annotations: changes,
		Description: "Publish a short status summary so other sessions can discover what this session is doing.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"summary"},
			"properties": map[string]any{"summary": map[string]any{"type": "string", "maxLength": 400}}}}, t.setSummary)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_send", Annotations: sends,
		Description: "Send a non-blocking direct message to another intercom session by name, full ID, or unique ID prefix. " +
			"to: \"team:NAME\" sends to every connected member of a named team you belong to (\"team:NAME/manager\", \"team:NAME/member\" by role; \"*\": all your teams), one message each.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"to", "message"},
			"properties": map[string]any{"to": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"},
				"attachments": attachmentsSchema, "team": teamSchema}}}, t.send)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_ask", Annotations: sends,
		Description: "Ask another intercom session a question only when the next step depends on its reply. Use intercom_send for assignments, progress/status checkpoints, and notifications.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"to", "message"},
			"properties": map[string]any{"to": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"},
				"attachments": attachmentsSchema, "team": teamSchema,
				"timeout_ms": map[string]any{"type": "integer", "minimum": 1, "maximum": intercom.MaxAskWait.Milliseconds(),
					"description": fmt.Sprintf("How long to wait for the reply (default %d). Handing the ask over is never cut short: a recipient that does not take it (paused, busy) holds the call up to 8 s, whatever this says. If the wait runs out the ask stays open and its reply appears in intercom_pending.",
						intercom.AskTimeout.Milliseconds())}}}}, t.ask)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_pending", Annotations: changes,
		Description: "Read unread inbound messages and unresolved asks for this session; pass askId to read one ask in full.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"mark_read": map[string]any{"type": "boolean", "description": "mark the returned messages read (default false)"},
			"askId":     map[string]any{"type": "string", "description": "Show this pending ask in full."},
		}}}, t.pending)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_reply", Annotations: changes,
		Description: "Reply to a pending inbound ask. Choose it with askId, or with to plus which=oldest/latest when one sender has several unresolved asks; " +
			"or answer any message by its contextId from intercom_pending. The reply keeps the original message's team.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"message"},
			"properties": map[string]any{
				"message":     map[string]any{"type": "string"},
				"to":          map[string]any{"type": "string", "description": "Optional sender/session selector; never a message or thread ID."},
				"which":       map[string]any{"type": "string", "enum": []any{"oldest", "latest"}, "description": "Select the oldest or latest ask from the chosen sender."},
				"askId":       map[string]any{"type": "string", "description": "The ask to answer, from intercom_pending."},
				"contextId":   map[string]any{"type": "string", "description": "The message to answer (any message, not only an ask), from intercom_pending."},
				"team":        map[string]any{"type": "string", "pattern": teams.TeamNamePattern, "description": "Must be the original message's team; omit it to keep that team."},
				"attachments": attachmentsSchema,
			}}}, t.reply)
}

// intercomTools serve the intercom tools of one session.
type intercomTools struct {
	ops intercom.Ops
	// markShownRead: intercom_pending marks what it shows read (a fleet
	// worker's turn: its wake loop starts turns only for unread messages).
	markShownRead bool
}

// result is a text-first tool result whose structuredContent carries the
// same facts (docs/architecture.md "MCP tool results").
func result(text string, structured any, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: structured, IsError: isError}
}

// failure turns an operation error into an isError result that says what
// to do next.
func failure(err error) *mcp.CallToolResult {
	msg := err.Error()
	switch {
	case errors.Is(err, context.Canceled): // notifications/cancelled; the SDK still answers
		msg = "Cancelled by the client before the call finished: a message it was sending may or may not arrive (intercom_status shows what waits in the outbox), and an ask it waited on was withdrawn."
	case errors.Is(err, intercom.ErrBrokerUnavailable), errors.Is(err, intercom.ErrNotConnected):
		msg += " — the intercom broker is not reachable; retry shortly (agent-fleet restarts it on demand)."
	case errors.Is(err, teams.ErrBossDenied):
		// Its text says what to do; team-only mode has no intercom_list.
	case errors.Is(err, intercom.ErrTargetNotFound):
		msg += " — check the target with intercom_list."
	case errors.Is(err, teams.ErrTeamChoice):
		msg += " — call again with team set to one of those teams."
	case errors.Is(err, intercom.ErrAmbiguousTarget):
		msg += " — use the full session id from intercom_list."
	case errors.Is(err, intercom.ErrOutcomeUnknown):
		msg += " — check intercom_status; do not resend the same content."
	}
	return result(toolHints(msg), output.Failure(err), true)
}

// withFooter appends the waiting-mail line to a result (every tool but
// intercom_pending says how many unread messages and asks wait).
func (t *intercomTools) withFooter(ctx context.Context, r *mcp.CallToolResult) *mcp.CallToolResult {
	p, err := t.ops.Pending(ctx, intercom.PendingRequest{})
	if err != nil {
		return r
	}
	if f := output.Footer(p); f != "" {
		if tc, ok := r.Content[0].(*mcp.TextContent); ok {
			tc.Text += "\n\n" + f
		}
	}
	return r
}

func (t *intercomTools) whoami(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	w, err := t.ops.Whoami(ctx)
	if err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, result(output.WhoamiText(w),
		map[string]any{"session_id": w.SessionID, "name": w.Name, "cwd": w.Cwd, "model": w.Model}, false)), nil, nil
}

func (t *intercomTools) status(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	st, err := t.ops.Status(ctx)
	if err != nil {
		return failure(err), nil, nil
	}
	text, structured := output.StatusTool(st)
	return result(text, structured, false), nil, nil
}

func (t *intercomTools) list(ctx context.Context, _ *mcp.CallToolRequest, a listArgs) (*mcp.CallToolResult, any, error) {
	res, err := t.ops.List(ctx, intercom.ListRequest{Where: a.Scope, IncludeSelf: a.IncludeSelf})
	if err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, result(output.SessionsText(res, a.Scope, output.Tool), map[string]any{"sessions": res.Sessions}, false)), nil, nil
}

func (t *intercomTools) setSummary(ctx context.Context, _ *mcp.CallToolRequest, a summaryArgs) (*mcp.CallToolResult, any, error) {
	if err := t.ops.SetSummary(ctx, a.Summary); err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, result("Summary updated.", map[string]any{"ok": true, "summary": a.Summary}, false)), nil, nil
}

func sendOutcome(res *intercom.SendResult, to string) *mcp.CallToolResult {
	return result(output.SendTool(res, to))
}

// emptyMessage is the isError result for a message without text (nil when
// it has some): nothing is sent.
func emptyMessage(text, tool string) *mcp.CallToolResult {
	err := intercom.CheckText(text)
	if err == nil {
		return nil
	}
	return result(fmt.Sprintf("Nothing sent: %s. Call %s again with the text to send in message.", intercom.TextProblem(text), tool), output.Failure(err), true)
}

func (t *intercomTools) send(ctx context.Context, _ *mcp.CallToolRequest, a sendArgs) (*mcp.CallToolResult, any, error) {
	if r := emptyMessage(a.Message, "intercom_send"); r != nil {
		return r, nil, nil
	}
	res, err := t.ops.Send(ctx, intercom.SendRequest{To: a.To, Text: a.Message, Attachments: a.Attachments, Team: a.Team})
	if err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, sendOutcome(res, a.To)), nil, nil
}

func (t *intercomTools) ask(ctx context.Context, _ *mcp.CallToolRequest, a sendArgs) (*mcp.CallToolResult, any, error) {
	if r := emptyMessage(a.Message, "intercom_ask"); r != nil {
		return r, nil, nil
	}
	wait := intercom.AskTimeout
	if a.TimeoutMs > 0 {
		wait = time.Duration(a.TimeoutMs) * time.Millisecond
	}
	res, err := t.ops.Ask(ctx, intercom.AskRequest{To: a.To, Text: a.Message, Attachments: a.Attachments, Wait: wait, OnTimeout: intercom.DeferOnTimeout, Team: a.Team})
	if err != nil {
		return failure(err), nil, nil
	}
	if !res.OK {
		return t.withFooter(ctx, sendOutcome(&res.SendResult, a.To)), nil, nil
	}
	if res.Replied {
		text, structured := output.AskRepliedTool(res, a.To)
		return t.withFooter(ctx, result(text, structured, false)), nil, nil
	}
	text, structured := output.AskPendingTool(res, a.To, wait)
	return t.withFooter(ctx, result(text, structured, false)), nil, nil
}

func (t *intercomTools) pending(ctx context.Context, _ *mcp.CallToolRequest, a pendingArgs) (*mcp.CallToolResult, any, error) {
	res, err := t.ops.Pending(ctx, intercom.PendingRequest{MarkRead: a.MarkRead || t.markShownRead, AskID: a.AskID})
	if err != nil {
		return failure(err), nil, nil
	}
	text, structured := output.PendingTool(res, a.AskID)
	return result(text, structured, false), nil, nil
}

func (t *intercomTools) reply(ctx context.Context, _ *mcp.CallToolRequest, a replyArgs) (*mcp.CallToolResult, any, error) {
	if r := emptyMessage(a.Message, "intercom_reply"); r != nil {
		return r, nil, nil
	}
	res, err := t.ops.Reply(ctx, intercom.ReplyRequest{Text: a.Message, To: a.To, Which: a.Which, AskID: a.AskID,
		ContextID: a.ContextID, Team: a.Team, Attachments: a.Attachments})
	if err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, sendOutcome(res, res.To)), nil, nil
}
