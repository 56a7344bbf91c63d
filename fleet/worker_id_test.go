package fleet

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// validRunID is RunIDPattern spelled out.
func TestValidRunIDMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(RunIDPattern)
	for _, id := range []string{"", "0123456789ab", "0123456789abc", "0123456789a", "0123456789AB", "0123456789ag",
		"abcdefabcdef", "000000000000", "0123456789a/", "g00000000000", "0123456789a\n", "ffffffffffff"} {
		require.Equal(t, re.MatchString(id), validRunID(id), "%q", id)
	}
}
