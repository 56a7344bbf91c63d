package intercom

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func msg(t *testing.T, id, text string, mods ...func(*wire.Message)) *wire.MessageInfo {
	t.Helper()
	m := wire.Message{ID: id, Timestamp: 1760000000000, Text: text}
	for _, f := range mods {
		f(&m)
	}
	info, err := wire.ParseMessage(m.AppendJSON(nil))
	require.NoError(t, err)
	return info
}

func TestOutboxFormatAndRules(t *testing.T) {
	p := NewPaths(t.TempDir())
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Flush() }) // before the temp dir goes
	added, err := o.Enqueue("beta", msg(t, "m1", "hi"))
	require.NoError(t, err)
	require.True(t, added)
	added, err = o.Enqueue("beta", msg(t, "m1", "hi"))
	require.NoError(t, err)
	require.False(t, added, "an identical retry is not queued twice")
	_, err = o.Enqueue("beta", msg(t, "m1", "changed"))
	require.ErrorIs(t, err, ErrOutboxConflict)
	_, err = o.Enqueue("BETA", msg(t, "m1", "hi"))
	require.ErrorIs(t, err, ErrOutboxConflict, "the target is part of the fingerprint")

	// On disk in the journal; in the file, in the TypeScript clients'
	// format, once the outbox is closed.
	_, err = os.Stat(p.Outbox("alpha"))
	require.ErrorIs(t, err, os.ErrNotExist, "no file until a compaction")
	journal, err := os.ReadFile(journalPath(p.Outbox("alpha")))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(journal), `{"op":"add","to":"beta","message":{"id":"m1"`), "%s", journal)
	require.NoError(t, o.Close())
	_, err = os.Stat(journalPath(p.Outbox("alpha")))
	require.ErrorIs(t, err, os.ErrNotExist, "Close removes the journal")
	data, err := os.ReadFile(p.Outbox("alpha"))
	require.NoError(t, err)
	var st struct {
		Version int `json:"version"`
		Entries []struct {
			To       string         `json:"to"`
			Message  map[string]any `json:"message"`
			QueuedAt float64        `json:"queuedAt"`
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal(data, &st))
	require.Equal(t, 1, st.Version)
	require.Len(t, st.Entries, 1)
	require.Equal(t, "beta", st.Entries[0].To)
	require.Equal(t, "m1", st.Entries[0].Message["id"])
	require.Greater(t, st.Entries[0].QueuedAt, float64(0))
	fi, _ := os.Stat(p.Outbox("alpha"))
	require.Equal(t, FileMode, fi.Mode().Perm())

	// Reloaded as the next process would.
	o2, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o2.Flush() }) // before the temp dir goes
	require.Equal(t, 1, o2.Len())
	require.Equal(t, "m1", o2.Entries()[0].MessageID())
	require.NoError(t, o2.Remove("m1"))
	require.Equal(t, 0, o2.Len())

	for i := 0; i < MaxOutboxEntries; i++ {
		_, err := o2.Enqueue("beta", msg(t, fmt.Sprintf("f%d", i), "x"))
		require.NoError(t, err)
	}
	_, err = o2.Enqueue("beta", msg(t, "over", "x"))
	require.ErrorIs(t, err, ErrOutboxFull)
	require.Equal(t, "Durable outbox is full (256 messages)", ErrOutboxFull.Error())
}

// A file the TypeScript outbox wrote is read and replayable.
func TestOutboxReadsTypeScriptFile(t *testing.T) {
	p := NewPaths(t.TempDir())
	require.NoError(t, EnsureDir(filepath.Dir(p.Outbox("alpha"))))
	ts := `{"version":1,"entries":[{"to":"beta","message":{"id":"1b4e28ba-2fa1-4d2b-883f-0016d3cca427","timestamp":1760000000000,"content":{"text":"from node"}},"queuedAt":1760000000001}]}`
	require.NoError(t, os.WriteFile(p.Outbox("alpha"), []byte(ts), 0o600))
	o, err := OpenOutbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Flush() }) // before the temp dir goes
	require.Equal(t, 1, o.Len())
	e := o.Entries()[0]
	require.Equal(t, `{"id":"1b4e28ba-2fa1-4d2b-883f-0016d3cca427","timestamp":1760000000000,"content":{"text":"from node"}}`, string(e.Message))
	require.Equal(t, "beta", e.To)
}

