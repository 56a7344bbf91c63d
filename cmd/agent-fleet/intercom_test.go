//go:build !windows

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// as runs agent-fleet as the session id.
func as(t *testing.T, dir, id string, args ...string) *exec.Cmd {
	cmd := agentFleet(t, dir, args...)
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_ID="+id)
	return cmd
}

// stopBroker ends the broker an agent-fleet process started in dir.
// A failed test logs the broker's log first: what the broker saw is most
// of what explains a lost connection or a late delivery.
func stopBroker(t *testing.T, dir string) {
	t.Helper()
	if t.Failed() {
		if log, err := os.ReadFile(intercom.NewPaths(dir).BrokerLog()); err == nil {
			t.Logf("broker log:\n%s", log)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "intercom", "broker.pid"))
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(string(data)); err == nil {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
}

func brokerPID(t *testing.T, dir string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(dir, "intercom", "broker.pid"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(string(data))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return pid
}

// listener is a running `agent-fleet intercom listen --json`.
type listener struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []intercom.MessageView
	done  chan struct{}
}

func startListener(t *testing.T, dir, id string) *listener {
	t.Helper()
	cmd := as(t, dir, id, "intercom", "listen", "--json")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	l := &listener{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			var m intercom.MessageView
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				l.mu.Lock()
				l.lines = append(l.lines, m)
				l.mu.Unlock()
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-l.done
		if t.Failed() {
			t.Logf("listener stderr: %s", stderr.String())
		}
	})
	require.Eventually(t, func() bool { return intercom.HolderAlive(intercom.NewPaths(dir), id) }, 10*time.Second, 10*time.Millisecond,
		"listen holds the session: %s", stderr.String())
	return l
}

func (l *listener) messages() []intercom.MessageView {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]intercom.MessageView(nil), l.lines...)
}

func TestIntercomCLIConversation(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "alpha")

	out, err := as(t, dir, "beta", "intercom", "send", "alpha", "hi").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "Message sent to alpha.\n", string(out))
	require.Eventually(t, func() bool { return len(l.messages()) == 1 }, 5*time.Second, 10*time.Millisecond)
	m := l.messages()[0]
	require.Equal(t, "hi", m.Text)
	require.Equal(t, "beta", m.From.ID)
	require.NotEmpty(t, m.MessageID)
	require.NotZero(t, m.ReceivedAt)

	// beta asks; alpha's pending shows it; alpha replies through its holder.
	ask := as(t, dir, "beta", "intercom", "ask", "alpha", "ok?", "--timeout", "20s")
	askOut := &lockedBuffer{}
	ask.Stdout, ask.Stderr = askOut, askOut
	require.NoError(t, ask.Start())
	var pending intercom.PendingResult
	require.Eventually(t, func() bool {
		out, err := as(t, dir, "alpha", "intercom", "pending", "--json").Output()
		if err != nil || json.Unmarshal(out, &pending) != nil {
			return false
		}
		return len(pending.Asks) == 1
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, "ok?", pending.Asks[0].Preview)
	require.True(t, strings.HasPrefix(pending.Asks[0].AskID, "ask-"))
	text, err := as(t, dir, "alpha", "intercom", "pending").Output()
	require.NoError(t, err)
	require.Contains(t, string(text), pending.Asks[0].AskID+" · beta · ")
	require.Contains(t, string(text), " · ok?")

	out, err = as(t, dir, "alpha", "intercom", "reply", "--ask-id", pending.Asks[0].AskID, "yes").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, ask.Wait(), "%s", askOut.String())
	require.Equal(t, "Reply from beta:\nyes\n", strings.Replace(askOut.String(), "alpha", "beta", 1))
	out, err = as(t, dir, "alpha", "intercom", "pending", "--json").Output()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &pending))
	require.Empty(t, pending.Asks, "answered")

	// Exit codes.
	err = as(t, dir, "beta", "intercom", "send", "nobody", "x").Run()
	requireExit(t, err, exitNotFound)
	err = as(t, dir, "alpha", "intercom", "reply", "nothing to answer").Run()
	requireExit(t, err, exitNotFound)
	err = as(t, dir, "beta", "intercom", "send", "beta", "me").Run()
	requireExit(t, err, exitUsage)
	err = as(t, dir, "bad id!", "intercom", "whoami").Run()
	requireExit(t, err, exitUsage)

	// Status through the holder, and whoami.
	out, err = as(t, dir, "alpha", "intercom", "status", "--json").Output()
	require.NoError(t, err)
	var st intercom.StatusResult
	require.NoError(t, json.Unmarshal(out, &st))
	require.True(t, st.Holder)
	require.True(t, st.Connected)
	out, err = as(t, dir, "alpha", "intercom", "whoami").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "session_id: alpha\n")

	// A one-shot ask with no holder and no answer is cancelled and says so.
	out, err = as(t, dir, "beta", "intercom", "ask", "alpha", "anyone?", "--timeout", "300ms").CombinedOutput()
	requireExit(t, err, exitFailure)
	require.Contains(t, string(out), "the ask was cancelled")
}

