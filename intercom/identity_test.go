package intercom

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ValidSessionID is SessionIDPattern spelled out: they agree on every
// string of the corpus and of the fuzzer.
func TestValidSessionIDMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(SessionIDPattern)
	for _, id := range sessionIDCorpus() {
		require.Equal(t, re.MatchString(id), ValidSessionID(id), "%q", id)
	}
}

func FuzzValidSessionID(f *testing.F) {
	re := regexp.MustCompile(SessionIDPattern)
	for _, id := range sessionIDCorpus() {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if re.MatchString(id) != ValidSessionID(id) {
			t.Fatalf("%q: pattern %v, ValidSessionID %v", id, re.MatchString(id), ValidSessionID(id))
		}
	})
}

func sessionIDCorpus() []string {
	return []string{"", "a", "A", "0", "_", "-", "a_", "a-", "_a", "-a", "a b", "a.b", "a/b", "é", "aé", "a\n",
		"worker-1", "Boss_2", strings.Repeat("a", 64), strings.Repeat("a", 65), "a" + strings.Repeat("-", 63),
		"a" + strings.Repeat("-", 64), "z9Z_-", "[", "`", "{", "@", ":", "\x00"}
}
