package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
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
	Attachments []wire.Attachment `json:"attachments,omitempty"`
}

func boolPtr(b bool) *bool { return &b }

// newMCPServer builds the MCP server of the intercom tools over ops.
func newMCPServer(ops intercom.Ops, log *slog.Logger) *mcp.Server {
	return newMCPServerWith(ops, log, false)
}

// newMCPServerWith is newMCPServer; with markShownRead, intercom_pending
// marks the messages it shows read (a fleet worker's turn: its wake loop
// starts turns only for messages nobody has read).
func newMCPServerWith(ops intercom.Ops, log *slog.Logger, markShownRead bool) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "agent-fleet", Title: "agent-fleet intercom", Version: buildVersion()},
		&mcp.ServerOptions{Instructions: mcpInstructions, Logger: log, Capabilities: &mcp.ServerCapabilities{}})
	t := &mcpTools{ops: ops, markShownRead: markShownRead}

	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)}
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_whoami", InputSchema: emptySchema, Annotations: readOnly,
		Description: "Return this session's intercom identity (full session id, name, cwd) for reliable targeting."}, t.whoami)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_status", InputSchema: emptySchema, Annotations: readOnly,
		Description: "Show intercom connection status, active sessions, unread messages, and pending asks."}, t.status)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_list", Annotations: readOnly,
		Description: "List intercom-connected agent sessions on this machine.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"scope":        map[string]any{"type": "string", "enum": []any{"machine", "directory", "repo"}, "description": "machine (default), directory or repo"},
			"include_self": map[string]any{"type": "boolean", "description": "include this session (default false)"},
		}}}, t.list)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_set_summary",
		Description: "Publish a short status summary so other sessions can discover what this session is doing.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"summary"},
			"properties": map[string]any{"summary": map[string]any{"type": "string", "maxLength": 400}}}}, t.setSummary)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_send",
		Description: "Send a non-blocking direct message to another intercom session by name, full ID, or unique ID prefix.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"to", "message"},
			"properties": map[string]any{"to": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"},
				"attachments": attachmentsSchema}}}, t.send)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_ask",
		Description: "Ask another intercom session a question only when the next step depends on its reply. Use intercom_send for assignments, progress/status checkpoints, and notifications.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"to", "message"},
			"properties": map[string]any{"to": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"},
				"attachments": attachmentsSchema,
				"timeout_ms": map[string]any{"type": "integer", "minimum": 1, "maximum": 120000,
					"description": "How long to wait for the reply (default 45000). If it runs out the ask stays open and its reply appears in intercom_pending."}}}}, t.ask)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_pending",
		Description: "Read unread inbound messages and unresolved asks for this session; pass askId to read one ask in full.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"mark_read": map[string]any{"type": "boolean", "description": "mark the returned messages read (default false)"},
			"askId":     map[string]any{"type": "string", "description": "Show this pending ask in full."},
		}}}, t.pending)
	mcp.AddTool(server, &mcp.Tool{Name: "intercom_reply",
		Description: "Reply to a pending inbound ask. Choose it with askId, or with to plus which=oldest/latest when one sender has several unresolved asks.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"message"},
			"properties": map[string]any{
				"message":     map[string]any{"type": "string"},
				"to":          map[string]any{"type": "string", "description": "Optional sender/session selector; never a message or thread ID."},
				"which":       map[string]any{"type": "string", "enum": []any{"oldest", "latest"}, "description": "Select the oldest or latest ask from the chosen sender."},
				"askId":       map[string]any{"type": "string", "description": "The ask to answer, from intercom_pending."},
				"attachments": attachmentsSchema,
			}}}, t.reply)
	return server
}

type mcpTools struct {
	ops           intercom.Ops
	markShownRead bool
}

// result is a text-first tool result whose structuredContent carries the
// same facts (spec mcp-and-systemd §A.3, §B.2).
func result(text string, structured any, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: structured, IsError: isError}
}

// failure turns an operation error into an isError result that says what
// to do next.
func failure(err error) *mcp.CallToolResult {
	msg := err.Error()
	switch {
	case errors.Is(err, intercom.ErrBrokerUnavailable), errors.Is(err, intercom.ErrNotConnected):
		msg += " — the intercom broker is not reachable; retry shortly (agent-fleet restarts it on demand)."
	case errors.Is(err, intercom.ErrTargetNotFound):
		msg += " — check the target with intercom_list."
	case errors.Is(err, intercom.ErrAmbiguousTarget):
		msg += " — use the full session id from intercom_list."
	case errors.Is(err, intercom.ErrOutcomeUnknown):
		msg += " — check intercom_status; do not resend the same content."
	}
	return result(msg, map[string]any{"ok": false, "error": err.Error()}, true)
}