func TestOutboxCorruptFileKeptAside(t *testing.T) {
	p := NewPaths(t.TempDir())
	require.NoError(t, EnsureDir(filepath.Dir(p.Outbox("a"))))
	require.NoError(t, os.WriteFile(p.Outbox("a"), []byte(`{"version":2,"entries":[]}`), 0o600))
	o, err := OpenOutbox(p, "a")
	require.NoError(t, err)
	t.Cleanup(func() { _ = o.Flush() }) // before the temp dir goes
	require.Equal(t, 0, o.Len())
	m, _ := filepath.Glob(p.Outbox("a") + ".corrupt-*")
	require.Len(t, m, 1)
}

var beta = wire.SessionInfo{ID: "beta", Name: "Beta", HasName: true, Cwd: "/b", Model: "m", Origin: "local"}

func stage(in *Inbox, m *wire.MessageInfo) StageResult {
	return in.Stage(beta.AppendJSON(nil), beta, m, 1760000000000)
}

func TestInboxStageDedupConflictAndReload(t *testing.T) {
	p := NewPaths(t.TempDir())
	in, err := OpenInbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = in.Close() }) // before the temp dir goes
	r := stage(in, msg(t, "m1", "hello"))
	require.False(t, r.Duplicate)
	require.EqualValues(t, 1, r.Message.Sequence)
	ask := stage(in, msg(t, "q1", "ok?", func(m *wire.Message) { m.ExpectsReply = true }))
	require.EqualValues(t, 2, ask.Message.Sequence)
	require.NoError(t, in.Flush())

	require.True(t, stage(in, msg(t, "m1", "hello")).Duplicate)
	require.True(t, stage(in, msg(t, "m1", "different")).Conflict)

	// A restart after a crash: what the first holder flushed is there.
	in2, err := OpenInbox(p, "alpha")
	require.NoError(t, err)
	require.Len(t, in2.Unread(), 2)
	require.Len(t, in2.PendingAsks(), 1)
	require.Equal(t, "q1", in2.PendingAsks()[0].Message.ID)
	require.True(t, stage(in2, msg(t, "m1", "hello")).Duplicate, "dedup survives a restart")
	require.NoError(t, in2.Consume("beta\x00m1"))
	require.True(t, stage(in2, msg(t, "m1", "hello")).Duplicate, "and consumption")
	require.True(t, stage(in2, msg(t, "m1", "other")).Conflict)
	require.EqualValues(t, 3, stage(in2, msg(t, "m2", "next")).Message.Sequence)

	require.NoError(t, in2.MarkDeferred("q1", "beta", 5))
	require.NoError(t, in2.DismissAsk("q1", "beta"))
	require.Empty(t, in2.PendingAsks())
	require.Equal(t, AskID("beta", "q1"), ask.Message.AskID())
	require.True(t, strings.HasPrefix(AskID("beta", "q1"), "ask-"))
	require.Len(t, AskID("beta", "q1"), 4+43, "base64url of a SHA-256, unpadded")
	require.NoError(t, in2.Close())
}

func TestInboxFileIsPiVersion3(t *testing.T) {
	p := NewPaths(t.TempDir())
	in, _ := OpenInbox(p, "alpha")
	t.Cleanup(func() { _ = in.Close() }) // before the temp dir goes
	stage(in, msg(t, "q1", "ok?", func(m *wire.Message) { m.ExpectsReply = true }))
	require.NoError(t, in.Flush())
	// Durable in the journal, read by inspection from there...
	asks, err := ReadPendingAsks(p, "alpha")
	require.NoError(t, err)
	require.Len(t, asks, 1)
	// ...and in the Pi-format file once the session lets go of it.
	require.NoError(t, in.Close())
	_, err = os.Stat(journalPath(p.Inbox("alpha")))
	require.ErrorIs(t, err, os.ErrNotExist, "the journal is removed on close")
	data, err := os.ReadFile(p.Inbox("alpha"))
	require.NoError(t, err)
	var st map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &st))
	keys, _ := wire.KeyOrder(data)
	require.Equal(t, []string{"version", "nextSequence", "entries", "pendingAsks", "seen", "fingerprints"}, keys)
	require.Equal(t, "3", string(st["version"]))
	var entries []json.RawMessage
	require.NoError(t, json.Unmarshal(st["entries"], &entries))
	ek, err := wire.KeyOrder(entries[0])
	require.NoError(t, err)
	require.Equal(t, []string{"key", "from", "message", "receivedAt", "sequence"}, ek)
	require.Contains(t, string(entries[0]), `"key":"beta\u0000q1"`)

	// The read-only view of another session's inbox.
	asks, err = ReadPendingAsks(p, "alpha")
	require.NoError(t, err)
	require.Len(t, asks, 1)
	none, err := ReadPendingAsks(p, "nobody")
	require.NoError(t, err)
	require.Empty(t, none)
	require.NoError(t, os.WriteFile(p.Inbox("v2"), []byte(`{"version":2,"nextSequence":1,"entries":[],"pendingAsks":[],"seen":[]}`), 0o600))
	_, err = ReadPendingAsks(p, "v2")
	require.ErrorIs(t, err, ErrInboxVersion)
	after, _ := os.ReadFile(p.Inbox("v2"))
	require.Contains(t, string(after), `"version":2`, "never migrated")
}

