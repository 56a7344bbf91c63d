//go:build !windows

package intercom

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// crashChildEnv makes the test binary an inbox receiver that runs until it
// is killed (runCrashChild).
const crashChildEnv = "AGENT_FLEET_INBOX_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		runCrashChild(dir)
		return
	}
	if dir := os.Getenv(outboxCrashChildEnv); dir != "" {
		runOutboxCrashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// runCrashChild receives messages m<from>, m<from+1>, … into the inbox of
// "rx" as a session does — staged, flushed, only then acknowledged (the
// "ack" line) — and marks some read ("read" lines), until it is killed.
// It first receives again the few messages before from: a sender replaying
// its outbox after the crash.
func runCrashChild(dir string) {
	from, _ := strconv.Atoi(os.Getenv(crashChildEnv + "_FROM"))
	in, err := OpenInbox(NewPaths(dir), "rx")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	sender := wire.SessionInfo{ID: "tx", Cwd: "/", Model: "m", Origin: "local"}
	raw := sender.AppendJSON(nil)
	for i := max(0, from-5); ; i++ {
		m := wire.Message{ID: fmt.Sprintf("m%d", i), Timestamp: 1, Text: strings.Repeat("x", 200+i%300), ExpectsReply: i%5 == 0}
		info, _ := wire.ParseMessage(m.AppendJSON(nil))
		res := in.Stage(raw, sender, info, 1)
		if err := in.Flush(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if res.Conflict {
			fmt.Println("error conflict", m.ID)
			os.Exit(1)
		}
		fmt.Println("ack", m.ID)
		if i%7 == 0 {
			unread := in.Unread()
			if len(unread) > 3 {
				_ = in.Consume(unread[0].Key, unread[1].Key)
				fmt.Println("read", unread[0].Message.ID, unread[1].Message.ID)
			}
		}
	}
}

// TestInboxSurvivesKill: a receiver killed with SIGKILL at random moments,
// five times over the same inbox, loses no message it acknowledged and
// never holds one twice; the sender's replays of acknowledged messages are
// recognised. After the last, the inbox file alone (the Pi format) holds
// everything.
func TestInboxSurvivesKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := NewPaths(dir)
	acked := map[string]bool{}
	next := 0
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 1; round <= 5; round++ {
		killChildAfter(t, crashChildEnv, dir, next, 30+rng.IntN(150), func(f []string) bool {
			if f[0] != "ack" {
				return false
			}
			acked[f[1]] = true
			return true
		})

		in, err := OpenInbox(p, "rx")
		require.NoError(t, err)
		keys := map[string]bool{}
		for _, e := range in.Unread() {
			require.False(t, keys[e.Key], "round %d: %s held twice", round, e.Message.ID)
			keys[e.Key] = true
		}
		in.mu.Lock()
		for id := range acked {
			_, seen := in.seenSet["tx\x00"+id]
			require.True(t, seen, "round %d: acknowledged %s was lost", round, id)
		}
		in.mu.Unlock()
		next = len(acked)
		if round%2 == 0 {
			// A clean open and close in between compacts the journal.
			require.NoError(t, in.Close())
		}
	}
	in, err := OpenInbox(p, "rx")
	require.NoError(t, err)
	unread := len(in.Unread())
	asks := len(in.PendingAsks())
	require.NoError(t, in.Close())
	_, err = os.Stat(journalPath(p.Inbox("rx")))
	require.ErrorIs(t, err, os.ErrNotExist)
	data, err := os.ReadFile(p.Inbox("rx"))
	require.NoError(t, err)
	file := newInbox("")
	require.NoError(t, file.load(data, true), "the file alone is a version 3 inbox")
	require.Len(t, file.Unread(), unread)
	require.Len(t, file.PendingAsks(), asks)
	require.Positive(t, asks)
}

// killChildAfter runs the test binary as the crash child that env names,
// on dir from message number from, and kills it (SIGKILL) once note has
// counted want of its output lines; note sees every line it printed,
// split into fields, those printed before it died too, and says whether
// the line counts. A line "error …" fails the test.
func killChildAfter(t *testing.T, env, dir string, from, want int, note func(fields []string) bool) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env+"="+dir, env+"_FROM="+strconv.Itoa(from))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(out)
	line := func() {
		f := strings.Fields(sc.Text())
		require.NotEqual(t, "error", f[0], sc.Text())
		if note(f) {
			want--
		}
	}
	for want > 0 && sc.Scan() {
		line()
	}
	require.Zero(t, want, "the child stopped early")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	// What it printed before it died happened too.
	for sc.Scan() {
		line()
	}
	_ = cmd.Wait()
}
