package broker

import (
	"encoding/binary"
	"hash/maphash"
	"time"
	"unsafe"
)

// dedupKey identifies a message for deduplication (spec §5.2): a 96-bit
// digest of the sender id and the message id, under seeds chosen per
// broker, so keys cost no allocation and no string memory. Two keys of the
// 2^17 a cache holds collide with a probability below 2^-60.
type dedupKey [12]byte

// keyHasher computes dedup keys and session id digests. Seeds are chosen
// per broker; a local peer cannot aim collisions at them.
type keyHasher struct {
	lo, hi maphash.Seed
}

func newKeyHasher() keyHasher {
	return keyHasher{lo: maphash.MakeSeed(), hi: maphash.MakeSeed()}
}

func (k *keyHasher) dedupKey(from, messageID string) dedupKey {
	var h maphash.Hash
	var sums [16]byte
	for i, seed := range []maphash.Seed{k.lo, k.hi} {
		h.SetSeed(seed)
		h.WriteString(from)
		h.WriteByte(0)
		h.WriteString(messageID)
		binary.LittleEndian.PutUint64(sums[8*i:], h.Sum64())
	}
	return dedupKey(sums[:12])
}

// session digests a session id (see Broker.sessionDigests).
func (k *keyHasher) session(id string) uint32 { return uint32(maphash.String(k.lo, id)) }

// recentRecord is a finished delivery as the dedup cache keeps it: 44
// bytes, free of pointers, so that 2^17 of them are 5.5 MiB the garbage
// collector never scans.
type recentRecord struct {
	key        dedupKey
	deliveryID [16]byte // delivered: the original deliveryId (a UUID)
	fp         [8]byte  // the first 8 bytes of the payload fingerprint
	to         uint32   // digest of the recipient's session id
	// meta holds the expiry, in seconds since the cache's epoch (30 bits:
	// 34 years), and the flags above it.
	meta uint32
}

const (
	recentRetryable = 1 << 30 // failed after acceptance: a retry is a fresh send
	recentLive      = 1 << 31 // not deleted or replaced
	recentExpiry    = recentRetryable - 1
)

// recentCache keeps finished deliveries for ttl, at most max of them, in
// a ring in arrival order (so the oldest is also the first to expire, and
// pruning looks only at the front) indexed by an open-addressing table of
// ring positions. No operation scans the history, and its memory, mapped
// outside the Go heap where the platform allows, is fixed by max.
type recentCache struct {
	ttl   time.Duration
	max   int
	epoch time.Time

	ring  []recentRecord // capacity max; allocated on first use
	head  int            // position of the oldest record
	n     int            // records in the ring, live or not
	live  int
	index []uint32 // ring position + 1; 0 = empty. Length a power of two ≥ 2·max
	mask  uint32
	free  func()
}

func (r *recentCache) init(ttl time.Duration, max int) {
	r.ttl, r.max, r.epoch = ttl, max, time.Now()
}

// Len is the number of live records.
func (r *recentCache) Len() int { return r.live }

func (r *recentCache) alloc() {
	slots := 1
	for slots < 2*r.max {
		slots <<= 1
	}
	recSize := int(unsafe.Sizeof(recentRecord{}))
	mem, free := allocRecentMemory(r.max*recSize + slots*4)
	r.ring = unsafe.Slice((*recentRecord)(unsafe.Pointer(&mem[0])), r.max)
	r.index = unsafe.Slice((*uint32)(unsafe.Pointer(&mem[r.max*recSize])), slots)
	r.mask = uint32(slots - 1)
	r.free = free
}

// release returns the cache's memory; the cache is empty afterwards.
func (r *recentCache) release() {
	if r.free != nil {
		r.free()
	}
	r.ring, r.index, r.free = nil, nil, nil
	r.head, r.n, r.live = 0, 0, 0
}

func (r *recentCache) seconds(t time.Time) uint32 {
	return uint32(t.Sub(r.epoch)/time.Second) & recentExpiry
}

func (k dedupKey) slot() uint32 { return binary.LittleEndian.Uint32(k[:]) }

// find returns the index slot holding key, or the empty slot where it
// would go, and whether it was found.
func (r *recentCache) find(key dedupKey) (uint32, bool) {
	i := key.slot() & r.mask
	for {
		p := r.index[i]
		if p == 0 {
			return i, false
		}
		if r.ring[p-1].key == key {
			return i, true
		}
		i = (i + 1) & r.mask
	}
}

// unindex empties slot i, moving later entries of its probe run back so
// that every key stays reachable from its home slot (linear probing
// deletion without tombstones).
func (r *recentCache) unindex(i uint32) {
	for {
		r.index[i] = 0
		j := i
		for {
			j = (j + 1) & r.mask
			p := r.index[j]
			if p == 0 {
				return
			}
			home := r.ring[p-1].key.slot() & r.mask
			// Move j's entry to i unless its home lies cyclically in (i, j].
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				r.index[i] = p
				i = j
				break
			}
		}
	}
}

// lookup returns the live record of key, or nil.
func (r *recentCache) lookup(key dedupKey) *recentRecord {
	if r.live == 0 {
		return nil
	}
	if i, ok := r.find(key); ok {
		return &r.ring[r.index[i]-1]
	}
	return nil
}

// put records a finished delivery, replacing an older record of its key.
func (r *recentCache) put(rec recentRecord, now time.Time) {
	if r.max <= 0 {
		return
	}
	r.prune(now)
	if r.ring == nil {
		r.alloc()
	}
	if r.n == r.max {
		r.popFront()
	}
	pos := (r.head + r.n) % r.max
	rec.meta = rec.meta&recentRetryable | recentLive | (r.seconds(now.Add(r.ttl))+1)&recentExpiry
	r.ring[pos] = rec
	r.n++
	i, found := r.find(rec.key)
	if found {
		r.ring[r.index[i]-1].meta &^= recentLive // replaced: stays until it reaches the front
	} else {
		r.live++
	}
	r.index[i] = uint32(pos) + 1
}

// delete forgets key.
func (r *recentCache) delete(key dedupKey) {
	if r.live == 0 {
		return
	}
	if i, ok := r.find(key); ok {
		r.ring[r.index[i]-1].meta &^= recentLive
		r.unindex(i)
		r.live--
	}
}

func (r *recentCache) popFront() {
	rec := &r.ring[r.head]
	if rec.meta&recentLive != 0 {
		if i, ok := r.find(rec.key); ok && r.index[i]-1 == uint32(r.head) {
			r.unindex(i)
		}
		r.live--
	}
	*rec = recentRecord{}
	r.head = (r.head + 1) % r.max
	r.n--
}

// prune drops expired records (spec §5.2: pruned lazily on each send).
func (r *recentCache) prune(now time.Time) {
	if r.ring == nil {
		return
	}
	s := r.seconds(now)
	for r.n > 0 && r.ring[r.head].meta&recentExpiry <= s {
		r.popFront()
	}
	if r.n == 0 {
		// Idle: give the memory back; it is mapped again when needed.
		r.release()
	}
}

// heapRecentMemory is n zeroed bytes on the Go heap, 8-byte aligned.
func heapRecentMemory(n int) ([]byte, func()) {
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n), func() {}
}
