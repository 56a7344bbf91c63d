//go:build !windows

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// textListener is a running `agent-fleet intercom listen` (text, or
// --json) whose stdout and stderr are kept apart.
type textListener struct {
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	done   chan struct{}
	err    error
}

func startTextListener(t *testing.T, dir, id string, args ...string) *textListener {
	t.Helper()
	cmd := as(t, dir, id, append([]string{"intercom", "listen"}, args...)...)
	l := &textListener{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = l.stdout, l.stderr
	require.NoError(t, cmd.Start())
	go func() { l.err = cmd.Wait(); close(l.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-l.done
		if t.Failed() {
			t.Logf("listen %s stdout: %s\nstderr: %s", id, l.stdout.String(), l.stderr.String())
		}
	})
	return l
}

// exited waits for the listener's end and returns its error.
func (l *textListener) exited(t *testing.T) error {
	t.Helper()
	select {
	case <-l.done:
		return l.err
	case <-time.After(30 * time.Second):
		t.Fatalf("listen did not exit: %s", l.stderr.String())
		return nil
	}
}

// A second listen on a session that a listen already consumes is refused
// (exit 4) naming the first one's pid, and the first keeps printing
// everything; once the first is killed with SIGKILL, a new listen holds
// the session and prints what arrives. Each listen says on stderr, never
// on stdout, that it runs.
func TestIntercomListenTwiceAndAfterKill(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	p := intercom.NewPaths(dir)
	first := startTextListener(t, dir, "alpha")
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, "alpha") }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return first.stderr.String() != "" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "Listening as alpha on "+p.BrokerSocket()+"; Ctrl-C to stop.\n", first.stderr.String())
	require.Empty(t, first.stdout.String(), "stdout carries only messages")

	second := startTextListener(t, dir, "alpha", "--json")
	requireExit(t, second.exited(t), exitConflict)
	require.Contains(t, second.stderr.String(),
		fmt.Sprintf(`session "alpha" is already being listened to by pid %d`, first.cmd.Process.Pid))
	require.NotContains(t, second.stderr.String(), "Listening as")
	var refusal struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(second.stdout.String()), &refusal), "--json prints only the error object: %s", second.stdout.String())
	require.False(t, refusal.OK)
	require.Contains(t, refusal.Error, `session "alpha" is already being listened to by pid`)

	out, err := as(t, dir, "beta", "intercom", "send", "alpha", "one").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return strings.Contains(first.stdout.String(), "one") }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.done
	third := startTextListener(t, dir, "alpha", "--json")
	require.Eventually(t, func() bool { return strings.HasPrefix(third.stderr.String(), "Listening as alpha on ") }, 20*time.Second, 20*time.Millisecond,
		"the next listen holds the session once the killed one is gone")
	require.Eventually(t, func() bool {
		out, err := as(t, dir, "beta", "intercom", "send", "alpha", "two").CombinedOutput()
		return err == nil && string(out) == "Message sent to alpha.\n"
	}, 20*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(third.stdout.String(), `"text":"two"`) }, 10*time.Second, 10*time.Millisecond)
	require.NotContains(t, third.stdout.String(), "Listening", "stdout stays JSON only")
}

// An ask left open by its timeout, from a session a listen consumes, says
// that the late reply will be printed by that listen — which takes it out
// of pending — and the listen prints it.
func TestIntercomAskLeftOpenSaysTheListenPrintsTheReply(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	p := intercom.NewPaths(dir)
	asker := startTextListener(t, dir, "asker")
	answerer := startTextListener(t, dir, "answerer")
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, "asker") && intercom.HolderAlive(p, "answerer") }, 20*time.Second, 10*time.Millisecond)
	out, err := as(t, dir, "asker", "intercom", "ask", "answerer", "late?", "--timeout", "1s").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("its reply will be printed by the listen consuming this session's messages (pid %d), not kept in pending", asker.cmd.Process.Pid))
	require.Eventually(t, func() bool { return strings.Contains(answerer.stdout.String(), "late?") }, 10*time.Second, 10*time.Millisecond)
	out, err = as(t, dir, "answerer", "intercom", "reply", "late reply").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return strings.Contains(asker.stdout.String(), "late reply") }, 10*time.Second, 10*time.Millisecond)
}

