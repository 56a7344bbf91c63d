package output

import (
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// SentText is a send's (or reply's) line for people: what it did, to whom.
func SentText(res *intercom.SendResult, what string) string {
	if res.State == intercom.DeferredQueued {
		return KeptText(res)
	}
	return fmt.Sprintf("%s %s.", what, Inline(res.To))
}

// KeptText is a send's line for a message kept for a worker that was not
// connected yet (docs/architecture.md "Deferred delivery").
func KeptText(res *intercom.SendResult) string {
	return fmt.Sprintf("Message kept for worker %s, which is not connected yet: it gets it as soon as it connects (state %s; see agent-fleet intercom status).",
		Inline(res.TargetID), res.State)
}

// KeptTool is intercom_send's text and structuredContent for a kept message.
func KeptTool(res *intercom.SendResult, to string) (string, map[string]any) {
	return fmt.Sprintf("Worker %s is not connected yet (starting or reconnecting): the message is kept and given to it as soon as it connects. intercom_status shows when it was delivered.", Inline(strings.TrimSpace(to))),
		map[string]any{"ok": true, "message_id": res.MessageID, "to": to, "state": res.State}
}

// deferredLines lists kept messages for people (local times) or a model
// (RFC 3339 in UTC): one line each, newest last.
func deferredLines(ds []intercom.DeferredMessage, now time.Time, forModel bool) string {
	if len(ds) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nMessages kept for workers that were not connected: %d", len(ds))
	for _, d := range ds {
		at := time.UnixMilli(int64(d.QueuedAt))
		when := HumanWhen(at, now)
		if forModel {
			when = toolTime(at)
		}
		fmt.Fprintf(&b, "\n  %s  to %s  %s  %q", d.State, Inline(d.To), when, Inline(d.Preview))
	}
	return b.String()
}