func TestIntercomBackToBackOneShots(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "sink")
	for i := 0; i < 15; i++ {
		out, err := as(t, dir, "same", "intercom", "send", "sink", fmt.Sprintf("n%d", i)).CombinedOutput()
		require.NoError(t, err, "send %d: %s", i, out)
	}
	require.Eventually(t, func() bool { return len(l.messages()) == 15 }, 10*time.Second, 10*time.Millisecond)
}

// TestIntercomOneShotsSideBySide: a one-shot command of a session that
// another one still holds (an ask waiting for its reply) is refused (exit
// 4) with what to do; with `intercom listen` holding the session, the same
// commands go through it side by side.
func TestIntercomOneShotsSideBySide(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	bob := startListener(t, dir, "bob")
	ask := as(t, dir, "alice", "intercom", "ask", "bob", "which branch?", "--timeout", "60s")
	require.NoError(t, ask.Start())
	t.Cleanup(func() { _ = ask.Process.Kill(); _ = ask.Wait() })
	require.Eventually(t, func() bool { return len(bob.messages()) == 1 }, 10*time.Second, 20*time.Millisecond, "the ask waits for its reply")
	out, err := as(t, dir, "alice", "intercom", "send", "bob", "hi").CombinedOutput()
	requireExit(t, err, exitConflict)
	require.Contains(t, string(out), "SESSION_ID_IN_USE")
	require.Contains(t, string(out), "start `agent-fleet intercom listen` for it first")
	_ = ask.Process.Kill()
	_ = ask.Wait()

	// One ask per pair is pending at a time (the first is still unresolved),
	// so this one goes to carol.
	carol := startListener(t, dir, "carol")
	startListener(t, dir, "alice")
	ask = as(t, dir, "alice", "intercom", "ask", "carol", "which branch?", "--timeout", "60s")
	require.NoError(t, ask.Start())
	require.Eventually(t, func() bool { return len(carol.messages()) == 1 }, 10*time.Second, 20*time.Millisecond, "the second ask waits for its reply")
	out, err = as(t, dir, "alice", "intercom", "send", "bob", "hi").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return len(bob.messages()) == 2 }, 10*time.Second, 20*time.Millisecond)
}

func TestIntercomAttachmentsAndStdin(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "alpha")
	file := filepath.Join(dir, "notes.md")
	require.NoError(t, os.WriteFile(file, []byte("# notes"), 0o600))
	cmd := as(t, dir, "beta", "intercom", "send", "alpha", "-", "--attach-file", file, "--attach-snippet", "fix="+file, "--json")
	cmd.Stdin = strings.NewReader("text from stdin\n")
	out, err := cmd.Output()
	require.NoError(t, err)
	var res intercom.SendResult
	require.NoError(t, json.Unmarshal(out, &res))
	require.True(t, res.OK)
	require.Eventually(t, func() bool { return len(l.messages()) == 1 }, 5*time.Second, 10*time.Millisecond)
	m := l.messages()[0]
	require.Equal(t, "text from stdin", m.Text)
	require.Len(t, m.Attachments, 2)
	require.Equal(t, "notes.md", m.Attachments[0].Name)
	require.Equal(t, "markdown", m.Attachments[0].Language)
	require.Equal(t, "snippet", m.Attachments[1].Type)
	require.Equal(t, "fix", m.Attachments[1].Name)
}

