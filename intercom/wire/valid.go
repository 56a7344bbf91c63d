package wire

import (
	"encoding/binary"
	"math/bits"
)

// maxNestingDepth is encoding/json's limit, kept so that validJSON and
// json.Valid agree on every input.
const maxNestingDepth = 10000

// validJSON reports whether data is one JSON value (RFC 8259) with only
// whitespace around it. It accepts exactly what encoding/json.Valid accepts
// (bytes of invalid UTF-8 inside strings included, nesting up to 10000),
// several times faster: string contents, most of any message, are skipped
// eight bytes at a time.
func validJSON(data []byte) bool {
	// stack holds the open containers: '{' or '['.
	var stackBuf [64]byte
	stack := stackBuf[:0]
	i := skipSpace(data, 0)
	for {
		// A value starts at data[i].
		if i >= len(data) {
			return false
		}
		switch c := data[i]; {
		case c == '"':
			n, ok := scanString(data, i)
			if !ok {
				return false
			}
			i = n
		case c == '{' || c == '[':
			if len(stack) >= maxNestingDepth {
				return false
			}
			stack = append(stack, c)
			i = skipSpace(data, i+1)
			if i >= len(data) {
				return false
			}
			if c == '{' {
				if data[i] == '}' {
					stack = stack[:len(stack)-1]
					i++
					break
				}
				n, ok := scanKey(data, i)
				if !ok {
					return false
				}
				i = n
				continue
			}
			if data[i] == ']' {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			continue
		case c == '-' || (c >= '0' && c <= '9'):
			n, ok := scanNumber(data, i)
			if !ok {
				return false
			}
			i = n
		case c == 't':
			if !hasLiteral(data, i, "true") {
				return false
			}
			i += 4
		case c == 'f':
			if !hasLiteral(data, i, "false") {
				return false
			}
			i += 5
		case c == 'n':
			if !hasLiteral(data, i, "null") {
				return false
			}
			i += 4
		default:
			return false
		}
		// A value ended: close containers or move to the next member.
		for {
			i = skipSpace(data, i)
			if len(stack) == 0 {
				return i == len(data)
			}
			if i >= len(data) {
				return false
			}
			top := stack[len(stack)-1]
			c := data[i]
			if c == ',' {
				i = skipSpace(data, i+1)
				if top == '{' {
					n, ok := scanKey(data, i)
					if !ok {
						return false
					}
					i = n
				}
				break // the next value
			}
			if (top == '{' && c == '}') || (top == '[' && c == ']') {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return false
		}
	}
}

// scanKey checks `"key" :` at data[i] and returns the index after the
// colon and any whitespace.
func scanKey(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, false
	}
	n, ok := scanString(data, i)
	if !ok {
		return 0, false
	}
	n = skipSpace(data, n)
	if n >= len(data) || data[n] != ':' {
		return 0, false
	}
	return skipSpace(data, n+1), true
}

func hasLiteral(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}

const (
	lsb8 = 0x0101010101010101
	msb8 = 0x8080808080808080
)

// specialByte reports, per byte of x, whether it is '"', '\\' or a control
// character (< 0x20): the bytes a string scan must stop at. The marks are
// exact for the first such byte, which is all scanString uses.
func specialByte(x uint64) uint64 {
	quote := x ^ (lsb8 * '"')
	slash := x ^ (lsb8 * '\\')
	return ((quote - lsb8) &^ quote & msb8) |
		((slash - lsb8) &^ slash & msb8) |
		((x - lsb8*0x20) &^ x & msb8)
}

// scanString checks the string literal at data[i] and returns the index
// just past it.
func scanString(data []byte, i int) (int, bool) {
	i++
	for {
		for i+8 <= len(data) {
			m := specialByte(binary.LittleEndian.Uint64(data[i:]))
			if m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		for i < len(data) && data[i] >= 0x20 && data[i] != '"' && data[i] != '\\' {
			i++
		}
		if i >= len(data) {
			return 0, false
		}
		switch data[i] {
		case '"':
			return i + 1, true
		case '\\':
			if i+1 >= len(data) {
				return 0, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(data)-i < 6 {
					return 0, false
				}
				for _, h := range data[i+2 : i+6] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 6
			default:
				return 0, false
			}
		default: // a control character
			return 0, false
		}
	}
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// scanNumber checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at
// data[i] and returns the index just past it.
func scanNumber(data []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		return i
	}
	if data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digits(i + 1)
	default:
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}
