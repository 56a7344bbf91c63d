package output

import (
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/history"
)

// HistoryText is a session's history for people: one block per message,
// oldest first, with its receipts and local times.
func HistoryText(es []history.Entry, now time.Time) string {
	if len(es) == 0 {
		return "No messages in the history."
	}
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(historyHead(e, HumanWhen(time.UnixMilli(e.At), now)))
		b.WriteString(":\n" + messageIndent + Block(e.Text, messageIndent))
	}
	return b.String()
}

// HistoryTool is intercom_history's text (RFC 3339 times in UTC) and
// structuredContent.
func HistoryTool(es []history.Entry) (string, map[string]any) {
	if len(es) == 0 {
		return "No messages in your history match.", map[string]any{"entries": es}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d messages, oldest first:", len(es))
	for _, e := range es {
		b.WriteString("\n\n" + historyHead(e, toolTime(time.UnixMilli(e.At))) + ":\n" + e.Text)
	}
	return b.String(), map[string]any{"entries": es}
}

func historyHead(e history.Entry, when string) string {
	who := Inline(e.Peer)
	if e.PeerName != "" && e.PeerName != e.Peer {
		who = fmt.Sprintf("%s (%s)", Inline(e.PeerName), who)
	}
	head := fmt.Sprintf("[%s] ", when)
	if e.Direction == "sent" {
		head += "to " + who
	} else {
		head += "from " + who
	}
	if e.Kind != "message" {
		head += " · " + e.Kind
	}
	if e.Team != "" {
		head += " · team " + Inline(e.Team)
	}
	if r := e.Receipts(); len(r) > 0 {
		head += " · " + strings.Join(r, ", ")
	}
	if e.Failed != "" {
		head += " (" + Inline(e.Failed) + ")"
	}
	return head
}
