package output

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// The intercom verbs' JSON is the intercom package's own result types
// (intercom.ListResult, SendResult, …): the CLI prints them with --json.
// The MCP intercom tools keep the key sets of the TypeScript adapters'
// tools (docs/protocol.md §8.3), built here.

// SenderLabel names a sender for people: "Name (id)", or the id (both
// escaped: Inline).
func SenderLabel(f intercom.Sender) string {
	if f.Name != "" && f.Name != f.ID {
		return fmt.Sprintf("%s (%s)", Inline(f.Name), Inline(f.ID))
	}
	return Inline(f.ID)
}

// DisplayName names a sender for a model: its name, else its id (escaped:
// Inline).
func DisplayName(s intercom.Sender) string {
	if s.Name != "" {
		return Inline(s.Name)
	}
	return Inline(s.ID)
}

// SessionLine is one session of a list, after the adapters' line:
// "- <name> (<id>) - <cwd> (<model>) [self, same cwd, <status>]". The id
// is shown in full, as whoami prints it and as a target takes it, and
// only when it differs from the name ("- <id> - …" otherwise): the
// adapters' first 8 characters of a UUID would turn operator-root into
// "operator", a prefix of every operator. Every field is escaped (Inline).
func SessionLine(v intercom.SessionView) string {
	who := Inline(v.ID)
	if v.Name != "" && v.Name != v.ID {
		who = fmt.Sprintf("%s (%s)", Inline(v.Name), Inline(v.ID))
	}
	var tags []string
	if v.Self {
		tags = append(tags, "self")
	}
	if v.SameCwd {
		tags = append(tags, "same cwd")
	}
	if v.Status != "" {
		tags = append(tags, Inline(v.Status))
	}
	line := fmt.Sprintf("- %s - %s (%s)", who, Inline(v.Cwd), Inline(v.Model))
	if len(tags) > 0 {
		line += " [" + strings.Join(tags, ", ") + "]"
	}
	return line
}

// SessionsText lists sessions: for a model one SessionLine each, the
// adapters' intercom_list text; for people a table with a status column
// (sessionsTable). When --where (where:
// directory or repo) left every session out, the CLI says how many others
// are connected; intercom_list (Tool) keeps the adapters' text, whose
// structuredContent has no room for the count (docs/protocol.md §8.3).
func SessionsText(res *intercom.ListResult, where string, s Surface) string {
	return HostSessionsText(res, where, s, "")
}

// HostSessionsText is SessionsText on a host joined to others: the table
// for people gains a HOST column, each session's remoteHostId or, for
// this host's own, localHost ("local" when ""). Without localHost the
// column shows only when a session of another host is listed.
func HostSessionsText(res *intercom.ListResult, where string, s Surface, localHost string) string {
	if len(res.Sessions) == 0 && res.Others > 0 && s == CLI {
		return fmt.Sprintf("No sessions match --where %s (%s connected).", where, plural(res.Others, "other"))
	}
	switch {
	case len(res.Sessions) > 0:
	case s == CLI:
		// Sessions of other scopes (a team's, say) are not listed, and
		// not counted either (spec §4.2).
		return "No other session is connected in this session's scope."
	default:
		return "No intercom sessions connected." // the adapters' intercom_list text
	}
	if s == CLI {
		return sessionsTable(res.Sessions, localHost)
	}
	lines := make([]string, len(res.Sessions))
	for i, v := range res.Sessions {
		lines[i] = SessionLine(v)
	}
	return strings.Join(lines, "\n")
}

