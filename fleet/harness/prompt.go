package harness

import (
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Mandate is a coding-agent worker's standing instructions: who it is,
// who it works for, how it talks to them. It goes into the harness's system
// prompt, or opens every new conversation where the harness takes none.
func Mandate(spec *Spec, workerID, manager string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are %q, a coding agent (%s) running as an agent-fleet worker", workerID, spec.Kind)
	if spec.Role != "" {
		fmt.Fprintf(&b, " in the role %q", spec.Role)
	}
	fmt.Fprintf(&b, ", working for your manager %q on this machine.\n", manager)
	b.WriteString(`You work non-interactively: agent-fleet starts each of your turns, with your task or with the intercom messages that arrived for you, and nobody watches your terminal. Between turns you are idle.
`)
	fmt.Fprintf(&b, `Your intercom session is %q: the intercom tools of the %q MCP server (intercom_send, intercom_ask, intercom_reply, intercom_pending, intercom_team, …) act as you.
- Each turn names your current manager at its top (a manager can hand you over to another).
- Send your manager progress at milestones with intercom_send. Use intercom_ask only when you are blocked and cannot go on without an answer.
- Answer asks with intercom_reply and their askId. An ask you leave unanswered gets your final answer as its reply.
- Your final answer of each turn is sent to your manager for you, so end every turn with a short, self-contained summary: what you did, what you found, what is left.
- Messages that arrive while you work wait for your next turn; intercom_pending shows them now if you need them.
- intercom_team shows your manager and coworkers.
Working directory: %s`, workerID, MCPServerName, spec.Cwd)
	return b.String()
}

// turnHeader opens every turn's prompt.
func turnHeader(n int, manager string) string {
	return fmt.Sprintf("[agent-fleet] Turn %d · your manager: %s", n, manager)
}

// TaskPrompt is the prompt of a worker's first turn.
func TaskPrompt(n int, manager, task string) string {
	return fmt.Sprintf("%s\n\nYour task from %s:\n\n%s", turnHeader(n, manager), manager, task)
}

// BatchPrompt is the prompt of a turn for a batch of inbound messages
// (spec §5.6: "📨 Intercom batch (N messages)" with [i/N] entries; a single
// message is "📨 From <name> (<id>)"). Asks carry their askId.
func BatchPrompt(n int, manager string, batch []intercom.MessageView) string {
	return turnHeader(n, manager) + "\n\n" + batchBody(batch)
}

// Headings of the messages kept for a worker while its session was not
// connected (docs/architecture.md "Deferred delivery"): the first on its
// first turn, the second on later ones.
const (
	KeptBeforeStart = "Messages received before you started"
	KeptWhileAway   = "Messages received while you were not connected"
)

// KeptPrompt is the prompt of a turn for messages kept for the worker
// (under heading, each with its sender and the time it was sent) and the
// batch that arrived with them, if any.
func KeptPrompt(n int, manager, heading string, kept, batch []intercom.MessageView) string {
	s := turnHeader(n, manager) + "\n\n" + KeptSection(heading, kept)
	if len(batch) > 0 {
		s += "\n\n" + batchBody(batch)
	}
	return s
}

// KeptSection lists kept messages under heading, oldest first.
func KeptSection(heading string, kept []intercom.MessageView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d):", heading, len(kept))
	for i, m := range kept {
		sent := time.UnixMilli(int64(m.ReceivedAt)).UTC().Format(time.RFC3339)
		fmt.Fprintf(&b, "\n\n[%d/%d] From %s, sent %s", i+1, len(kept), sender(m), sent)
		writeEntry(&b, m)
	}
	return b.String()
}

func batchBody(batch []intercom.MessageView) string {
	var b strings.Builder
	asks := 0
	if len(batch) == 1 {
		fmt.Fprintf(&b, "📨 From %s", sender(batch[0]))
		writeEntry(&b, batch[0])
	} else {
		fmt.Fprintf(&b, "📨 Intercom batch (%d messages)", len(batch))
		for i, m := range batch {
			fmt.Fprintf(&b, "\n\n[%d/%d] From %s", i+1, len(batch), sender(m))
			writeEntry(&b, m)
		}
	}
	for _, m := range batch {
		if m.ExpectsReply {
			asks++
		}
	}
	switch {
	case asks == 1 && len(batch) == 1:
		b.WriteString("\n\nThis is an ask: answer it with intercom_reply, or your final answer becomes the reply.")
	case asks > 0:
		b.WriteString("\n\nAnswer each ask with intercom_reply({askId, message}); asks you leave unanswered get your final answer as the reply.")
	}
	return b.String()
}

func sender(m intercom.MessageView) string {
	if m.From.Name != "" && m.From.Name != m.From.ID {
		return fmt.Sprintf("%s (%s)", m.From.Name, m.From.ID)
	}
	return m.From.ID
}

func writeEntry(b *strings.Builder, m intercom.MessageView) {
	if m.ExpectsReply {
		fmt.Fprintf(b, " · ask %s, awaiting your reply", m.AskID)
	}
	if m.ReplyTo != "" {
		b.WriteString(" · a reply to your message")
	}
	b.WriteString(":\n")
	b.WriteString(m.Text)
	for _, a := range m.Attachments {
		if a.Language != "" {
			fmt.Fprintf(b, "\n\n---\nAttachment: %s\n~~~%s\n%s\n~~~", a.Name, a.Language, a.Content)
		} else {
			fmt.Fprintf(b, "\n\n---\nAttachment: %s\n%s", a.Name, a.Content)
		}
	}
}

// Recap opens a new conversation that is not the worker's first (its
// earlier one failed before it began, or could not be resumed): the task
// again, so the worker knows what it is for.
func Recap(task string) string {
	if task == "" {
		return "(This is a new conversation: an earlier one could not be continued.)"
	}
	return "(This is a new conversation: an earlier one could not be continued. The task you were spawned for:)\n\n" + task
}

// Resent opens the prompt of a turn that runs again what an earlier turn
// could not finish: it ended on the model provider's rate limit or
// overload, the same conversation resumed.
const Resent = "(agent-fleet: this comes again. Your previous turn ended on the model provider's rate limit before it was answered; if you had begun, go on from where you were.)"
