// Package output is agent-fleet's surface contract: the JSON that a CLI
// verb prints with --json and that the matching MCP tool returns as
// structuredContent, and the text both surfaces print. The JSON types here
// are an API for scripts and agents: fields are added, never renamed or
// removed, and optional fields are omitted rather than null. Both surfaces
// render through this package only, so a verb and its tool cannot drift.
//
// Texts come without a trailing newline. Where the CLI (people at a
// terminal) and an MCP tool (a model) are told the same thing differently,
// the function takes the Surface and both wordings sit side by side.
package output

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Surface is who reads a text.
type Surface int

const (
	// CLI is a person (or script) reading the command's stdout.
	CLI Surface = iota
	// Tool is a model reading an MCP tool result.
	Tool
)

// Report is one verb's outcome as both surfaces present it.
type Report interface {
	// JSON is what the CLI prints with --json.
	JSON() any
	// Structured is the MCP tool's structuredContent: a JSON object, the
	// same data as JSON (which may be an array: then it sits under a key).
	Structured() any
	// Text is the outcome for people (CLI) or for a model (Tool).
	Text(Surface) string
}

// PrintJSON writes v as one JSON line, HTML characters unescaped.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Print writes r to w: its JSON with asJSON, else its CLI text (nothing
// when the text is empty).
func Print(w io.Writer, r Report, asJSON bool) error {
	if asJSON {
		return PrintJSON(w, r.JSON())
	}
	if t := r.Text(CLI); t != "" {
		_, err := fmt.Fprintln(w, t)
		return err
	}
	return nil
}

// Failure is the structuredContent of a failed MCP tool call, and what a
// failed --json command prints: ok false, the error's message, and
// outcome_unknown when what it sent may have arrived.
func Failure(err error) map[string]any {
	m := map[string]any{"ok": false, "error": err.Error()}
	if errors.Is(err, intercom.ErrOutcomeUnknown) {
		m["outcome_unknown"] = true // exit 8: it may have arrived (docs/protocol.md §3.3)
	}
	return m
}

func plural(n int, what string) string { return fleet.Plural(n, what) }

// wasWere is the verb that agrees with n things.
func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// Plural is "1 message", "2 messages".
func Plural(n int, what string) string { return plural(n, what) }

// Show writes v as JSON with asJSON, else the text line: what a command
// without a Report prints.
func Show(w io.Writer, asJSON bool, v any, text string) error {
	if asJSON {
		return PrintJSON(w, v)
	}
	_, err := fmt.Fprintln(w, text)
	return err
}

// ShellQuote quotes s for a POSIX shell when it needs it: a word of only
// safe characters stays as it is, anything else is put in single quotes
// (a ' inside becomes '\”), so what is printed can be pasted back. A word
// holding a control character (one that Inline would escape) or bytes that
// are not UTF-8 is ANSI-C quoted instead, $'…', with each such character
// written as an escape (\e, \n, \x01, \u009b, \xff): a terminal is never
// sent it, and bash, zsh and ksh read the word back exactly.
func ShellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r))
	}) < 0 {
		return s
	}
	if Inline(s) != s {
		return ansiCQuote(s)
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ansiCQuote is s as a $'…' word: \ and ' escaped, every character that
// needs escaping (needsEscape, as on one line) and every byte that is not
// UTF-8 written as an escape, the rest as it is.
func ansiCQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case !needsEscape(r, false):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			if c, ok := ansiCEscapes[r]; ok {
				b.WriteString(c)
			} else {
				fmt.Fprintf(&b, `\x%02x`, r)
			}
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	b.WriteByte('\'')
	return b.String()
}

var ansiCEscapes = map[rune]string{'\a': `\a`, '\b': `\b`, 0x1b: `\e`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`, '\v': `\v`}

// ShellJoin is a command line with each argument shell-quoted as needed,
// safe to show to people (ShellQuote leaves no control character, and
// Inline makes sure of it).
func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Inline(ShellQuote(a))
	}
	return strings.Join(q, " ")
}
