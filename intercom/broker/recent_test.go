package broker

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestRecentCacheAgainstAMap(t *testing.T) {
	// Random puts, replacements and deletes through a small table, whose
	// probe runs wrap around and collide, checked against a map that keeps
	// the newest max puts.
	const max = 64
	var r recentCache
	r.init(time.Hour, max)
	defer r.release()
	keys := newKeyHasher()
	type rec struct {
		fp  [8]byte
		seq int
	}
	model := map[dedupKey]rec{}
	var order []dedupKey // put order, for eviction
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 0; step < 20000; step++ {
		key := keys.dedupKey("s", fmt.Sprint(rng.IntN(150)))
		switch op := rng.IntN(10); {
		case op < 6:
			var fp [8]byte
			binary.LittleEndian.PutUint64(fp[:], rng.Uint64())
			r.put(recentRecord{key: key, fp: fp}, now)
			model[key] = rec{fp: fp, seq: step}
			order = append(order, key)
			// The ring holds the newest max puts, replaced or not.
			if len(order) > max {
				old := order[0]
				order = order[1:]
				// old leaves unless a newer put of it is still in the ring.
				stillThere := false
				for _, k := range order {
					if k == old {
						stillThere = true
						break
					}
				}
				if !stillThere {
					delete(model, old)
				}
			}
		case op < 8:
			r.delete(key)
			delete(model, key)
		default:
			got := r.lookup(key)
			want, ok := model[key]
			if !ok {
				require.Nil(t, got, "step %d", step)
			} else {
				require.NotNil(t, got, "step %d", step)
				require.Equal(t, want.fp, got.fp, "step %d", step)
			}
		}
		require.Equal(t, len(model), r.Len(), "step %d", step)
	}
	for k, want := range model {
		got := r.lookup(k)
		require.NotNil(t, got)
		require.Equal(t, want.fp, got.fp)
	}
}

func TestRecentCacheExpiresAndReleases(t *testing.T) {
	var r recentCache
	r.init(10*time.Minute, 1<<10)
	keys := newKeyHasher()
	t0 := time.Now()
	a, b := keys.dedupKey("x", "a"), keys.dedupKey("x", "b")
	r.put(recentRecord{key: a, fp: [8]byte{1}}, t0)
	r.put(recentRecord{key: b, fp: [8]byte{2}}, t0.Add(5*time.Minute))
	r.prune(t0.Add(9 * time.Minute))
	require.NotNil(t, r.lookup(a))
	r.prune(t0.Add(11 * time.Minute))
	require.Nil(t, r.lookup(a), "expired after the TTL")
	require.NotNil(t, r.lookup(b))
	require.Equal(t, 1, r.Len())
	r.prune(t0.Add(16 * time.Minute))
	require.Zero(t, r.Len())
	require.Nil(t, r.ring, "an empty cache gives its memory back")
	r.put(recentRecord{key: a, fp: [8]byte{3}}, t0.Add(17*time.Minute))
	require.Equal(t, [8]byte{3}, r.lookup(a).fp)
	r.release()
}

func TestRecentRecordIsCompact(t *testing.T) {
	// 2^17 records in 5.5 MiB: the figure the memory target rests on.
	require.Equal(t, 44, int(unsafe.Sizeof(recentRecord{})))
}
