package broker

import (
	"crypto/rand"
	"sync"

	"github.com/google/uuid"
)

// idSource draws random (version 4) UUIDs — delivery ids, and the session
// ids the broker assigns — from a buffer of random bytes refilled 4 KiB at
// a time: one read of the system's random source per 256 ids instead of
// one per id, which counts at the rates the broker forwards messages.
// Safe for concurrent use.
type idSource struct {
	mu  sync.Mutex
	buf [4096]byte
	off int
}

func newIDSource() *idSource { return &idSource{off: len(idSource{}.buf)} }

// next returns a fresh UUID.
func (s *idSource) next() uuid.UUID {
	s.mu.Lock()
	if s.off == len(s.buf) {
		if _, err := rand.Read(s.buf[:]); err != nil {
			s.mu.Unlock()
			return uuid.New() // crypto/rand does not fail on supported systems
		}
		s.off = 0
	}
	var u uuid.UUID
	copy(u[:], s.buf[s.off:s.off+16])
	s.off += 16
	s.mu.Unlock()
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u
}

// deliveryID returns a fresh deliveryId, as text and as its 16 bytes.
func (s *idSource) deliveryID() (string, [16]byte) {
	u := s.next()
	return u.String(), u
}