// A listen that streams from another process's holder (an agent-fleet mcp
// of the same id) goes on when that process is killed with SIGKILL: it
// takes the session over and prints what arrives next, instead of exiting
// with "not connected to the intercom broker".
func TestIntercomListenTakesOverFromAKilledHolder(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	p := intercom.NewPaths(dir)
	holder := as(t, dir, "alpha", "mcp")
	stdin, err := holder.StdinPipe() // kept open: the server runs until killed
	require.NoError(t, err)
	holderErr := &lockedBuffer{}
	holder.Stderr = holderErr
	require.NoError(t, holder.Start())
	var reap sync.Once
	reaped := make(chan struct{})
	wait := func() { reap.Do(func() { _ = holder.Wait(); close(reaped) }) }
	t.Cleanup(func() { _ = holder.Process.Kill(); wait(); stdin.Close() })
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, "alpha") }, 20*time.Second, 10*time.Millisecond, "%s", holderErr.String())

	l := startTextListener(t, dir, "alpha", "--json")
	require.Eventually(t, func() bool { return l.stderr.String() != "" }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "Listening as alpha through the process that holds it, on "+p.BrokerSocket()+"; Ctrl-C to stop.\n", l.stderr.String())
	out, err := as(t, dir, "beta", "intercom", "send", "alpha", "before").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return strings.Contains(l.stdout.String(), `"text":"before"`) }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, holder.Process.Signal(syscall.SIGKILL))
	wait()
	require.Eventually(t, func() bool {
		return strings.Contains(l.stderr.String(), "The process that held alpha went away; listen took the session over")
	},
		20*time.Second, 20*time.Millisecond)
	select {
	case <-l.done:
		t.Fatalf("listen exited: %v: %s", l.err, l.stderr.String())
	default:
	}
	require.Eventually(t, func() bool {
		out, err := as(t, dir, "beta", "intercom", "send", "alpha", "after").CombinedOutput()
		return err == nil && string(out) == "Message sent to alpha.\n"
	}, 20*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(l.stdout.String(), `"text":"after"`) }, 10*time.Second, 10*time.Millisecond)
	sc := bufio.NewScanner(strings.NewReader(l.stdout.String()))
	for sc.Scan() {
		require.True(t, json.Valid(sc.Bytes()), "stdout is one JSON object per line: %q", sc.Text())
	}
	require.True(t, intercom.HolderAlive(p, "alpha"), "listen holds the session now")
}

// A session named with terminal escapes and a newline, and a message
// full of them, reach people escaped — list, listen, pending, the status
// summary in list — and JSON exactly.
func TestIntercomEscapesPeerControlledText(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	const name = "evil\x1b[31mred\nforged"
	startNamedListener(t, dir, "evil", name)
	out, err := as(t, dir, "evil", "intercom", "set-summary", "busy\x1b[2J").CombinedOutput()
	require.NoError(t, err, "%s", out)

	var text string
	require.Eventually(t, func() bool {
		out, err := as(t, dir, "beta", "intercom", "list").Output()
		text = string(out)
		return err == nil && strings.Contains(text, "busy")
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, listTable("evil^[[31mred^Jforged (evil)", "cli", "busy^[[2J", mustGetwd(t)+" (same cwd)"), text)
	out, err = as(t, dir, "beta", "intercom", "list", "--json").Output()
	require.NoError(t, err)
	var list intercom.ListResult
	require.NoError(t, json.Unmarshal(out, &list))
	require.Equal(t, name, list.Sessions[0].Name, "JSON stays exact")
	require.Equal(t, "busy\x1b[2J", list.Sessions[0].Status)

	// listen: each line of the text indented under its header, escapes shown.
	l := startTextListener(t, dir, "alpha")
	require.Eventually(t, func() bool { return intercom.HolderAlive(intercom.NewPaths(dir), "alpha") }, 10*time.Second, 10*time.Millisecond)
	cmd := as(t, dir, "evil", "intercom", "send", "alpha", "-")
	cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_NAME="+name)
	cmd.Stdin = strings.NewReader("first\n[00:00:00] alice:\n\x1b[2Jwiped\r")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool { return strings.Contains(l.stdout.String(), "wiped") }, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, l.stdout.String(), "] evil^[[31mred^Jforged (evil):\n  first\n  [00:00:00] alice:\n  ^[[2Jwiped^M\n")
	require.NotContains(t, l.stdout.String(), "\x1b")

	// pending of a session whose holder keeps messages unread.
	startTextListener(t, dir, "delta", "--json", "--keep-unread")
	require.Eventually(t, func() bool { return intercom.HolderAlive(intercom.NewPaths(dir), "delta") }, 10*time.Second, 10*time.Millisecond)
	out, err = as(t, dir, "evil", "intercom", "send", "delta", "two\nlines \x1b[5m").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var pending string
	require.Eventually(t, func() bool {
		out, _ := as(t, dir, "delta", "intercom", "pending").Output()
		pending = string(out)
		return strings.Contains(pending, "lines")
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, "- evil^[[31mred^Jforged (evil): two\n  lines ^[[5m\n", pending)
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return wd
}

// In a scope, list --include-self names the one-shot session by the id
// whoami prints (operator-<user>), not by its first 8 characters
// ("operator", which every operator id starts with).
func TestIntercomListShowsTheIDWhoamiShows(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	scoped := func(args ...string) *exec.Cmd {
		cmd := agentFleet(t, dir, args...)
		cmd.Env = append(cmd.Env, "AGENT_INTERCOM_SESSION_ID=", "AGENT_INTERCOM_SCOPE_ID=scope-of-the-test-0123")
		return cmd
	}
	out, err := scoped("intercom", "whoami", "--json").Output()
	require.NoError(t, err)
	var who intercom.WhoamiResult
	require.NoError(t, json.Unmarshal(out, &who))
	require.True(t, strings.HasPrefix(who.SessionID, "operator-"), who.SessionID)
	out, err = scoped("intercom", "list", "--include-self").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, listTable(who.SessionID, "cli", "-", mustGetwd(t)+" (self, same cwd)"), string(out))

	named := scoped("intercom", "list", "--include-self")
	named.Env = append(named.Env, "AGENT_INTERCOM_SESSION_NAME=Op")
	out, err = named.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, listTable("Op ("+who.SessionID+")", "cli", "-", mustGetwd(t)+" (self, same cwd)"), string(out))
}

