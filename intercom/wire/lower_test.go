package wire

import "testing"

// LowerName agrees with JavaScript's toLowerCase (Node 20), which the
// TypeScript broker matches names with; strings.ToLower differs on İ and
// a word-final Σ.
func TestLowerNameIsJavaScripts(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"\u0130stanbul", "i\u0307stanbul"},
		{"\u039f\u0394\u039f\u03a3", "\u03bf\u03b4\u03bf\u03c2"},
		{"\u039f\u0394\u039f\u03a3 \u039a\u0391\u0399", "\u03bf\u03b4\u03bf\u03c2 \u03ba\u03b1\u03b9"},
		{"\u03a3", "\u03c3"},
		{"A\u03a3.", "a\u03c2."},
		{"\u0391\u03a3'\u0392", "\u03b1\u03c3'\u03b2"},
		{"\u0391\u03a3'", "\u03b1\u03c2'"},
		{"abc", "abc"},
		{"\u00c0\u00c9\u00ce", "\u00e0\u00e9\u00ee"},
		{"\u01c5", "\u01c6"},
		{"\u03a3\u0391\u03a3", "\u03c3\u03b1\u03c2"},
		{"\u0391\u03a3\u0301", "\u03b1\u03c2\u0301"},
		{"x \u0130 y", "x i\u0307 y"},
		{"\u0391\u03a31", "\u03b1\u03c21"},
		{"A\u0345\u03a3", "a\u0345\u03c2"},
	} {
		if got := LowerName(c.in); got != c.want {
			t.Errorf("LowerName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