// The broker starts by itself on first use and is gone 5 s after the last
// session leaves.
func TestIntercomBrokerAutoStartAndIdleExit(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	out, err := as(t, dir, "solo", "intercom", "list").CombinedOutput()
	require.NoError(t, err, "%s", out)
	pid := brokerPID(t, dir)
	require.True(t, intercom.ProcessAlive(pid))
	require.Eventually(t, func() bool { return !intercom.ProcessAlive(pid) }, 12*time.Second, 50*time.Millisecond,
		"the auto-started broker exits after its last session leaves")
	_, err = os.Stat(filepath.Join(dir, "intercom", "broker.sock"))
	require.True(t, os.IsNotExist(err))
}

// Durability: the broker is killed with SIGKILL while a sender streams
// 2,000 messages to a listener; after recovery the listener has every
// message exactly once, in order.
func TestIntercomSurvivesBrokerKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("streams 2,000 messages")
	}
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "alpha")
	p := intercom.NewPaths(dir)
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot,
		Getenv: func(k string) string {
			if k == intercom.SessionIDEnv {
				return "beta"
			}
			return ""
		}})
	require.NoError(t, err)
	ctx := context.Background()
	sender, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: id, Start: testFactory(factory.System()).BrokerStarter(), Reconnect: true})
	require.NoError(t, err)
	defer sender.Close()

	const n = 2000
	killAt := n / 3
	for i := 0; i < n; i++ {
		if i == killAt {
			require.NoError(t, syscall.Kill(brokerPID(t, dir), syscall.SIGKILL))
		}
		req := intercom.SendRequest{To: "alpha", Text: fmt.Sprintf("msg-%04d", i), MessageID: fmt.Sprintf("stream-%04d", i)}
		deadline := time.Now().Add(30 * time.Second)
		for {
			res, err := sender.Send(ctx, req)
			if err == nil && res.OK {
				break
			}
			// Unknown outcome or recipient not back yet: retry the same id;
			// the listener deduplicates what it already stored.
			require.True(t, time.Now().Before(deadline), "message %d never delivered: %v %+v", i, err, res)
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.Eventually(t, func() bool { return len(l.messages()) >= n }, 30*time.Second, 20*time.Millisecond)
	got := l.messages()
	require.Len(t, got, n, "exactly once")
	for i, m := range got {
		require.Equal(t, fmt.Sprintf("msg-%04d", i), m.Text, "in order")
	}
}

// Durability: a listener killed with SIGKILL mid-stream loses nothing the
// broker reported delivered: on restart it prints what it stored but had
// not printed yet.
func TestIntercomSurvivesListenerKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("streams 1,000 messages")
	}
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	first := startListener(t, dir, "alpha")
	p := intercom.NewPaths(dir)
	id, _ := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot,
		Getenv: func(k string) string {
			if k == intercom.SessionIDEnv {
				return "beta"
			}
			return ""
		}})
	ctx := context.Background()
	sender, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: id, Start: testFactory(factory.System()).BrokerStarter(), Reconnect: true})
	require.NoError(t, err)
	defer sender.Close()

	const n = 1000
	delivered := map[string]bool{}
	var second *listener
	for i := 0; i < n; i++ {
		if i == n/3 {
			require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
			<-first.done
		}
		if i == n/2 {
			second = startListener(t, dir, "alpha")
		}
		res, err := sender.Send(ctx, intercom.SendRequest{To: "alpha", Text: fmt.Sprintf("msg-%04d", i)})
		if err == nil && res.OK {
			delivered[res.MessageID] = true
		}
	}
	require.Greater(t, len(delivered), n/2)
	printed := map[string]bool{}
	require.Eventually(t, func() bool {
		for _, l := range []*listener{first, second} {
			for _, m := range l.messages() {
				printed[m.MessageID] = true
			}
		}
		for id := range delivered {
			if !printed[id] {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "every delivered message is printed")
}

// send, ask and reply refuse a message without text — as an argument, on
// stdin (piped, or with "-"), or only whitespace — as a usage error, and
// deliver nothing.
func TestIntercomRefusesEmptyMessages(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "alpha")
	startListener(t, dir, "beta")
	askOut := &lockedBuffer{}
	beta := as(t, dir, "beta", "intercom", "ask", "alpha", "ready?", "--timeout", "60s")
	beta.Stdout, beta.Stderr = askOut, askOut
	require.NoError(t, beta.Start())
	t.Cleanup(func() { _ = beta.Process.Kill(); _ = beta.Wait() })
	require.Eventually(t, func() bool {
		for _, m := range l.messages() {
			if m.ExpectsReply {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)

	cases := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		{"send with an empty argument", []string{"send", "alpha", ""}, "", "the message is empty"},
		{"send with empty piped stdin", []string{"send", "alpha"}, "", "the message is empty"},
		{"send - with blank lines", []string{"send", "alpha", "-"}, "\n\n", "the message is empty"},
		{"send with whitespace", []string{"send", "alpha", " \t "}, "", "the message is only whitespace"},
		{"ask with an empty argument", []string{"ask", "alpha", "", "--timeout", "1s"}, "", "the message is empty"},
		{"ask with whitespace on stdin", []string{"ask", "alpha", "-", "--timeout", "1s"}, "  \n", "the message is only whitespace"},
	}
	for _, c := range cases {
		cmd := as(t, dir, "gamma", append([]string{"intercom"}, c.args...)...)
		cmd.Stdin = strings.NewReader(c.stdin)
		out, err := cmd.CombinedOutput()
		requireExit(t, err, exitUsage)
		require.Contains(t, string(out), c.want+": give its text as an argument, or pipe it on stdin", c.name)
	}
	for _, args := range [][]string{{"reply", ""}, {"reply"}, {"reply", "   "}} {
		cmd := as(t, dir, "alpha", append([]string{"intercom"}, args...)...)
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		requireExit(t, err, exitUsage)
		require.Contains(t, string(out), ": give its text as an argument, or pipe it on stdin", "%v", args)
	}
	out, err := as(t, dir, "alpha", "intercom", "reply", "yes").CombinedOutput()
	require.NoError(t, err, "the ask was still open: %s", out)
	require.NoError(t, beta.Wait(), "%s", askOut.String())
	require.Equal(t, "Reply from alpha:\nyes\n", askOut.String())
	for _, m := range l.messages() {
		require.NotEmpty(t, strings.TrimSpace(m.Text), "nothing empty reached alpha: %+v", m)
	}
}

// An agent directory so deep that broker.sock exceeds the kernel's socket
// path limit is refused at once, naming the path and the limit, instead of
// starting a broker that cannot bind and waiting for it.
func TestSocketPathTooLongIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(shortDir(t), strings.Repeat("d", 50), strings.Repeat("e", 50))
	sock := filepath.Join(dir, "intercom", "broker.sock")
	require.Greater(t, len(sock), intercom.MaxSocketPathBytes)
	for _, args := range [][]string{{"intercom", "send", "alpha", "hi"}, {"intercom", "list"}} {
		out, err := as(t, dir, "beta", args...).CombinedOutput()
		requireExit(t, err, exitUsage)
		require.Contains(t, string(out), "socket path too long: "+sock, "%v", args)
		require.Contains(t, string(out), fmt.Sprintf("the limit is %d", intercom.MaxSocketPathBytes), "%v", args)
		require.Contains(t, string(out), "PI_CODING_AGENT_DIR", "%v", args)
		require.NotContains(t, string(out), "did not answer", "%v: no broker was started", args)
		require.NoFileExists(t, filepath.Join(dir, "intercom", "broker.log"), "no broker was started")
		require.NoDirExists(t, filepath.Join(dir, "intercom", "inbox"), "nothing was created in the directory")
		require.NoDirExists(t, filepath.Join(dir, "intercom", "outbox"), "nothing was created in the directory")
	}
}

// An agent directory where broker.sock fits but a holder socket does not
// is refused at once by the commands that hold a session (listen, mcp),
// as spawn refuses it, instead of holding a session that no other
// command can act through.
func TestHolderSocketPathTooLongIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	base := shortDir(t)
	dir := filepath.Join(base, strings.Repeat("h", 80-len(base)-1))
	p := intercom.NewPaths(dir)
	require.NoError(t, intercom.CheckSocketPath(p.BrokerSocket()))
	t.Cleanup(func() { stopBroker(t, dir) })
	for _, args := range [][]string{{"intercom", "listen"}, {"mcp"}} {
		sock := p.HolderSocket("holder-long")
		require.Error(t, intercom.CheckSocketPath(sock))
		cmd := as(t, dir, "holder-long", args...)
		cmd.Stdin = strings.NewReader("")
		var out lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("%v still runs: %s", args, out.String())
		}
		requireExit(t, err, exitUsage)
		require.Contains(t, out.String(), "socket path too long: "+sock, "%v", args)
		require.Contains(t, out.String(), fmt.Sprintf("the limit is %d", intercom.MaxSocketPathBytes), "%v", args)
		require.NotContains(t, out.String(), "level=WARN", "%v", args)
	}
}