// withFooter appends the waiting-mail line to a result (spec: every tool
// but intercom_pending says how many unread messages and asks wait).
func (t *mcpTools) withFooter(ctx context.Context, r *mcp.CallToolResult) *mcp.CallToolResult {
	p, err := t.ops.Pending(ctx, intercom.PendingRequest{})
	if err != nil || (len(p.Unread) == 0 && len(p.Asks) == 0) {
		return r
	}
	if tc, ok := r.Content[0].(*mcp.TextContent); ok {
		tc.Text += fmt.Sprintf("\n\n[%s and %s waiting — call intercom_pending with mark_read: true]", plural(len(p.Unread), "unread message"), plural(len(p.Asks), "pending ask"))
	}
	return r
}

// waitText says how long an ask waited: "200 ms", "1 second", "45 seconds".
func waitText(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return plural(int(d.Round(time.Second)/time.Second), "second")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (t *mcpTools) whoami(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	w, err := t.ops.Whoami(ctx)
	if err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, result(fmt.Sprintf("session_id: %s\nname: %s\ncwd: %s", w.SessionID, w.Name, w.Cwd),
		map[string]any{"session_id": w.SessionID, "name": w.Name, "cwd": w.Cwd, "model": w.Model}, false)), nil, nil
}

func (t *mcpTools) status(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	st, err := t.ops.Status(ctx)
	if err != nil {
		return failure(err), nil, nil
	}
	yes := map[bool]string{true: "Yes", false: "No"}
	text := fmt.Sprintf("Connected: %s\nSession ID: %s\nActive sessions: %d\nUnread messages: %d\nPending asks: %d",
		yes[st.Connected], st.SessionID, st.ActiveSessions, st.Unread, st.PendingAsks)
	return result(text, map[string]any{"connected": st.Connected, "session_id": st.SessionID, "active_sessions": st.ActiveSessions,
		"unread_messages": st.Unread, "pending_asks": st.PendingAsks, "queued_outbound": st.Outbox}, false), nil, nil
}

func (t *mcpTools) list(ctx context.Context, _ *mcp.CallToolRequest, a listArgs) (*mcp.CallToolResult, any, error) {
	res, err := t.ops.List(ctx, intercom.ListRequest{Where: a.Scope, IncludeSelf: a.IncludeSelf})
	if err != nil {
		return failure(err), nil, nil
	}
	text := "No intercom sessions connected."
	if len(res.Sessions) > 0 {
		lines := make([]string, len(res.Sessions))
		for i, v := range res.Sessions {
			lines[i] = sessionLine(v)
		}
		text = strings.Join(lines, "\n")
	}
	return t.withFooter(ctx, result(text, map[string]any{"sessions": res.Sessions}, false)), nil, nil
}

func (t *mcpTools) setSummary(ctx context.Context, _ *mcp.CallToolRequest, a summaryArgs) (*mcp.CallToolResult, any, error) {
	if err := t.ops.SetSummary(ctx, a.Summary); err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, result("Summary updated.", map[string]any{"ok": true, "summary": a.Summary}, false)), nil, nil
}

func sendOutcome(res *intercom.SendResult, to string) *mcp.CallToolResult {
	if !res.OK {
		reason := res.Reason
		if reason == "" {
			reason = "Session may not exist or has disconnected."
		}
		return result(fmt.Sprintf("Message to %q was not delivered: %s", to, reason),
			map[string]any{"ok": false, "message_id": res.MessageID, "code": res.Code, "reason": reason}, true)
	}
	return result(fmt.Sprintf("Message sent to %s.", to), map[string]any{"ok": true, "message_id": res.MessageID, "to": to}, false)
}

func (t *mcpTools) send(ctx context.Context, _ *mcp.CallToolRequest, a sendArgs) (*mcp.CallToolResult, any, error) {
	res, err := t.ops.Send(ctx, intercom.SendRequest{To: a.To, Text: a.Message, Attachments: a.Attachments})
	if err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, sendOutcome(res, a.To)), nil, nil
}

func (t *mcpTools) ask(ctx context.Context, _ *mcp.CallToolRequest, a sendArgs) (*mcp.CallToolResult, any, error) {
	wait := intercom.MCPAskWait
	if a.TimeoutMs > 0 {
		wait = time.Duration(a.TimeoutMs) * time.Millisecond
	}
	res, err := t.ops.Ask(ctx, intercom.AskRequest{To: a.To, Text: a.Message, Attachments: a.Attachments, Wait: wait, OnTimeout: intercom.DeferOnTimeout})
	if err != nil {
		return failure(err), nil, nil
	}
	if !res.OK {
		return t.withFooter(ctx, sendOutcome(&res.SendResult, a.To)), nil, nil
	}
	if res.Replied {
		text := fmt.Sprintf("Reply from %s:\n%s%s", a.To, res.Reply.Text, formatAttachments(res.Reply.Attachments))
		return t.withFooter(ctx, result(text, map[string]any{"ok": true, "message_id": res.MessageID, "reply": res.Reply}, false)), nil, nil
	}
	text := fmt.Sprintf("No reply from %q within %s. The ask (message %s) stays open: its reply will appear in intercom_pending marked as its reply (nothing to resend).",
		a.To, waitText(wait), res.MessageID)
	return t.withFooter(ctx, result(text, map[string]any{"ok": true, "message_id": res.MessageID, "pending": true}, false)), nil, nil
}

