package wire

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var validCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+10`, `1E-7`, `true`, `false`, `null`, ` {"a" : [1, 2 ,{"b":null}] } `,
	`"\u00e9\ud83d\ude00 \/ \"q\" \\ \b\f\n\r\t"`, "\"\xff\xfe invalid utf-8 is accepted\"", `{"a":1,"a":2}`,
	`[[[[[]]]]]`, `{"x":"` + strings.Repeat(`abc\"def\\`, 40) + `"}`,
	// Invalid:
	``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `[1 2]`, `01`, `1.`, `.5`, `1e`, `1e+`, `-`, `+1`,
	`tru`, `nul`, `truex`, `"abc`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"tab\there\"", "\"nl\nhere\"", `{} {}`, `[]]`,
	`{"a":1}x`, `"\`, `[`, `{"a":[}`, `{"a":{]}`, `"` + strings.Repeat("x", 100) + `\`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range validCases {
		require.Equal(t, json.Valid([]byte(c)), validJSON([]byte(c)), "%.80q", c)
	}
	// Every prefix of a real frame, and every single-byte change of it.
	for _, f := range realFrames {
		b := []byte(f)
		for i := 0; i <= len(b); i++ {
			require.Equal(t, json.Valid(b[:i]), validJSON(b[:i]), "%q", b[:i])
		}
		for i := range b {
			for _, r := range []byte{'"', '\\', '{', '}', '[', ']', ',', ':', ' ', 'x', '0', 0x01, 0xff} {
				m := append([]byte(nil), b...)
				m[i] = r
				require.Equal(t, json.Valid(m), validJSON(m), "%q", m)
			}
		}
	}
}

// FuzzValidJSON: validJSON and encoding/json.Valid agree on every input.
func FuzzValidJSON(f *testing.F) {
	for _, c := range validCases[:40] {
		f.Add([]byte(c))
	}
	for _, c := range realFrames {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if json.Valid(data) != validJSON(data) {
			t.Fatalf("json.Valid %v, validJSON %v for %q", json.Valid(data), validJSON(data), data)
		}
	})
}
