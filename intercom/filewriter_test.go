package intercom

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedWrites makes a fileWriter's writes wait for a gate and counts them.
type gatedWrites struct {
	mu      sync.Mutex
	started chan struct{}
	gate    chan struct{}
	fail    error
	next    func(path string, data []byte) error // the write it gates
}

func (g *gatedWrites) write(path string, data []byte) error {
	g.started <- struct{}{}
	<-g.gate
	g.mu.Lock()
	err := g.fail
	g.mu.Unlock()
	if err != nil {
		return err
	}
	return g.next(path, data)
}

func gate(w *fileWriter) *gatedWrites {
	g := &gatedWrites{started: make(chan struct{}, 64), gate: make(chan struct{}), next: w.writeFile}
	w.writeFile = g.write
	return g
}

// Sends made while a write is under way share the next write, and each
// returns only once its entry is on disk.
func TestOutboxConcurrentEnqueuesShareAWrite(t *testing.T) {
	p := NewPaths(t.TempDir())
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	g := gate(o.w)
	var wg sync.WaitGroup
	enqueue := func(id string) {
		defer wg.Done()
		_, err := o.Enqueue("beta", msg(t, id, "hi"))
		require.NoError(t, err)
		reopened, err := OpenOutbox(p, "alpha")
		require.NoError(t, err)
		require.True(t, reopened.Has(id), "%s is on disk when Enqueue returns", id)
	}
	wg.Add(1)
	go enqueue("first")
	<-g.started // the first write is under way
	for i := range 8 {
		wg.Add(1)
		go enqueue(fmt.Sprintf("m%d", i))
	}
	require.Eventually(t, func() bool { o.mu.Lock(); defer o.mu.Unlock(); return len(o.entries) == 9 }, 5*time.Second, time.Millisecond)
	go func() {
		for range g.started {
		}
	}()
	close(g.gate)
	wg.Wait()
	o.mu.Lock()
	writes := o.w.writes
	o.mu.Unlock()
	require.Equal(t, uint64(2), writes, "nine sends, two writes")
}

// A failed write fails every send it held, which leaves the outbox; a
// later send writes again.
func TestOutboxWriteFailureRollsBack(t *testing.T) {
	p := NewPaths(t.TempDir())
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	g := gate(o.w)
	g.fail = errors.New("disk full")
	close(g.gate)
	go func() {
		for range g.started {
		}
	}()
	_, err = o.Enqueue("beta", msg(t, "lost", "hi"))
	require.ErrorContains(t, err, "disk full")
	require.False(t, o.Has("lost"))
	g.mu.Lock()
	g.fail = nil
	g.mu.Unlock()
	added, err := o.Enqueue("beta", msg(t, "kept", "hi"))
	require.NoError(t, err)
	require.True(t, added)
	reopened, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	require.Equal(t, []string{"kept"}, entryIDs(reopened))
}

func entryIDs(o *Outbox) []string {
	var ids []string
	for _, e := range o.Entries() {
		ids = append(ids, e.MessageID())
	}
	return ids
}

// Removals and messages marked read reach the disk without the caller
// waiting: soon by themselves, at once with Flush or Close.
func TestDeferredWritesReachTheDisk(t *testing.T) {
	p := NewPaths(t.TempDir())
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	_, err = o.Enqueue("beta", msg(t, "m1", "hi"))
	require.NoError(t, err)
	require.NoError(t, o.Remove("m1"))
	require.Eventually(t, func() bool {
		reopened, err := OpenOutbox(p, "alpha")
		return err == nil && reopened.Len() == 0
	}, 5*time.Second, time.Millisecond, "the removal is written in the background")

	// A removal behind a write under way is written once that one ends.
	_, err = o.Enqueue("beta", msg(t, "m2", "hi"))
	require.NoError(t, err)
	g := gate(o.w)
	done := make(chan error, 1)
	go func() { _, err := o.Enqueue("beta", msg(t, "m3", "hi")); done <- err }()
	<-g.started
	require.NoError(t, o.Remove("m2"))
	go func() {
		for range g.started {
		}
	}()
	close(g.gate)
	require.NoError(t, <-done)
	require.NoError(t, o.Flush())
	reopened, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	require.Equal(t, []string{"m3"}, entryIDs(reopened))

	in, err := OpenInbox(p, "alpha")
	require.NoError(t, err)
	r := stage(in, msg(t, "x1", "hello"))
	require.NoError(t, in.Flush())
	require.NoError(t, in.Consume(r.Message.Key))
	require.NoError(t, in.Close())
	in2, err := OpenInbox(p, "alpha")
	require.NoError(t, err)
	require.Empty(t, in2.Unread(), "consumed before Close")
	data, err := os.ReadFile(p.Inbox("alpha"))
	require.NoError(t, err)
	require.Contains(t, string(data), `"seen":["beta\u0000x1"]`, "keys are rendered as JSON strings")
}

// The idle compaction waits for a write under way: that write owns the
// journal's size, and the compaction's decision needs it.
func TestIdleCompactionWaitsForTheWriteUnderWay(t *testing.T) {
	p := NewPaths(t.TempDir())
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	g := gate(o.w)
	var written atomic.Bool
	gated := o.w.writeFile
	o.w.writeFile = func(path string, data []byte) error {
		err := gated(path, data)
		written.Store(true)
		return err
	}
	done := make(chan error, 1)
	go func() { _, err := o.Enqueue("beta", msg(t, "m1", "hi")); done <- err }()
	<-g.started
	compacted := make(chan bool, 1)
	go func() {
		o.j.idleCompact()
		compacted <- written.Load()
	}()
	go func() {
		for range g.started {
		}
	}()
	time.Sleep(20 * time.Millisecond) // lets a compaction that does not wait return first
	close(g.gate)
	require.True(t, <-compacted, "the compaction returned while the write was under way")
	require.NoError(t, <-done)
	require.NoError(t, o.Flush())
	journal, err := os.ReadFile(journalPath(p.Outbox("alpha")))
	if err == nil {
		require.Empty(t, journal, "the compaction after the append emptied the journal")
	}
	reopened, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	require.Equal(t, []string{"m1"}, entryIDs(reopened))
}
