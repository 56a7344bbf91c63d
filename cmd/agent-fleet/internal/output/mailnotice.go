package output

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// MailReader names where a woken agent reads and answers its mail.
type MailReader struct {
	Read, Reply string
}

// The readers of a mail notice: a model with agent-fleet's MCP tools, and
// an agent at a shell.
var (
	ToolReader = MailReader{Read: "intercom_pending", Reply: "intercom_reply"}
	CLIReader  = MailReader{Read: "agent-fleet intercom pending", Reply: "agent-fleet intercom reply"}
)

// noticePreview is how much of a message a notice quotes.
const noticePreview = 60

// MailNotice is a batch of new mail as a notice: the line (Text) and its
// facts for programs (`intercom listen --notify-lines --json`).
type MailNotice struct {
	Text     string   `json:"text"`
	Messages int      `json:"messages"`
	Asks     int      `json:"asks"`
	From     []string `json:"from"`       // sender ids, first message first
	IDs      []string `json:"messageIds"` // the batch's messages, oldest first
}

// NewMailNotice is the notice of a batch (MailNoticeText).
func NewMailNotice(batch []intercom.MessageView, r MailReader) MailNotice {
	n := MailNotice{Text: MailNoticeText(batch, r), Messages: len(batch), From: []string{}, IDs: []string{}}
	for _, m := range batch {
		if m.ExpectsReply {
			n.Asks++
		}
		if !slices.Contains(n.From, m.From.ID) {
			n.From = append(n.From, m.From.ID)
		}
		n.IDs = append(n.IDs, m.MessageID)
	}
	return n
}

// MailNoticeText is the one-line pointer that wakes an agent for a batch of
// new messages (oldest first): how many, from whom, how many are asks,
// the first one's opening words, and where to read them. The inbox stays
// the source of truth: a notice never carries a whole message, and every
// peer-controlled field is escaped (Inline).
func MailNoticeText(batch []intercom.MessageView, r MailReader) string {
	asks := 0
	var senders []string
	count := map[string]int{}
	for _, m := range batch {
		if m.ExpectsReply {
			asks++
		}
		who := DisplayName(m.From)
		if count[who] == 0 {
			senders = append(senders, who)
		}
		count[who]++
	}
	if len(batch) == 0 {
		return ""
	}
	quote := noticeQuote(batch[0].Text)
	if len(batch) == 1 {
		kind, answer := "message", ""
		if asks == 1 {
			kind, answer = "ask", ", answer with "+r.Reply
		}
		return fmt.Sprintf("New intercom %s from %s: %s — read it with %s%s.", kind, senders[0], quote, r.Read, answer)
	}
	from := make([]string, len(senders))
	for i, s := range senders {
		from[i] = s
		if count[s] > 1 {
			from[i] = fmt.Sprintf("%s (%d)", s, count[s])
		}
	}
	line := fmt.Sprintf("%d new intercom messages from %s", len(batch), strings.Join(from, ", "))
	switch {
	case asks == 1:
		line += "; 1 is an ask"
	case asks > 1:
		line += fmt.Sprintf("; %d are asks", asks)
	}
	line += fmt.Sprintf(" — first: %s — read them with %s", quote, r.Read)
	if asks > 0 {
		line += ", answer with " + r.Reply
	}
	return line + "."
}

// NoticePrinter prints each batch it is given as one notice: its line, or
// its JSON object with asJSON.
func NoticePrinter(w io.Writer, asJSON bool, r MailReader) func([]intercom.MessageView) error {
	return func(b []intercom.MessageView) error {
		n := NewMailNotice(b, r)
		return Show(w, asJSON, n, n.Text)
	}
}

// noticeQuote is the opening words of a message, quoted.
func noticeQuote(text string) string {
	p := intercom.Preview(text, noticePreview)
	if p != strings.Join(strings.Fields(text), " ") {
		p += "…"
	}
	return `"` + Inline(p) + `"`
}
