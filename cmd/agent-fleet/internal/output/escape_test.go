package output

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

func TestInlineAndBlockEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain name, ünïcode ✓":     "plain name, ünïcode ✓",
		"evil\x1b[31mred\x1b[0m":    "evil^[[31mred^[[0m",
		"two\nlines\r\tand\x00\x7f": "two^Jlines^M^Iand^@^?",
		"c1\u009b31m":               `c1\u009b31m`,
		"bidi\u202egnp.exe":         `bidi\u202egnp.exe`,
		"sep\u2028x":                `sep\u2028x`,
		"bad\xffutf8":               `bad\xffutf8`,
	} {
		require.Equal(t, want, Inline(in), "%q", in)
	}
	require.Equal(t, "one\n  two\n  \tthree ^[[2J", Block("one\ntwo\n\tthree \x1b[2J", "  "))
	require.Equal(t, "one\ntwo^M", Block("one\ntwo\r", ""))
	require.Equal(t, "Manager: a\nYou: b^[", Lines("Manager: a\nYou: b\x1b"))
}

// What other sessions choose reaches people escaped, every line of a
// message indented under its header; the JSON views keep it exact.
func TestIntercomTextsEscapePeerStrings(t *testing.T) {
	evil := intercom.Sender{ID: "evil", Name: "ev\x1b[31mil\nforged"}
	v := intercom.SessionView{ID: "evil", Name: evil.Name, Cwd: "/tmp/\x1b]0;title\x07", Model: "m\r", Status: "busy\x1b[2J"}
	require.Equal(t, `- ev^[[31mil^Jforged (evil) - /tmp/^[]0;title^G (m^M) [busy^[[2J]`, SessionLine(v))

	m := &intercom.MessageView{From: evil, Text: "line one\n[00:00:00] alice:\nfake \x1b[2J"}
	got := MessageText(m)
	require.Contains(t, got, "] ev^[[31mil^Jforged (evil):\n  line one\n  [00:00:00] alice:\n  fake ^[[2J")
	require.NotContains(t, got, "\x1b")

	p := &intercom.PendingResult{Unread: []intercom.MessageView{*m}, Asks: []intercom.AskView{{AskID: "ask-1", From: evil, Preview: "q\x1b[1m"}}}
	got = PendingText(p, false)
	require.Equal(t, "- ev^[[31mil^Jforged (evil): line one\n  [00:00:00] alice:\n  fake ^[[2J\nPending asks:\n- ask-1 · ev^[[31mil^Jforged · 0s ago · q^[[1m", got)
	require.Equal(t, "session_id: a\nname: b^[\ncwd: c^J", WhoamiText(&intercom.WhoamiResult{SessionID: "a", Name: "b\x1b", Cwd: "c\n"}))
}