// A recipient that cannot acknowledge for 8 s — a paused worker is frozen
// like this stopped listener — leaves the send's outcome unknown (exit 8),
// not failed: it reads the message, once, when it runs again.
func TestIntercomUnacknowledgedSendIsNotCalledUndelivered(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "frozen")
	require.NoError(t, l.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = l.cmd.Process.Signal(syscall.SIGCONT)
		}
	})

	out, err := as(t, dir, "src", "intercom", "send", "frozen", "while frozen").CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, exitUnknown, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), `message to "frozen" was not acknowledged: DELIVERY_TIMEOUT`)
	require.Contains(t, string(out), "may still read it")
	require.NotContains(t, string(out), "not delivered")

	require.NoError(t, l.cmd.Process.Signal(syscall.SIGCONT))
	stopped = false
	require.Eventually(t, func() bool { return len(l.messages()) == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "while frozen", l.messages()[0].Text)
	time.Sleep(200 * time.Millisecond)
	require.Len(t, l.messages(), 1, "read once")
}

// A recipient that goes away after it was handed the message, before it
// acknowledged it, may have read it: the send's outcome is unknown (exit
// 8), not "not delivered" — a host that stops answering looks the same.
func TestIntercomSendToARecipientThatLeftUnacknowledged(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "anyone") // the broker runs
	mute := intercomtest.Register(t, intercom.NewPaths(dir), "mute", intercomtest.RegisterOptions{})
	mute.SkipBroadcasts = true
	send := as(t, dir, "src", "intercom", "send", "mute", "read, never acknowledged")
	var out bytes.Buffer
	send.Stdout, send.Stderr = &out, &out
	require.NoError(t, send.Start())
	mute.Expect(wire.TypeMessage)
	require.NoError(t, mute.Conn.Close())
	err := send.Wait()
	requireExit(t, err, exitUnknown)
	require.Contains(t, out.String(), `message to "mute" was not acknowledged: RECIPIENT_DISCONNECTED`)
	require.Contains(t, out.String(), "may have read it")
	require.NotContains(t, out.String(), "not delivered")
}