// An inbox written by the Pi client (JSON fingerprints, version 2) loads,
// migrates, and still deduplicates against its remembered keys.
func TestInboxReadsPiFiles(t *testing.T) {
	p := NewPaths(t.TempDir())
	require.NoError(t, EnsureDir(filepath.Dir(p.Inbox("alpha"))))
	from := `{"id":"beta","name":"Beta","cwd":"/b","model":"m","pid":1,"startedAt":1,"lastActivity":1,"trustedLocal":true,"origin":"local"}`
	pi := `{"version":3,"nextSequence":7,"entries":[{"key":"beta\u0000m6","from":` + from + `,"message":{"id":"m6","timestamp":1,"content":{"text":"six"}},"receivedAt":1760000000000,"sequence":6}],` +
		`"pendingAsks":[],"seen":["beta\u0000m5","beta\u0000m6"],"fingerprints":{"beta\u0000m5":"{\"content\":{\"text\":\"five\"}}","beta\u0000m6":"{\"content\":{\"text\":\"six\"}}"}}`
	require.NoError(t, os.WriteFile(p.Inbox("alpha"), []byte(pi), 0o600))
	in, err := OpenInbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = in.Close() }) // before the temp dir goes
	require.Len(t, in.Unread(), 1)
	require.True(t, stage(in, msg(t, "m5", "five")).Duplicate, "Pi JSON fingerprint understood")
	require.True(t, stage(in, msg(t, "m5", "not five")).Conflict)
	require.EqualValues(t, 7, stage(in, msg(t, "m7", "seven")).Message.Sequence)

	v1 := `{"version":1,"nextSequence":2,"entries":[{"key":"beta\u0000q","from":` + from + `,"message":{"id":"q","timestamp":1,"expectsReply":true,"content":{"text":"?"}},"receivedAt":1,"sequence":1}],"seen":[]}`
	require.NoError(t, os.WriteFile(p.Inbox("old"), []byte(v1), 0o600))
	old, err := OpenInbox(p, "old")
	require.NoError(t, err)
	t.Cleanup(func() { _ = old.Close() }) // before the temp dir goes
	require.Len(t, old.PendingAsks(), 1, "v1 derives pending asks from entries")
}

func TestInboxSeenIsCapped(t *testing.T) {
	p := NewPaths(t.TempDir())
	in, _ := OpenInbox(p, "alpha")
	t.Cleanup(func() { _ = in.Close() }) // before the temp dir goes
	keep := stage(in, msg(t, "keep", "unread"))
	require.NoError(t, in.Consume())
	var batch []string
	for i := 0; i < MaxSeenKeys+10; i++ {
		r := stage(in, msg(t, fmt.Sprintf("m%d", i), "x"))
		batch = append(batch, r.Message.Key)
		if len(batch) == 512 {
			require.NoError(t, in.Consume(batch...))
			batch = nil
		}
	}
	require.NoError(t, in.Consume(batch...))
	require.NoError(t, in.Flush())
	in.mu.Lock()
	n := len(in.seen)
	_, kept := in.seenSet[keep.Message.Key]
	in.mu.Unlock()
	require.LessOrEqual(t, n, MaxSeenKeys+seenSlack)
	require.True(t, kept, "keys of unread entries are always remembered")

	// The file holds at most MaxSeenKeys, the unread entry's among them.
	require.NoError(t, in.Close())
	data, err := os.ReadFile(p.Inbox("alpha"))
	require.NoError(t, err)
	var f inboxFile
	require.NoError(t, json.Unmarshal(data, &f))
	require.Len(t, f.Seen, MaxSeenKeys)
	require.Contains(t, f.Seen, keep.Message.Key)
}

