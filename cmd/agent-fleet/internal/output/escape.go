package output

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text for people shows strings that other sessions choose — names, ids,
// working directories, model labels, status summaries, message texts,
// team names — and a terminal must not obey what they contain. Every
// human surface renders them through Inline (one line) or Block (a text
// of several lines), as gh does: control characters are shown, not
// sent. JSON and MCP structuredContent carry the strings exactly.
//
// The notation:
//   - C0 controls and DEL in caret notation: ESC is ^[, CR ^M, NUL ^@,
//     DEL ^?; in Inline also newline (^J) and tab (^I);
//   - C1 controls (U+0080–U+009F), the bidirectional overrides and
//     isolates (U+202A–U+202E, U+2066–U+2069) and the line and paragraph
//     separators (U+2028, U+2029) as \uXXXX;
//   - bytes that are not UTF-8 as \xNN.

// Inline renders s for one line of human output: every control
// character, newlines and tabs included, is shown escaped.
func Inline(s string) string { return escape(s, false) }

// Block renders a multi-line text (a message, an attachment) for human
// output: newlines and tabs stay, every other control character is shown
// escaped, and each line after the first starts with indent, so that no
// line of the text can pass for a line of agent-fleet's own.
func Block(s, indent string) string {
	s = escape(s, true)
	if indent == "" || !strings.Contains(s, "\n") {
		return s
	}
	return strings.ReplaceAll(s, "\n", "\n"+indent)
}

// Lines renders a text agent-fleet composed of several lines (a team) that
// holds peer-controlled fields: its newlines stay, every other control
// character is shown escaped.
func Lines(s string) string { return escape(s, true) }

func needsEscape(r rune, keepLines bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return !keepLines
	case r < 0x20 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

func escape(s string, keepLines bool) string {
	clean := true
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				clean = false
				break
			}
		}
		if needsEscape(r, keepLines) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !needsEscape(r, keepLines):
			b.WriteString(s[i : i+n])
		case r < 0x20:
			b.WriteByte('^')
			b.WriteByte(byte(r) + 0x40)
		case r == 0x7f:
			b.WriteString("^?")
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}
