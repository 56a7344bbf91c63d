package fleet

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Counts in fleet's texts (doctor, the janitor, stop) agree with their
// nouns (issue 22, finding 20).
func TestPlural(t *testing.T) {
	require.Equal(t, "1 session", plural(1, "session"))
	require.Equal(t, "0 sessions", plural(0, "session"))
	require.Equal(t, "1 process", plural(1, "process"))
	require.Equal(t, "2 processes", plural(2, "process"))
	require.Equal(t, "1 ended record", plural(1, "ended record"))
}
