package wire

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// Expected texts are what Node's JSON.stringify printed for the same values.
func TestAppendNumberMatchesJavaScript(t *testing.T) {
	cases := []struct {
		v    float64
		want string
	}{
		{0, "0"}, {math.Copysign(0, -1), "0"}, {1, "1"}, {-1, "-1"}, {1.5, "1.5"}, {0.1, "0.1"},
		{1e21, "1e+21"}, {1e20, "100000000000000000000"}, {123456789012345680000, "123456789012345680000"},
		{1e-7, "1e-7"}, {1e-6, "0.000001"}, {0.000001234, "0.000001234"},
		{1.7976931348623157e308, "1.7976931348623157e+308"}, {5e-324, "5e-324"},
		{1760000000000.5, "1760000000000.5"}, {1 << 53, "9007199254740992"}, {1<<53 + 2, "9007199254740994"},
		{-1e-7, "-1e-7"}, {123e-20, "1.23e-18"}, {4.35, "4.35"}, {100, "100"}, {1e300, "1e+300"},
		{0.5, "0.5"}, {-123.456, "-123.456"}, {1760000000000, "1760000000000"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, string(AppendNumber(nil, c.v)), "%v", c.v)
	}
}

func TestAppendStringMatchesJavaScript(t *testing.T) {
	in := "\u0000\u0001\b\f\n\r\t\u001f\"\\/<>&\u2028\u2029é🚀\u007f"
	want := `"\u0000\u0001\b\f\n\r\t\u001f\"\\/<>&` + "\u2028\u2029é🚀\u007f" + `"`
	require.Equal(t, want, string(AppendString(nil, in)))
	var back string
	require.NoError(t, json.Unmarshal(AppendString(nil, in), &back))
	require.Equal(t, in, back)
}

func TestObjectFieldsOrderDuplicatesAndSpace(t *testing.T) {
	fields, ok := objectFields([]byte(` { "b" : 1 , "a":{"x":[1,"]}"]}, "b":"last", "c\u0041":null } `), nil)
	require.True(t, ok)
	require.Len(t, fields, 3)
	require.Equal(t, "b", fields[0].key)
	require.Equal(t, `"last"`, string(fields[0].raw), "a repeated key keeps its last value")
	require.Equal(t, "a", fields[1].key)
	require.Equal(t, `{"x":[1,"]}"]}`, string(fields[1].raw))
	require.Equal(t, "cA", fields[2].key, "keys are unescaped")
	_, ok = objectFields([]byte(`[1]`), nil)
	require.False(t, ok)
	fields, ok = objectFields([]byte(`{}`), nil)
	require.True(t, ok)
	require.Empty(t, fields)
}

func TestUTF16Len(t *testing.T) {
	require.Equal(t, 0, utf16Len(""))
	require.Equal(t, 3, utf16Len("abc"))
	require.Equal(t, 1, utf16Len("é"))
	require.Equal(t, 2, utf16Len("🚀"))
}

func TestAsNumberRefusesNonFinite(t *testing.T) {
	_, ok := asNumber([]byte("1e400"))
	require.False(t, ok)
	_, ok = asNumber([]byte(`"1"`))
	require.False(t, ok)
	v, ok := asNumber([]byte("-2.5e3"))
	require.True(t, ok)
	require.Equal(t, -2500.0, v)
}

func TestValidateScopeVectors(t *testing.T) {
	valid := []string{"", "Scope_AAAAAAAAAA", "0123456789abcdef", "A-_-_-_-_-_-_-_-", string(make128('a')),
		"ffffffffffffffffffffffffffffffffffffffffffffffff"}
	invalid := []string{"short_15_chars_", string(make128('a')) + "b", " Scope_AAAAAAAAAA", "Scope_AAAAAAAAAA ",
		"Scope AAAAAAAAAA", "Scope.AAAAAAAAAAA", "Scope/AAAAAAAAAAA", "Scopé_AAAAAAAAAAA", "Scope_AAAAAAAAAA\n",
		"Scope_AAAAAAAA\x00AA"}
	for _, s := range valid {
		require.NoError(t, ValidateScope(s), "%q", s)
	}
	for _, s := range invalid {
		err := ValidateScope(s)
		require.ErrorIs(t, err, ErrInvalidScope, "%q", s)
		require.NotContains(t, err.Error(), s[:min(len(s), 10)], "errors never echo the value")
	}
	require.True(t, SameScope("", ""))
	require.False(t, SameScope("", "Scope_AAAAAAAAAA"))
	require.False(t, SameScope("Scope_AAAAAAAAAA", "scope_AAAAAAAAAA"))
}

func make128(c byte) []byte {
	b := make([]byte, 128)
	for i := range b {
		b[i] = c
	}
	return b
}