// A second ask to a session while the first is still open is refused by
// the broker (ASK_ALREADY_PENDING), a conflict: exit 4.
func TestIntercomSecondAskIsAConflict(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startListener(t, dir, "answerer")
	startListener(t, dir, "asker") // holds the first ask open past its --timeout
	out, err := as(t, dir, "asker", "intercom", "ask", "answerer", "first?", "--timeout", "1s").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = as(t, dir, "asker", "intercom", "ask", "answerer", "second?", "--timeout", "1s").CombinedOutput()
	requireExit(t, err, exitConflict)
	require.Contains(t, string(out), "ASK_ALREADY_PENDING")
}

// A target no session can have is refused as a usage error about TO, on
// its own and through a holder, before anything is sent: not an oversized
// message, not a send to a name with a newline in it.
func TestIntercomRefusesBadTargets(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	l := startListener(t, dir, "peer4")
	startListener(t, dir, "alpha")
	for _, id := range []string{"gamma", "alpha"} { // alpha acts through its holder
		for to, want := range map[string]string{
			"peer4\n":                   `to "peer4\n" holds a control character (U+000A)`,
			strings.Repeat("x", 100000): "to is 100000 characters long, over the 512 a target may have",
		} {
			for _, verb := range []string{"send", "ask"} {
				out, err := as(t, dir, id, "intercom", verb, to, "hi").CombinedOutput()
				requireExit(t, err, exitUsage)
				require.Contains(t, string(out), want, "%s %s", id, verb)
				require.NotContains(t, string(out), "once encoded")
			}
		}
	}
	require.Empty(t, l.messages(), "nothing reached peer4")
}