func formatAttachments(att []wire.Attachment) string {
	var b strings.Builder
	for _, a := range att {
		if a.Language != "" {
			fmt.Fprintf(&b, "\n\n---\nAttachment: %s\n~~~%s\n%s\n~~~", a.Name, a.Language, a.Content)
		} else {
			fmt.Fprintf(&b, "\n\n---\nAttachment: %s\n%s", a.Name, a.Content)
		}
	}
	return b.String()
}

func pendingEntry(m intercom.MessageView, selector string) map[string]any {
	e := map[string]any{
		"from":          map[string]any{"id": m.From.ID, "name": m.From.Name, "origin": orLocal(m.From.Origin)},
		"received_at":   int64(m.ReceivedAt),
		"read":          m.Read,
		"text":          m.Text,
		"attachments":   m.Attachments,
		"expects_reply": m.ExpectsReply,
	}
	if selector != "" {
		e["selector"] = selector
	}
	if m.AskID != "" {
		e["askId"] = m.AskID
	}
	if m.ReplyTo != "" {
		e["reply_to"] = m.ReplyTo // the message id of the ask it answers
	}
	return e
}

func orLocal(origin string) string {
	if origin == "" {
		return "local"
	}
	return origin
}

func (t *mcpTools) pending(ctx context.Context, _ *mcp.CallToolRequest, a pendingArgs) (*mcp.CallToolResult, any, error) {
	res, err := t.ops.Pending(ctx, intercom.PendingRequest{MarkRead: a.MarkRead || t.markShownRead, AskID: a.AskID})
	if err != nil {
		return failure(err), nil, nil
	}
	if a.AskID != "" && len(res.Asks) == 1 {
		ask := res.Asks[0]
		text := fmt.Sprintf("Pending ask %s\nFrom: %s\n\n%s%s", ask.AskID, displayName(ask.From), ask.Text, formatAttachments(ask.Attachments))
		return result(text, map[string]any{"ask": ask}, false), nil, nil
	}
	// The unread list holds every message; asks are listed once, with their
	// ask ids, under "Pending asks".
	open := map[string]bool{}
	for _, ask := range res.Asks {
		open[ask.AskID] = true
	}
	var unread []map[string]any
	var lines []string
	for _, m := range res.Unread {
		unread = append(unread, pendingEntry(m, ""))
		switch {
		case m.ExpectsReply && open[m.AskID]:
			// Listed under "Pending asks".
		case m.ExpectsReply:
			lines = append(lines, fmt.Sprintf("- %s: %s%s (an ask no longer open: withdrawn or expired)", displayName(m.From), m.Text, formatAttachments(m.Attachments)))
		case m.ReplyTo != "":
			lines = append(lines, fmt.Sprintf("- %s (reply to your message %s): %s%s", displayName(m.From), m.ReplyTo, m.Text, formatAttachments(m.Attachments)))
		default:
			lines = append(lines, fmt.Sprintf("- %s: %s%s", displayName(m.From), m.Text, formatAttachments(m.Attachments)))
		}
	}
	text := "No unread messages."
	if len(lines) > 0 {
		text = strings.Join(lines, "\n")
	}
	asks := make([]map[string]any, 0, len(res.Asks))
	if len(res.Asks) > 0 {
		var al []string
		for _, ask := range res.Asks {
			sel := ""
			if ask.Selector != "" {
				sel = " [" + ask.Selector + "]"
			}
			async := ""
			if ask.DeferredAt != 0 {
				async = " (async: the asker stopped waiting; your reply still reaches it)"
			}
			al = append(al, fmt.Sprintf("- %s%s: %s [askId: %s]%s", displayName(ask.From), sel, ask.Preview, ask.AskID, async))
			asks = append(asks, map[string]any{"from": map[string]any{"id": ask.From.ID, "name": ask.From.Name, "origin": orLocal(ask.From.Origin)},
				"received_at": int64(ask.ReceivedAt), "read": false, "text": ask.Preview, "expects_reply": true,
				"selector": ask.Selector, "askId": ask.AskID, "deferred": ask.DeferredAt != 0})
		}
		text += "\n\nPending asks:\n" + strings.Join(al, "\n")
	}
	if unread == nil {
		unread = []map[string]any{}
	}
	return result(text, map[string]any{"unread_messages": unread, "pending_asks": asks}, false), nil, nil
}

func displayName(s intercom.Sender) string {
	if s.Name != "" {
		return s.Name
	}
	return s.ID
}

func (t *mcpTools) reply(ctx context.Context, _ *mcp.CallToolRequest, a replyArgs) (*mcp.CallToolResult, any, error) {
	res, err := t.ops.Reply(ctx, intercom.ReplyRequest{Text: a.Message, To: a.To, Which: a.Which, AskID: a.AskID, Attachments: a.Attachments})
	if err != nil {
		return failure(err), nil, nil
	}
	return t.withFooter(ctx, sendOutcome(res, res.To)), nil, nil
}

// nopCloser and nopWriteCloser keep the command's streams open after the
// MCP transport closes (tests share them).
type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
