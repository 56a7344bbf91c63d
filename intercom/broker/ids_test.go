package broker

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// The broker's ids are version 4 UUIDs, all different, across refills.
func TestIDSource(t *testing.T) {
	s := newIDSource()
	seen := map[uuid.UUID]bool{}
	for range 1000 {
		u := s.next()
		require.Equal(t, uuid.Version(4), u.Version())
		require.Equal(t, uuid.RFC4122, u.Variant())
		require.False(t, seen[u], "a repeated id")
		seen[u] = true
	}
	text, raw := s.deliveryID()
	require.Equal(t, text, uuid.UUID(raw).String())
}

func BenchmarkIDSource(b *testing.B) {
	s := newIDSource()
	for b.Loop() {
		_, _ = s.deliveryID()
	}
}
