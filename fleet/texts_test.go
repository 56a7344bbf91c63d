package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Counts in fleet's texts (doctor, the janitor, stop) agree with their
// nouns.
func TestPlural(t *testing.T) {
	require.Equal(t, "1 session", Plural(1, "session"))
	require.Equal(t, "0 sessions", Plural(0, "session"))
	require.Equal(t, "1 process", Plural(1, "process"))
	require.Equal(t, "2 processes", Plural(2, "process"))
	require.Equal(t, "1 ended record", Plural(1, "ended record"))
}

// The janitor's reasons are data: RFC 3339 in UTC whatever the zone of the
// time or the host.
func TestJanitorStampsAreUTC(t *testing.T) {
	at := time.Date(2026, 12, 1, 13, 8, 44, 0, time.FixedZone("CET", 3600))
	require.Equal(t, "2026-12-01T12:08:44Z", stamp(at))
	require.Equal(t, "2026-12-01T12:08:44Z", stampOr(at))
	require.Equal(t, "spawn", stampOr(time.Time{}))
}