// list --where that leaves every connected session out says so, with how
// many others are connected, instead of that none is.
func TestIntercomListWhereSaysWhatItLeftOut(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startNamedListener(t, dir, "alpha", "alpha")
	startNamedListener(t, dir, "gamma", "gamma")
	elsewhere := func(args ...string) *exec.Cmd {
		cmd := as(t, dir, "beta", args...)
		cmd.Dir = dir // not the listeners' directory, nor in a git repository
		return cmd
	}
	for _, where := range []string{"repo", "directory"} {
		out, err := elsewhere("intercom", "list", "--where", where).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "No sessions match --where "+where+" (2 others connected).\n", string(out))
		out, err = elsewhere("intercom", "list", "--where", where, "--json").Output()
		require.NoError(t, err)
		require.JSONEq(t, `{"sessions":[],"others":2}`, string(out))
	}
	out, err := elsewhere("intercom", "list").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "\nalpha ")
}

// The CLI's ask waits as long by default as intercom_ask does, and its
// help says so.
func TestIntercomAskDefaultTimeout(t *testing.T) {
	t.Parallel()
	require.Equal(t, 45*time.Second, intercom.AskTimeout)
	out, err := agentFleet(t, shortDir(t), "intercom", "ask", "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--timeout duration             how long to wait for the reply, at most 2m0s (intercom_ask's default too) (default 45s)")
	require.Contains(t, string(out), "waiting up to --timeout (45s by\ndefault, as intercom_ask does; at most 2m)")
}

// pending --inbox-of a session that is not connected exits 3 (not
// found), from a one-shot and through the caller's holder alike.
func TestIntercomInboxOfNobodyIsNotFound(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	out, err := as(t, dir, "asker", "intercom", "pending", "--inbox-of", "nosuch").CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), `no session "nosuch" is connected`)
	startNamedListener(t, dir, "asker", "asker")
	out, err = as(t, dir, "asker", "intercom", "pending", "--inbox-of", "nosuch").CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), `no session "nosuch" is connected`)

	// An empty value, or the caller's own id, is a usage error, not the
	// caller's own pending mail shown or a refusal as no coworker.
	out, err = as(t, dir, "asker", "intercom", "pending", "--inbox-of", "").CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "--inbox-of is empty")
	out, err = as(t, dir, "asker", "intercom", "pending", "--inbox-of", "asker").CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "is your own inbox: agent-fleet intercom pending shows it")
}

