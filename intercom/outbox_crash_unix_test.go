//go:build !windows

package intercom

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// outboxCrashChildEnv makes the test binary a sender that queues sends in
// an outbox until it is killed (runOutboxCrashChild).
const outboxCrashChildEnv = "AGENT_FLEET_OUTBOX_CRASH_CHILD"

// runOutboxCrashChild queues s<from>, s<from+1>, … in the outbox of "tx"
// as a session does — each on disk before Enqueue returns (the "ack"
// line) — and removes some whose outcome came (the "removed" line), until
// it is killed. It keeps the outbox under its limit by removing the
// oldest when it is nearly full.
func runOutboxCrashChild(dir string) {
	from, _ := strconv.Atoi(os.Getenv(outboxCrashChildEnv + "_FROM"))
	o, err := OpenOutbox(NewPaths(dir), "tx")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i := from; ; i++ {
		m := wire.Message{ID: fmt.Sprintf("s%d", i), Timestamp: 1, Text: strings.Repeat("y", 100+i%400)}
		info, _ := wire.ParseMessage(m.AppendJSON(nil))
		if _, err := o.Enqueue("rx", info); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("ack", m.ID)
		if i%3 == 0 || o.Len() > MaxOutboxEntries-8 {
			oldest := o.Entries()[0].MessageID()
			_ = o.Remove(oldest)
			fmt.Println("removed", oldest)
		}
	}
}

// TestOutboxSurvivesKill: a sender killed with SIGKILL at random moments,
// five times over the same outbox, loses no send it queued whose outcome
// had not come, and never holds one twice. After the last, the outbox
// file alone (the TypeScript clients' format) holds what is queued.
func TestOutboxSurvivesKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := NewPaths(dir)
	queued := map[string]bool{} // acknowledged and not removed
	next := 0
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 1; round <= 5; round++ {
		killChildAfter(t, outboxCrashChildEnv, dir, next, 30+rng.IntN(400), func(f []string) bool {
			switch f[0] {
			case "ack":
				queued[f[1]] = true
				n, _ := strconv.Atoi(strings.TrimPrefix(f[1], "s"))
				next = max(next, n+1)
				return true
			case "removed":
				delete(queued, f[1])
			}
			return false
		})

		o, err := OpenOutbox(p, "tx")
		require.NoError(t, err)
		held := map[string]bool{}
		for _, e := range o.Entries() {
			require.False(t, held[e.MessageID()], "round %d: %s held twice", round, e.MessageID())
			held[e.MessageID()] = true
		}
		for id := range queued {
			require.True(t, held[id], "round %d: queued %s was lost", round, id)
		}
		// A removal not yet on disk may bring an entry back (its replay is
		// deduplicated); the next sender removes it again.
		for id := range held {
			queued[id] = true
		}
		if round%2 == 0 {
			// A clean open and close in between compacts the journal.
			require.NoError(t, o.Close())
		}
	}
	o, err := OpenOutbox(p, "tx")
	require.NoError(t, err)
	n := o.Len()
	require.Positive(t, n)
	require.NoError(t, o.Close())
	_, err = os.Stat(journalPath(p.Outbox("tx")))
	require.ErrorIs(t, err, os.ErrNotExist)
	data, err := os.ReadFile(p.Outbox("tx"))
	require.NoError(t, err)
	var file struct {
		Version int               `json:"version"`
		Entries []json.RawMessage `json:"entries"`
	}
	require.NoError(t, json.Unmarshal(data, &file), "the file alone is a version 1 outbox")
	require.Equal(t, 1, file.Version)
	require.Len(t, file.Entries, n)
}

// TestOutboxFileCatchesUpWhenIdle: a second after the last change the
// file alone holds the outbox and the journal is empty, while the outbox
// stays open.
func TestOutboxFileCatchesUpWhenIdle(t *testing.T) {
	t.Parallel()
	p := NewPaths(t.TempDir())
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Close() })
	_, err = o.Enqueue("beta", msg(t, "m1", "hi"))
	require.NoError(t, err)
	_, err = o.Enqueue("beta", msg(t, "m2", "hi"))
	require.NoError(t, err)
	require.NoError(t, o.Remove("m1"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		data, err := os.ReadFile(p.Outbox("alpha"))
		if !assert.NoError(c, err) {
			return
		}
		var file struct {
			Entries []struct {
				Message struct {
					ID string `json:"id"`
				} `json:"message"`
			} `json:"entries"`
		}
		assert.NoError(c, json.Unmarshal(data, &file))
		assert.Len(c, file.Entries, 1)
		if len(file.Entries) == 1 {
			assert.Equal(c, "m2", file.Entries[0].Message.ID)
		}
		fi, err := os.Stat(journalPath(p.Outbox("alpha")))
		if assert.NoError(c, err, "the journal stays open, emptied") {
			assert.Zero(c, fi.Size())
		}
	}, 10*time.Second, 20*time.Millisecond)
}

// FoldJournals puts what a session left in its journals into its inbox
// and outbox files and removes the journals; where there is none it
// creates nothing.
func TestFoldJournals(t *testing.T) {
	t.Parallel()
	p := NewPaths(t.TempDir())
	require.NoError(t, FoldJournals(p, "alpha"))
	for _, f := range []string{p.Inbox("alpha"), p.Outbox("alpha")} {
		_, err := os.Stat(f)
		require.ErrorIs(t, err, os.ErrNotExist, "nothing created: %s", f)
	}

	// A holder that dies with both journals written (never closed).
	in, err := OpenInbox(p, "alpha")
	require.NoError(t, err)
	stage(in, msg(t, "in-1", "unread mail"))
	require.NoError(t, in.Flush())
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	_, err = o.Enqueue("beta", msg(t, "out-1", "queued send"))
	require.NoError(t, err)
	for _, f := range []string{p.Inbox("alpha"), p.Outbox("alpha")} {
		_, err := os.Stat(journalPath(f))
		require.NoError(t, err, "a journal before the fold: %s", f)
	}

	require.NoError(t, FoldJournals(p, "alpha"))
	for _, f := range []string{p.Inbox("alpha"), p.Outbox("alpha")} {
		_, err := os.Stat(journalPath(f))
		require.ErrorIs(t, err, os.ErrNotExist, "folded: %s", f)
	}
	file := newInbox("")
	data, err := os.ReadFile(p.Inbox("alpha"))
	require.NoError(t, err)
	require.NoError(t, file.load(data, true))
	require.Len(t, file.Unread(), 1, "the inbox file alone holds the mail")
	out, err := os.ReadFile(p.Outbox("alpha"))
	require.NoError(t, err)
	require.Contains(t, string(out), `"id":"out-1"`, "the outbox file alone holds the send")
}
