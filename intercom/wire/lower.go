package wire

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// LowerName is a session name lowercased as the TypeScript broker
// lowercases it for a name match (spec §4.3: "case-insensitive, lowercase
// compare" is JavaScript's String.prototype.toLowerCase): Unicode's
// default full lowercase mapping, which differs from strings.ToLower in
// two places — U+0130 (İ) becomes "i̇" (i and U+0307), and Σ becomes ς at
// the end of a word (the Final_Sigma condition). Two names match when
// their LowerName are equal.
func LowerName(s string) string {
	if !strings.ContainsRune(s, 'İ') && !strings.ContainsRune(s, 'Σ') {
		return strings.ToLower(s) // the common case
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	for i, r := range s {
		switch r {
		case 'İ':
			b.WriteString("i\u0307")
		case 'Σ':
			if finalSigma(s, i) {
				b.WriteRune('ς')
			} else {
				b.WriteRune('σ')
			}
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// SameName reports whether two session names match as the broker matches
// a target to a name (spec §4.3): equal once both are LowerName'd.
func SameName(a, b string) bool { return LowerName(a) == LowerName(b) }

// finalSigma is Unicode's Final_Sigma condition for the Σ at byte i of s:
// a cased letter before it and none after it, case-ignorable characters
// skipped on both sides.
func finalSigma(s string, i int) bool {
	before := false
	for j := i; j > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:j])
		j -= size
		if caseIgnorable(r) {
			continue
		}
		before = cased(r)
		break
	}
	if !before {
		return false
	}
	for _, r := range s[i+len("Σ"):] {
		if caseIgnorable(r) {
			continue
		}
		return !cased(r)
	}
	return true
}

// cased is Unicode's Cased property: letters with case (Lu, Ll, Lt and
// the Other_Lowercase and Other_Uppercase characters).
func cased(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// caseIgnorable is Unicode's Case_Ignorable property: marks, format
// characters, modifier letters and symbols, and the word-internal
// punctuation of Word_Break MidLetter, MidNumLet and Single_Quote.
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '·', '\u0387', '\u055F', '\u05F4', '\u2018', '\u2019', '\u2024', '\u2027', '\uFE13', '\uFE52', '\uFE55', '\uFF07', '\uFF0E', '\uFF1A':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}