// doctor counts the broker's sessions in words that fit the number.
func TestDoctorCountsOneSession(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	startNamedListener(t, dir, "alpha", "alpha")
	out, _ := agentFleet(t, dir, "doctor").CombinedOutput() // exits 1 where a check fails: only the broker line counts here
	require.Regexp(t, `(?m)^OK +broker +agent-fleet broker pid \d+, 1 session$`, string(out))
}

// listTable is `intercom list`'s table of one session, as printed.
func listTable(session, model, status, cwd string) string {
	pad := func(s, head string) string { return s + strings.Repeat(" ", max(len(s), len(head))+2-len(s)) }
	head := pad("SESSION", session) + pad("MODEL", model) + pad("STATUS", status) + "CWD\n"
	return head + pad(session, "SESSION") + pad(model, "MODEL") + pad(status, "STATUS") + cwd + "\n"
}

// lines are the complete lines of s.
func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// listen --notify-lines prints one short line per batch of new mail and
// leaves the mail unread: the three messages waiting when it starts are
// one batch, a later one is the next; after it took the session over from
// a killed holder it does not announce the same messages again.
func TestIntercomListenNotifyLines(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	p := intercom.NewPaths(dir)
	holder := startTextListener(t, dir, "bob", "--keep-unread")
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, "bob") }, 20*time.Second, 10*time.Millisecond)
	send := func(from, text string) {
		t.Helper()
		out, err := as(t, dir, from, "intercom", "send", "bob", text).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	send("alice", "the parser is ready for review, see src/parse.go and its tests in src/parse_test.go")
	send("carol", "two")
	send("alice", "three")
	require.Eventually(t, func() bool { return strings.Contains(holder.stdout.String(), "three") }, 10*time.Second, 10*time.Millisecond)

	notify := startTextListener(t, dir, "bob", "--notify-lines")
	asJSON := startTextListener(t, dir, "bob", "--notify-lines", "--json")
	first := `3 new intercom messages from alice (2), carol — first: "the parser is ready for review, see src/parse.go and its tes…" — read them with agent-fleet intercom pending.`
	require.Eventually(t, func() bool { return notify.stdout.String() != "" && asJSON.stdout.String() != "" }, 20*time.Second, 10*time.Millisecond)
	send("carol", "four")
	second := `New intercom message from carol: "four" — read it with agent-fleet intercom pending.`
	require.Eventually(t, func() bool { return len(lines(notify.stdout.String())) == 2 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{first, second}, lines(notify.stdout.String()), "one line per batch")
	require.Equal(t, "Listening as bob through the process that holds it, on "+p.BrokerSocket()+"; Ctrl-C to stop.\n", notify.stderr.String())

	require.Eventually(t, func() bool { return len(lines(asJSON.stdout.String())) == 2 }, 20*time.Second, 10*time.Millisecond)
	var notice struct {
		Text     string   `json:"text"`
		Messages int      `json:"messages"`
		Asks     int      `json:"asks"`
		From     []string `json:"from"`
		IDs      []string `json:"messageIds"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines(asJSON.stdout.String())[0]), &notice))
	require.Equal(t, first, notice.Text)
	require.Equal(t, 3, notice.Messages)
	require.Equal(t, []string{"alice", "carol"}, notice.From)
	require.Len(t, notice.IDs, 3)
	require.NoError(t, asJSON.cmd.Process.Kill())
	<-asJSON.done

	// The holder goes: the notify listen takes the session over, and the
	// four unread messages it lists again are not news.
	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGKILL))
	<-holder.done
	require.Eventually(t, func() bool {
		return strings.Contains(notify.stderr.String(), "The process that held bob went away; listen took the session over")
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		out, err := as(t, dir, "alice", "intercom", "send", "bob", "five").CombinedOutput()
		return err == nil && string(out) == "Message sent to bob.\n"
	}, 20*time.Second, 100*time.Millisecond)
	require.Eventually(t, func() bool { return len(lines(notify.stdout.String())) == 3 }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, `New intercom message from alice: "five" — read it with agent-fleet intercom pending.`, lines(notify.stdout.String())[2])

	// Nothing was consumed: the inbox is the source of truth.
	out, err := as(t, dir, "bob", "intercom", "status", "--json").Output()
	require.NoError(t, err)
	var st intercom.StatusResult
	require.NoError(t, json.Unmarshal(out, &st))
	require.Equal(t, 5, st.Unread)
}
