package fleet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// waitWatch waits for a signal of w, failing when it ends first.
func waitWatch(t *testing.T, w *Watch) {
	t.Helper()
	select {
	case _, ok := <-w.C:
		require.True(t, ok, "the watch ended")
	case <-time.After(time.Minute): // hang guard
		t.Fatal("no change signalled")
	}
}

// Registry writes are seen, not polled for, and so is a coding-agent
// incarnation's turn record in a directory made after the watch began.
func TestWatchFleetSeesRegistryWrites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := intercom.NewPaths(t.TempDir())
	require.NoError(t, intercom.EnsureDir(p.OrchestratorDir()))
	reg, err := OpenRegistry(ctx, RegistryPath(p))
	require.NoError(t, err)
	defer reg.Close()
	w, err := WatchFleet(ctx, p)
	require.NoError(t, err)

	wk := &Worker{ID: "watched", Kind: "exec", Manager: "m", FirstManager: "m", Command: []string{"/bin/true"}}
	require.NoError(t, reg.Reserve(ctx, wk))
	waitWatch(t, w)
	_, err = reg.Update(ctx, wk.ID, wk.RunID, func(r *Worker) error { r.State = StateRunning; return nil })
	require.NoError(t, err)
	waitWatch(t, w)

	// A coding-agent incarnation's directory made later is watched too.
	wdir := WorkerDir(p, "agent", "0123456789ab")
	require.NoError(t, intercom.EnsureDir(wdir))
	waitWatch(t, w)
	require.NoError(t, os.WriteFile(filepath.Join(wdir, "state.json"), []byte("{}"), 0o600))
	waitWatch(t, w)

	cancel()
	for range w.C {
	}
}

// writeMarked appends text to the log at path and waits until the
// indexer marked the file's new size.
func writeMarked(t *testing.T, path, text string) {
	t.Helper()
	idx, err := WatchFile(t.Context(), logTimesPath(path))
	require.NoError(t, err)
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = fh.WriteString(text)
	require.NoError(t, err)
	fi, _ := fh.Stat()
	fh.Close()
	for {
		if m := readLogMarks(logTimesPath(path)); len(m) > 0 && m[len(m)-1].size >= fi.Size() {
			return
		}
		waitWatch(t, idx)
	}
}

// The index gives each line the time the indexer saw it land; lines it
// did not see have no time, and --since judges those by the file's last
// write. Capping the log in place shifts the index with it.
func TestLogTimes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w-0123456789ab.log")
	require.NoError(t, createLog(path))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- IndexLogTimes(ctx, path) }()
	require.Eventually(t, func() bool { _, err := os.Stat(logTimesPath(path)); return err == nil }, time.Minute, time.Millisecond) // hang guard
	before := time.Now().Add(-time.Millisecond)
	writeMarked(t, path, "one\ntwo\n")
	time.Sleep(2 * time.Millisecond) // marks have milliseconds: keep the two writes apart
	middle := time.Now().Truncate(time.Millisecond)
	writeMarked(t, path, "three\npartial")
	cancel()
	require.NoError(t, <-done)
	after := time.Now()
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, _ = fh.WriteString(" end\nunseen\n") // the indexer has stopped: no marks
	fh.Close()

	lines, size, err := readLogFile(path, LogQuery{})
	require.NoError(t, err)
	require.EqualValues(t, len("one\ntwo\nthree\npartial end\nunseen\n"), size)
	var texts []string
	for _, l := range lines {
		texts = append(texts, l.Text)
	}
	require.Equal(t, []string{"one", "two", "three", "partial end", "unseen"}, texts)
	require.Equal(t, lines[0].At, lines[1].At, "one burst, one mark")
	for _, l := range lines[:3] {
		require.False(t, l.At.Before(before.Truncate(time.Millisecond)) || l.At.After(after), "%s at %v", l.Text, l.At)
	}
	require.False(t, lines[2].At.Before(middle))
	require.True(t, lines[3].At.IsZero() && lines[4].At.IsZero(), "ends the indexer did not see have no time")

	last, _, err := readLogFile(path, LogQuery{Lines: 2})
	require.NoError(t, err)
	require.Equal(t, "unseen", last[1].Text)
	since, _, err := readLogFile(path, LogQuery{Since: middle})
	require.NoError(t, err)
	require.Equal(t, "three", since[0].Text, "lines seen before since are dropped")
	require.Len(t, since, 3, "lines of unknown time are kept while the file was written since")
	future := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(path, time.Now(), time.Now().Add(-time.Hour)))
	since, _, err = readLogFile(path, LogQuery{Since: future.Add(-30 * time.Minute)})
	require.NoError(t, err)
	require.Empty(t, since, "a file last written before since has nothing since")

	// Capping keeps the kept lines' times.
	big := filepath.Join(dir, "big-0123456789ab.log")
	var b bytes.Buffer
	var marks bytes.Buffer
	t0 := time.UnixMilli(1_700_000_000_000)
	for i := 0; b.Len() < LogKeep*3/2; i++ {
		fmt.Fprintf(&b, "line %06d %s\n", i, strings.Repeat("x", 80))
		fmt.Fprintf(&marks, "%d %d\n", b.Len(), t0.Add(time.Duration(i)*time.Second).UnixMilli())
	}
	require.NoError(t, os.WriteFile(big, b.Bytes(), 0o600))
	require.NoError(t, os.WriteFile(logTimesPath(big), marks.Bytes(), 0o600))
	want, _, err := readLogFile(big, LogQuery{Lines: 3})
	require.NoError(t, err)
	require.NoError(t, capLog(big))
	got, _, err := readLogFile(big, LogQuery{Lines: 3})
	require.NoError(t, err)
	require.Equal(t, want, got, "the same last lines, at the same times")
	all, _, err := readLogFile(big, LogQuery{})
	require.NoError(t, err)
	require.Contains(t, all[0].Text, "log capped")
	require.False(t, all[0].At.IsZero(), "the cap's note has its time")
	require.False(t, all[1].At.IsZero())
}

// A followed line the index has not marked yet gets the time it was seen
// at the marks' precision, as the marked ones have it.
func TestSeenAtHasTheMarksPrecision(t *testing.T) {
	marked := time.UnixMilli(1_700_000_000_123)
	marks := []logMark{{size: 10, at: marked}}
	now := time.Unix(1_700_000_001, 771_728_306)
	require.Equal(t, marked, seenAt(marks, 10, now))
	at := seenAt(marks, 11, now)
	require.Equal(t, time.Unix(1_700_000_001, 771_000_000), at)
	require.Zero(t, at.Nanosecond()%int(time.Millisecond))
}