// sessionsTable is list for people: a row per session (after its host,
// when hosts are joined: HostSessionsText) with its presence
// status ("-" for none) — a worker's state (idle, working · turn N,
// needs-input, failed: …, paused: …), or whatever a session published —
// and the cwd, marked when it is this session or shares its directory.
// Every field is escaped (Inline).
func sessionsTable(vs []intercom.SessionView, localHost string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	hosts := localHost != ""
	for _, v := range vs {
		hosts = hosts || v.RemoteHostID != ""
	}
	if localHost == "" {
		localHost = "local"
	}
	if hosts {
		fmt.Fprint(tw, "HOST\t")
	}
	fmt.Fprintln(tw, "SESSION\tMODEL\tSTATUS\tCWD")
	for _, v := range vs {
		if hosts {
			host := v.RemoteHostID
			if host == "" {
				host = localHost
			}
			fmt.Fprint(tw, Inline(host)+"\t")
		}
		who := Inline(v.ID)
		if v.Name != "" && v.Name != v.ID {
			who = fmt.Sprintf("%s (%s)", Inline(v.Name), Inline(v.ID))
		}
		status := Inline(v.Status)
		if status == "" {
			status = "-"
		}
		var tags []string
		if v.Self {
			tags = append(tags, "self")
		}
		if v.SameCwd {
			tags = append(tags, "same cwd")
		}
		cwd := Inline(v.Cwd)
		if len(tags) > 0 {
			cwd += " (" + strings.Join(tags, ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", who, Inline(v.Model), status, cwd)
	}
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// WhoamiText is a session's identity, on both surfaces.
func WhoamiText(w *intercom.WhoamiResult) string {
	return fmt.Sprintf("session_id: %s\nname: %s\ncwd: %s", Inline(w.SessionID), Inline(w.Name), Inline(w.Cwd))
}

var yesNo = map[bool]string{true: "Yes", false: "No"}

// SessionStatusText is a session's connection and queues for people; held says
// whether a session holder runs for it.
func SessionStatusText(res *intercom.StatusResult, held bool) string {
	return fmt.Sprintf("Connected: %s\nSession ID: %s\nHeld by a session holder: %s\nActive sessions: %d\nUnread messages: %d\nQueued outbound messages: %d\nPending asks: %d\nTeams: %s",
		yesNo[res.Connected], Inline(res.SessionID), yesNo[held], res.ActiveSessions, res.Unread, res.Outbox, res.PendingAsks, MembershipsText(res.Teams)) +
		routingLine(res.Routing) + deferredLines(res.Deferred, time.Now(), false)
}

// routingLine is "\n" and the routing line, or "" when not asked.
func routingLine(r *intercom.Routing) string {
	if r == nil {
		return ""
	}
	return "\n" + Inline(r.Line)
}

// MembershipsText lists a session's named teams on one line:
// "billing (manager, current), ops (member)", or "none".
func MembershipsText(list []intercom.TeamMembership) string {
	if len(list) == 0 {
		return "none"
	}
	parts := make([]string, len(list))
	for i, m := range list {
		tag := m.Role
		if m.Current {
			tag += ", current"
		}
		parts[i] = fmt.Sprintf("%s (%s)", Inline(m.Name), tag)
	}
	return strings.Join(parts, ", ")
}

// teamTag is " [Team: NAME]" for a message in a team, else "".
func teamTag(team string) string {
	if team == "" {
		return ""
	}
	return " [Team: " + Inline(team) + "]"
}

// StatusTool is intercom_status's text and structuredContent.
func StatusTool(st *intercom.StatusResult) (string, map[string]any) {
	text := fmt.Sprintf("Connected: %s\nSession ID: %s\nActive sessions: %d\nUnread messages: %d\nPending asks: %d",
		yesNo[st.Connected], Inline(st.SessionID), st.ActiveSessions, st.Unread, st.PendingAsks) +
		deferredLines(st.Deferred, time.Now(), true)
	structured := map[string]any{"connected": st.Connected, "session_id": st.SessionID, "active_sessions": st.ActiveSessions,
		"unread_messages": st.Unread, "pending_asks": st.PendingAsks, "queued_outbound": st.Outbox}
	if len(st.Teams) > 0 {
		text += "\nTeams: " + MembershipsText(st.Teams)
		structured["teams"] = st.Teams
	}
	if len(st.Deferred) > 0 {
		structured["deferred"] = st.Deferred
	}
	return text, structured
}

// TeamSendText is the outcome of a send to a team (team:NAME, *): one line
// per recipient, then the members that were not connected.
func TeamSendText(res *intercom.SendResult) string {
	n := 0
	for _, r := range res.Recipients {
		if r.OK {
			n++
		}
	}
	lines := []string{fmt.Sprintf("Message to %s: delivered to %d of %d.", Inline(res.To), n, len(res.Recipients))}
	for _, r := range res.Recipients {
		if r.OK {
			lines = append(lines, fmt.Sprintf("- %s: delivered (message %s)", Inline(r.To), Inline(r.MessageID)))
			continue
		}
		reason := r.Reason
		if r.Code != "" {
			reason = r.Code + ": " + reason
		}
		lines = append(lines, fmt.Sprintf("- %s: not delivered: %s", Inline(r.To), Inline(reason)))
	}
	if len(res.Offline) > 0 {
		off := make([]string, len(res.Offline))
		for i, id := range res.Offline {
			off[i] = Inline(id)
		}
		lines = append(lines, "Not connected, so not sent: "+strings.Join(off, ", "))
	}
	return strings.Join(lines, "\n")
}

// Footer is the line every intercom tool but intercom_pending appends when
// messages or asks wait (docs/protocol.md §8.3); "" when none do. An ask is
// counted once, with the asks: marking it read does not answer it.
func Footer(res *intercom.PendingResult) string {
	asks := len(res.Asks)
	messages := len(res.Unread) - unreadOpenAsks(res)
	switch {
	case messages == 0 && asks == 0:
		return ""
	case asks == 0:
		return fmt.Sprintf("[%s waiting — call intercom_pending with mark_read: true]", plural(messages, "unread message"))
	case messages == 0:
		return fmt.Sprintf("[%s waiting — call intercom_pending to read, then intercom_reply with its askId]", plural(asks, "pending ask"))
	}
	return fmt.Sprintf("[%s and %s waiting — call intercom_pending with mark_read: true, then intercom_reply with an askId]",
		plural(messages, "unread message"), plural(asks, "pending ask"))
}

// unreadOpenAsks counts the unread messages that are asks still pending.
func unreadOpenAsks(res *intercom.PendingResult) int {
	open := map[string]bool{}
	for _, a := range res.Asks {
		open[a.AskID] = true
	}
	n := 0
	for _, m := range res.Unread {
		if m.ExpectsReply && open[m.AskID] {
			n++
		}
	}
	return n
}

// WaitText says how long an ask waited: "200 ms", "1 second", "45 seconds".
func WaitText(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	if d%time.Second != 0 && d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " seconds" // 1.5 s, not rounded to 2
	}
	return plural(int(d.Round(time.Second)/time.Second), "second")
}

// SendTool is intercom_send's (and intercom_reply's, and a failed
// intercom_ask's) text and structuredContent; failed is the tool's
// isError.
func SendTool(res *intercom.SendResult, to string) (text string, structured map[string]any, failed bool) {
	if res.Recipients != nil {
		structured := map[string]any{"ok": res.OK, "to": to, "recipients": recipientsTool(res.Recipients)}
		if res.Team != "" {
			structured["team"] = res.Team
		}
		if len(res.Offline) > 0 {
			structured["offline"] = res.Offline
		}
		return TeamSendText(res), structured, !res.OK
	}
	if !res.OK {
		reason := res.Reason
		if reason == "" {
			reason = "Session may not exist or has disconnected."
		}
		structured := map[string]any{"ok": false, "message_id": res.MessageID, "code": res.Code, "reason": reason}
		switch {
		case res.Code == string(wire.FailRecipientDisconnected) && res.Accepted:
			structured["outcome_unknown"] = true
			return fmt.Sprintf("Message to %q was not acknowledged (%s): %s. It was handed on before the recipient went away (or its host stopped answering), so it may have been read: do not send it again blindly; intercom_history shows what became of it.",
				to, res.Code, reason), structured, true
		case res.OutcomeUnknown():
			// The recipient has it (a paused worker reads it once resumed):
			// "not delivered" would have the agent send it twice.
			structured["outcome_unknown"] = true
			return fmt.Sprintf("Message to %q was not acknowledged in time (%s): %s. The recipient has it and may still read it (a paused worker does once resumed): do not send it again; intercom_history shows what became of it.",
				to, res.Code, reason), structured, true
		case res.Code == string(wire.FailSessionNotFound):
			return fmt.Sprintf("Message to %q was not delivered: %s — check the target with intercom_list.", to, reason), structured, true
		}
		return fmt.Sprintf("Message to %q was not delivered: %s", to, reason), structured, true
	}
	if res.State == intercom.DeferredQueued {
		text, structured := KeptTool(res, to)
		return text, structured, false
	}
	return fmt.Sprintf("Message sent to %s.", Inline(strings.TrimSpace(to))), map[string]any{"ok": true, "message_id": res.MessageID, "to": to}, false
}

// recipientsTool is each outcome of a team send with the keys of a single
// send's result (message_id, not the CLI's messageId), optional ones
// omitted.
func recipientsTool(rs []intercom.SendResult) []map[string]any {
	out := make([]map[string]any, len(rs))
	for i, r := range rs {
		e := map[string]any{"ok": r.OK, "to": r.To}
		if r.MessageID != "" {
			e["message_id"] = r.MessageID
		}
		if r.Team != "" {
			e["team"] = r.Team
		}
		if !r.OK {
			e["code"], e["reason"] = r.Code, r.Reason
			if r.OutcomeUnknown() {
				e["outcome_unknown"] = true
			}
		}
		out[i] = e
	}
	return out
}

// AskRepliedTool is intercom_ask's answer when the reply came in time.
func AskRepliedTool(res *intercom.AskResult, to string) (string, map[string]any) {
	return fmt.Sprintf("Reply from %s:\n%s", Inline(to), Block(res.Reply.Text+AttachmentsTool(res.Reply.Attachments), "")),
		map[string]any{"ok": true, "message_id": res.MessageID, "reply": res.Reply}
}

// AskPendingTool is intercom_ask's answer when the wait ran out: the ask
// stays open and its reply will be listed by intercom_pending, or printed
// by the session's consuming listen.
func AskPendingTool(res *intercom.AskResult, to string, wait time.Duration) (string, map[string]any) {
	where := "its reply will appear in intercom_pending marked as its reply (nothing to resend)"
	if res.ListenerPID != 0 {
		where = LateReplyWhere(res.ListenerPID) + " (nothing to resend)"
	}
	return fmt.Sprintf("No reply from %q within %s. The ask (message %s) stays open: %s.", to, WaitText(wait), res.MessageID, where),
		map[string]any{"ok": true, "message_id": res.MessageID, "pending": true}
}

// LateReplyWhere says where the late reply to an ask left open will be:
// printed by the session's consuming listen (listener, its pid), which
// takes it out of pending, else in pending.
func LateReplyWhere(listener int) string {
	if listener != 0 {
		return fmt.Sprintf("its reply will be printed by the listen consuming this session's messages (pid %d), not kept in pending", listener)
	}
	return "the reply will appear in `agent-fleet intercom pending`"
}

// AttachmentsTool renders attachments for a model, after the text.
func AttachmentsTool(att []wire.Attachment) string {
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

// AttachmentsText renders attachments for people, each after a "---" line
// ("" without any), every line after the first starting with indent
// (Block).
func AttachmentsText(att []wire.Attachment, indent string) string {
	var b strings.Builder
	for _, a := range att {
		fmt.Fprintf(&b, "\n%s---\n%sAttachment: %s\n%s%s", indent, indent, Inline(a.Name), indent, Block(a.Content, indent))
	}
	return b.String()
}

// messageIndent starts each line of a message's text in listen's output,
// so that no line of a text can pass for the header of another message.
const messageIndent = "  "

// MessageText is one inbound message as listen prints it: a header with
// the time and sender (and how to answer an ask), then the text, each of
// its lines indented, control characters escaped (Block).
func MessageText(m *intercom.MessageView) string {
	at := HumanTime(time.UnixMilli(int64(m.ReceivedAt)))
	head := fmt.Sprintf("[%s] %s%s", at, SenderLabel(m.From), teamTag(m.Team))
	switch {
	case m.ExpectsReply:
		head += fmt.Sprintf(" asks (reply with: agent-fleet intercom reply --ask-id %s …)", Inline(m.AskID))
	case m.ReplyTo != "":
		head += " replied"
	}
	return head + ":\n" + messageIndent + Block(m.Text, messageIndent) + AttachmentsText(m.Attachments, messageIndent)
}

// ReplyText is a reply a one-shot ask received, for people: the reply is
// all the command prints, so its lines keep their place (Block).
func ReplyText(m *intercom.MessageView) string {
	return fmt.Sprintf("Reply from %s:\n%s", SenderLabel(m.From), Block(m.Text, "")) + AttachmentsText(m.Attachments, "")
}

// AskLine is one pending ask, as the Pi adapter lists them:
// "- <askId> · <sender>[ · oldest|latest|queued] · <N>s ago[ · async] · <preview>".
func AskLine(a intercom.AskView) string {
	line := fmt.Sprintf("- %s · %s%s", Inline(a.AskID), DisplayName(a.From), teamTag(a.Team))
	if a.Selector != "" {
		line += " · " + a.Selector
	}
	line += fmt.Sprintf(" · %ds ago", a.ElapsedSeconds)
	if a.DeferredAt != 0 {
		line += " · async"
	}
	return line + " · " + Inline(a.Preview)
}

// PendingText is pending's answer for people: unread messages, then the
// asks waiting for a reply; full shows the one ask asked for in full.
func PendingText(res *intercom.PendingResult, full bool) string {
	if full && len(res.Asks) == 1 {
		a := res.Asks[0]
		return fmt.Sprintf("Pending ask %s\nFrom: %s\n\n%s", Inline(a.AskID), SenderLabel(a.From), Block(a.Text, "")) + AttachmentsText(a.Attachments, "")
	}
	if len(res.Unread) == 0 && len(res.Asks) == 0 {
		return "No unread messages and no pending asks."
	}
	var lines []string
	for _, m := range res.Unread {
		if m.ExpectsReply {
			continue // listed with the asks
		}
		lines = append(lines, fmt.Sprintf("- %s%s: %s", SenderLabel(m.From), teamTag(m.Team), Block(m.Text, "  ")))
	}
	if len(res.Asks) > 0 {
		lines = append(lines, "Pending asks:")
		for _, a := range res.Asks {
			lines = append(lines, AskLine(a))
		}
	}
	return strings.Join(lines, "\n")
}

func orLocal(origin string) string {
	if origin == "" {
		return "local"
	}
	return origin
}

func pendingEntry(m intercom.MessageView) map[string]any {
	e := map[string]any{
		"from":          map[string]any{"id": m.From.ID, "name": m.From.Name, "origin": orLocal(m.From.Origin)},
		"received_at":   int64(m.ReceivedAt),
		"read":          m.Read,
		"text":          m.Text,
		"attachments":   m.Attachments,
		"expects_reply": m.ExpectsReply,
		"contextId":     m.ContextID,
	}
	if m.Team != "" {
		e["team"] = m.Team
	}
	if m.AskID != "" {
		e["askId"] = m.AskID
	}
	if m.ReplyTo != "" {
		e["reply_to"] = m.ReplyTo // the message id of the ask it answers
	}
	return e
}

// askEntry is a pending ask as intercom_pending's structuredContent has it:
// the keys of the adapters' pending_asks entries (selector only when the
// sender has several), plus askId, contextId, deferred and team; text is
// the preview in a list, the whole text when one ask is asked for.
func askEntry(ask intercom.AskView, text string) map[string]any {
	entry := map[string]any{"from": map[string]any{"id": ask.From.ID, "name": ask.From.Name, "origin": orLocal(ask.From.Origin)},
		"received_at": int64(ask.ReceivedAt), "read": false, "text": text, "expects_reply": true,
		"askId": ask.AskID, "contextId": ask.ContextID, "deferred": ask.DeferredAt != 0}
	if ask.Selector != "" {
		entry["selector"] = ask.Selector
	}
	if ask.Team != "" {
		entry["team"] = ask.Team
	}
	return entry
}

// PendingTool is intercom_pending's text and structuredContent; askID asks
// for one pending ask in full.
func PendingTool(res *intercom.PendingResult, askID string) (string, map[string]any) {
	if askID != "" && len(res.Asks) == 1 {
		ask := res.Asks[0]
		text := fmt.Sprintf("Pending ask %s\nFrom: %s\n\n%s", ask.AskID, DisplayName(ask.From), Block(ask.Text+AttachmentsTool(ask.Attachments), ""))
		entry := askEntry(ask, ask.Text)
		if len(ask.Attachments) > 0 {
			entry["attachments"] = ask.Attachments
		}
		return text, map[string]any{"ask": entry}
	}
	// The unread list holds every message; asks are listed once, with their
	// ask ids, under "Pending asks".
	open := map[string]bool{}
	for _, ask := range res.Asks {
		open[ask.AskID] = true
	}
	unread := []map[string]any{}
	var lines []string
	for _, m := range res.Unread {
		unread = append(unread, pendingEntry(m))
		switch {
		case m.ExpectsReply && open[m.AskID]:
			// Listed under "Pending asks".
		case m.ExpectsReply:
			lines = append(lines, fmt.Sprintf("- %s: %s (an ask no longer open: withdrawn or expired)", DisplayName(m.From), entryText(m.Text, m.Attachments)))
		case m.ReplyTo != "":
			lines = append(lines, fmt.Sprintf("- %s%s (reply to your message %s): %s", DisplayName(m.From), teamTag(m.Team), Inline(m.ReplyTo), entryText(m.Text, m.Attachments)))
		default:
			lines = append(lines, fmt.Sprintf("- %s%s [contextId: %s]: %s", DisplayName(m.From), teamTag(m.Team), Inline(m.ContextID), entryText(m.Text, m.Attachments)))
		}
	}
	text := "No unread messages."
	if len(res.Unread) > 0 {
		text = "No unread messages besides the asks below."
	}
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
			al = append(al, fmt.Sprintf("- %s%s%s: %s [askId: %s]%s", DisplayName(ask.From), teamTag(ask.Team), Inline(sel), Block(ask.Preview, "  "), Inline(ask.AskID), async))
			asks = append(asks, askEntry(ask, ask.Preview))
		}
		text += "\n\nPending asks:\n" + strings.Join(al, "\n")
	}
	return text, map[string]any{"unread_messages": unread, "pending_asks": asks}
}

// entryText is a message's text and attachments as one entry of a list
// for a model: control characters escaped and every line after the first
// indented under its sender, so that no line of a peer's message can pass
// for an entry of the list (README "Messages").
func entryText(text string, att []wire.Attachment) string {
	return Block(text+AttachmentsTool(att), "  ")
}

// ListeningText is the line `intercom listen` writes to stderr once it
// runs: as whom, where, and how to stop; through says another process
// holds the session and listen streams from it.
func ListeningText(id, name, broker string, through bool) string {
	who := Inline(id)
	if name != "" && name != id {
		who = fmt.Sprintf("%s (session %s)", Inline(name), Inline(id))
	}
	how := "on " + Inline(broker)
	if through {
		how = "through the process that holds it, on " + Inline(broker)
	}
	return fmt.Sprintf("Listening as %s %s; Ctrl-C to stop.", who, how)
}

// ListeningAgainText is listen's stderr line after the process it listened
// through went away and it took the session over.
func ListeningAgainText(id string) string {
	return fmt.Sprintf("The process that held %s went away; listen took the session over and goes on.", Inline(id))
}

// NoReply is the error of a one-shot ask whose wait ran out (timeout):
// cancelled, or — when the broker did not confirm the cancel — perhaps
// still open at the recipient.
func NoReply(res *intercom.AskResult, wait time.Duration, timeout error) error {
	if res.Cancelled {
		return fmt.Errorf("no reply from %q within %s; the ask was cancelled: %w", res.To, wait, timeout)
	}
	return fmt.Errorf("no reply from %q within %s; the ask could not be withdrawn, so %s may still see it: %w", res.To, wait, res.To, timeout)
}

// NotDelivered is how a failed send's error line says it failed: a send
// to a team reached some of its recipients.
func NotDelivered(res *intercom.SendResult) string {
	if res.Recipients != nil {
		return "was not delivered to every recipient"
	}
	return "was not delivered"
}

// DeliveryFailed is the error of a send or ask (what: `message to "x"`)
// the broker reported failed: what, then failed, then the
// *intercom.DeliveryError. An unacknowledged one (DELIVERY_TIMEOUT) is
// not said to have failed: the recipient has it and may still read it
// (intercom.ErrOutcomeUnknown, exit 8).
func DeliveryFailed(what, failed, code, reason string, accepted bool) error {
	err := &intercom.DeliveryError{Code: code, Reason: reason, Accepted: accepted}
	switch {
	case code == intercom.CodeOutcomeUnknown:
		return fmt.Errorf("%s may or may not have reached them: %w; it stays in the outbox and is sent again when the session registers again: do not resend it yourself", what, err)
	case errors.Is(err, intercom.ErrOutcomeUnknown) && code == string(wire.FailRecipientDisconnected):
		return fmt.Errorf("%s was not acknowledged: %w; the recipient went away after it was handed on (or its host stopped answering) and may have read it; it stays in the outbox and is sent again when the recipient is back (a second copy is dropped): do not resend it yourself", what, err)
	case errors.Is(err, intercom.ErrOutcomeUnknown):
		return fmt.Errorf("%s was not acknowledged: %w; the recipient has it and may still read it (a paused worker does once resumed): do not resend it blindly", what, err)
	}
	return fmt.Errorf("%s %s: %w", what, failed, err)
}