func TestInboxCorruptKeptAside(t *testing.T) {
	p := NewPaths(t.TempDir())
	require.NoError(t, EnsureDir(filepath.Dir(p.Inbox("a"))))
	require.NoError(t, os.WriteFile(p.Inbox("a"), []byte(`garbage`), 0o600))
	in, err := OpenInbox(p, "a")
	require.NoError(t, err)
	t.Cleanup(func() { _ = in.Close() }) // before the temp dir goes
	require.Zero(t, in.Len())
	m, _ := filepath.Glob(p.Inbox("a") + ".corrupt-*")
	require.Len(t, m, 1)
}

func TestResolveIdentity(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	id, err := ResolveIdentity(IdentityOptions{Kind: OneShot, Getenv: env(map[string]string{}), Cwd: "/w"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(id.SessionID, "operator-"))
	require.Equal(t, "cli", id.Model)
	require.Equal(t, id.SessionID, id.Name)
	require.NotEmpty(t, id.RuntimeID)

	id, err = ResolveIdentity(IdentityOptions{Kind: OneShot, Getenv: env(map[string]string{
		SessionIDEnv: "alpha", SessionNameEnv: "Alpha", ModelEnv: "gpt", "AGENT_INTERCOM_SCOPE_ID": "Scope_AAAAAAAAAA"}), Cwd: "/w"})
	require.NoError(t, err)
	require.Equal(t, Identity{SessionID: "alpha", Name: "Alpha", Model: "gpt", Cwd: "/w", Scope: "Scope_AAAAAAAAAA",
		RuntimeID: id.RuntimeID, PID: os.Getpid(), StartedAt: id.StartedAt}, id)

	id, err = ResolveIdentity(IdentityOptions{Kind: Harness, Harness: "claude", Getenv: env(map[string]string{
		"CLAUDE_INTERCOM_SESSION_ID": "claude-main", SessionIDEnv: "generic"}), Cwd: "/w"})
	require.NoError(t, err)
	require.Equal(t, "claude-main", id.SessionID)
	require.Equal(t, "claude", id.Model)

	id, err = ResolveIdentity(IdentityOptions{Kind: Harness, Harness: "codex", Getenv: env(map[string]string{}), Cwd: "/w"})
	require.NoError(t, err)
	require.Regexp(t, `^codex-\d+-[0-9a-f]{6}$`, id.SessionID, "a fresh id per unconfigured agent")

	_, err = ResolveIdentity(IdentityOptions{Kind: OneShot, Getenv: env(map[string]string{SessionIDEnv: "bad id!"})})
	require.ErrorIs(t, err, ErrInvalidSessionID)
	_, err = ResolveIdentity(IdentityOptions{Kind: OneShot, Getenv: env(map[string]string{"AGENT_INTERCOM_SCOPE_ID": "Scope_SECRET bad"})})
	require.ErrorIs(t, err, wire.ErrInvalidScope)
	require.NotContains(t, err.Error(), "SECRET")
}

func TestPreview(t *testing.T) {
	require.Equal(t, "a b c", Preview("  a \n\t b   c  ", 80))
	require.Equal(t, strings.Repeat("x", 80), Preview(strings.Repeat("x", 100), 80))
	require.Equal(t, "🚀🚀", Preview("🚀🚀🚀", 5), "UTF-16 units, as the adapters count")
}

func TestOperatorID(t *testing.T) {
	id := OperatorID(func(string) string { return "" })
	require.NoError(t, ValidateSessionID(id))
}

// A deferral replaces the ask rather than changing it: callers read the
// messages Unread and PendingAsks handed out without the inbox's mutex.
func TestMarkDeferredLeavesHandedOutMessagesAlone(t *testing.T) {
	p := NewPaths(t.TempDir())
	in, err := OpenInbox(p, "alpha")
	require.NoError(t, err)
	t.Cleanup(func() { _ = in.Close() })
	stage(in, msg(t, "q1", "ok?", func(m *wire.Message) { m.ExpectsReply = true }))
	asks, unread := in.PendingAsks(), in.Unread()
	require.Len(t, asks, 1)
	require.Same(t, asks[0], unread[0], "one message in both lists")

	require.NoError(t, in.MarkDeferred("q1", beta.ID, 1760000001000))
	require.Zero(t, asks[0].DeferredAt, "a message handed out is not changed")
	now, nowUnread := in.PendingAsks(), in.Unread()
	require.Equal(t, float64(1760000001000), now[0].DeferredAt)
	require.Same(t, now[0], nowUnread[0], "both lists hold the deferred copy")
	require.True(t, slices.Contains(now, nowUnread[0]))
}
