package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// The helpers in this file read and write JSON the way the TypeScript peers do
// (JSON.parse / JSON.stringify), so that frames we emit are byte-identical to
// what a Node broker would emit and frames we read are judged by the same rules.

// kind is the JSON type of a raw value, decided by its first byte.
type kind byte

const (
	kindInvalid kind = iota
	kindString
	kindNumber
	kindObject
	kindArray
	kindBool
	kindNull
)

func kindOf(raw []byte) kind {
	if len(raw) == 0 {
		return kindInvalid
	}
	switch raw[0] {
	case '"':
		return kindString
	case '{':
		return kindObject
	case '[':
		return kindArray
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	default:
		return kindNumber
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i].
// b must be valid JSON (checked once per frame with validJSON).
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the index just past the string literal starting at b[i].
// It jumps from quote to quote (bytes.IndexByte is vectorised): a quote
// ends the literal unless an odd run of backslashes escapes it.
func skipString(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// field is one member of a JSON object, in document order.
type field struct {
	key string
	raw []byte
}

// objectFields splits a valid JSON object into its members in document order.
// A repeated key keeps its last value, as JSON.parse does, but stays at the
// position of its first occurrence (JavaScript property order).
// ok is false when raw is not an object.
func objectFields(raw []byte, dst []field) (fields []field, ok bool) {
	raw = trimSpace(raw)
	if kindOf(raw) != kindObject {
		return nil, false
	}
	fields = dst[:0]
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == '}' {
		return fields, true
	}
	for i < len(raw) {
		ke := skipString(raw, i)
		key := decodeKey(raw[i:ke])
		i = skipSpace(raw, ke)
		i = skipSpace(raw, i+1) // ':'
		ve := skipValue(raw, i)
		val := raw[i:ve]
		replaced := false
		for j := range fields {
			if fields[j].key == key {
				fields[j].raw = val
				replaced = true
				break
			}
		}
		if !replaced {
			fields = append(fields, field{key: key, raw: val})
		}
		i = skipSpace(raw, ve)
		if i >= len(raw) || raw[i] == '}' {
			break
		}
		i = skipSpace(raw, i+1) // ','
	}
	return fields, true
}

// arrayElems splits a valid JSON array into its elements.
func arrayElems(raw []byte) (elems [][]byte, ok bool) {
	raw = trimSpace(raw)
	if kindOf(raw) != kindArray {
		return nil, false
	}
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == ']' {
		return nil, true
	}
	for i < len(raw) {
		e := skipValue(raw, i)
		elems = append(elems, raw[i:e])
		i = skipSpace(raw, e)
		if i >= len(raw) || raw[i] == ']' {
			break
		}
		i = skipSpace(raw, i+1)
	}
	return elems, true
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// decodeStringRaw decodes a valid JSON string literal (quotes included).
// Invalid UTF-8 becomes U+FFFD, as a Node peer decoding the frame would see it.
func decodeStringRaw(raw []byte) string {
	inner := raw[1 : len(raw)-1]
	simple := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			simple = false
			break
		}
	}
	if simple {
		return string(inner)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return ""
	}
	return s
}

// protocolKeys are the member names of v4 frames, so decoding a key the
// protocol knows costs no allocation.
var protocolKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"type", "requestId", "protocol", "version", "session", "sessionId", "stateId",
		"access", "scopeId", "cwd", "model", "pid", "startedAt", "lastActivity", "name", "status",
		"runtimeInstanceId", "boss", "to", "message", "id", "timestamp", "replyTo", "expectsReply", "content",
		"text", "attachments", "control", "language", "deliveryId", "code", "reason", "messageId",
		"preserveAsks", "from", "accepted", "endpoint", "remoteAccess", "sessions", "trustedLocal", "origin",
		"fromSessionId", "action", "applied", "error", "data"} {
		m[k] = k
	}
	return m
}()

// decodeKey decodes an object key, without allocating for a protocol key.
func decodeKey(raw []byte) string {
	if k, ok := protocolKeys[string(raw[1:len(raw)-1])]; ok {
		return k
	}
	return decodeStringRaw(raw)
}

// asString returns the decoded string when raw is a JSON string.
func asString(raw []byte) (string, bool) {
	if kindOf(raw) != kindString {
		return "", false
	}
	return decodeStringRaw(raw), true
}

// asNumber returns the value when raw is a JSON number that is finite as a
// JavaScript double (1e400 parses to Infinity there, so it is refused here).
func asNumber(raw []byte) (float64, bool) {
	if kindOf(raw) != kindNumber {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// asBool returns the value when raw is a JSON boolean.
func asBool(raw []byte) (value, ok bool) {
	switch string(raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// utf16Len is the JavaScript String.length of s (UTF-16 code units), which is
// how the reference brokers bound names, ids and paths.
func utf16Len(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
		i += size
	}
	return n
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string literal escaped exactly as
// JavaScript's JSON.stringify escapes it (no HTML escaping, no escaping of
// U+2028/U+2029, lowercase \u00XX for other control characters).
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendNumber appends f formatted as JavaScript's Number.prototype.toString
// does (ECMA-262 Number::toString): shortest round-trip digits, plain
// notation for 1e-7 <= |f| < 1e21, exponent notation otherwise.
func AppendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		if math.Abs(f) < 1<<53 {
			return strconv.AppendInt(dst, int64(f), 10)
		}
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±XX
	mant, exp := e, 0
	for i := range e {
		if e[i] == 'e' {
			mant = e[:i]
			x, _ := strconv.Atoi(string(e[i+1:]))
			exp = x
			break
		}
	}
	var digits [24]byte
	k := 0
	for _, c := range mant {
		if c != '.' {
			digits[k] = c
			k++
		}
	}
	d := digits[:k]
	n := exp + 1 // value = 0.d × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for i := 0; i < n-k; i++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for i := 0; i < -n; i++ {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
