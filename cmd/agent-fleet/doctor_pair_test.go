//go:build linux

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// pairResult runs doctor --pair --json as the operator and decodes it.
func pairResult(t *testing.T, dir string, env []string, args ...string) (intercom.PairResult, error) {
	t.Helper()
	cmd := as(t, dir, "operator-test", append([]string{"doctor", "--pair", "--json"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	var res intercom.PairResult
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)
	return res, err
}

// legs are the names of a pair test's legs that passed.
func passedLegs(res intercom.PairResult) []string {
	var names []string
	for _, l := range res.Legs {
		if l.OK {
			names = append(names, l.Name)
		}
	}
	return names
}

// doctor --pair between two live holders (a listen and an mcp): the ask,
// B's acknowledgement, B's reply and A's receipt, each reported with its
// time; B's other mail stays unread and neither holder prints the probe.
// A session without a holder, or A twice, is refused before anything is
// sent.
func TestDoctorPairTwoHolders(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	p := intercom.NewPaths(dir)
	alice := startTextListener(t, dir, "alice")
	mcpProcess(t, dir, "bob")
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, "alice") && intercom.HolderAlive(p, "bob") }, 20*time.Second, 10*time.Millisecond)
	out, err := as(t, dir, "carol", "intercom", "send", "bob", "real mail for bob").CombinedOutput()
	require.NoError(t, err, "%s", out)

	res, err := pairResult(t, dir, nil, "alice", "bob")
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	require.Equal(t, "alice", res.A)
	require.Equal(t, "bob", res.B)
	require.False(t, res.BAnswers)
	require.Equal(t, []string{"ask", "ack", "reply", "answer"}, passedLegs(res))
	require.Contains(t, res.Legs[0].Detail, "bob's holder stored and acknowledged it")
	require.Contains(t, res.Legs[3].Detail, "alice's ask returned bob's reply")

	// The text report: a verdict and one line per leg with its time.
	text, err := as(t, dir, "operator-test", "doctor", "--pair", "alice", "bob").Output()
	require.NoError(t, err)
	rows := lines(string(text))
	require.Equal(t, "Pair test alice → bob: passed", rows[0])
	require.Len(t, rows, 5)
	for i, leg := range []string{"ask", "ack", "reply", "answer"} {
		require.Regexp(t, `^OK    `+leg+` +\d+ ms  `, rows[i+1])
	}

	// Bob's own mail is untouched; the probes left nothing unread or
	// pending on either side, and alice's listen printed none of them.
	st, err := as(t, dir, "bob", "intercom", "status", "--json").Output()
	require.NoError(t, err)
	var status intercom.StatusResult
	require.NoError(t, json.Unmarshal(st, &status))
	require.Equal(t, 1, status.Unread)
	require.Equal(t, 0, status.PendingAsks)
	pending, err := as(t, dir, "bob", "intercom", "pending").Output()
	require.NoError(t, err)
	require.Contains(t, string(pending), "real mail for bob")
	require.NotContains(t, string(pending), "doctor --pair")
	require.NotContains(t, alice.stdout.String(), "doctor --pair")

	// B held by a plain intercom listen, which prints and consumes what
	// arrives: the ask is read by B's own listener, and the test passes.
	dave := startTextListener(t, dir, "dave")
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, "dave") }, 20*time.Second, 10*time.Millisecond)
	for range 3 {
		res, err = pairResult(t, dir, nil, "alice", "dave")
		require.NoError(t, err, "%+v", res)
		require.Equal(t, []string{"ask", "ack", "reply", "answer"}, passedLegs(res))
	}
	require.Contains(t, dave.stdout.String(), "doctor --pair", "dave's listen printed the probe it consumed")

	// Refusals: exit 3 for a session with no holder, 2 for A twice.
	cmd := as(t, dir, "operator-test", "doctor", "--pair", "alice", "nobody")
	msg, err := cmd.CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(msg), `"nobody" has no live holder on this machine`)
	msg, err = as(t, dir, "operator-test", "doctor", "--pair", "alice", "alice").CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(msg), "a pair test needs two sessions")
	msg, err = as(t, dir, "operator-test", "doctor", "--pair", "alice").CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(msg), "usage: agent-fleet doctor --pair A B")
}

// doctor --pair with a fleet worker (a real unit, its shim and a harness
// stand-in): the worker's holder admits only its own processes, so the
// worker answers the ask with a turn of its own; a worker as A is refused
// with the reason.
func TestDoctorPairWithAWorker(t *testing.T) {
	t.Parallel()
	w := newHarnessWorld(t)
	w.spawn("pw", "claude")
	require.Eventually(t, func() bool { return intercom.HolderAlive(intercom.NewPaths(w.dir), "boss") }, 20*time.Second, 10*time.Millisecond)

	res, err := pairResult(t, w.dir, nil, "boss", "pw")
	require.NoError(t, err, "%+v", res)
	require.True(t, res.OK, "%+v", res)
	require.True(t, res.BAnswers, "the worker answered itself")
	require.Equal(t, []string{"ask", "answer"}, passedLegs(res))
	require.Contains(t, res.Legs[1].Detail, "pw answered the ask itself")
	require.Contains(t, res.Legs[1].Detail, "done: ", "the reply is the worker turn's final answer")
	require.Equal(t, 1, w.status("pw").Turns.Turns, "one turn, for the ask")

	msg, err := as(t, w.dir, "operator-test", "doctor", "--pair", "pw", "boss").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(msg), `"pw" is live, but its holder closed the connection (a fleet worker's holder admits only the worker's own processes)`)
	require.True(t, strings.Contains(string(msg), "a worker can be B"), "%s", msg)

	// A worker that runs a command cannot answer: refused at once, not
	// after the timeout.
	w.spawnCmd("px", "exec", []string{"sleep", "300"})
	t.Cleanup(func() { _, _ = w.cli("stop", "px", "--kill") })
	msg, err = as(t, w.dir, "operator-test", "doctor", "--pair", "boss", "px").CombinedOutput()
	requireExit(t, err, exitUsage) // a test that ran and timed out exits 1
	require.Contains(t, string(msg), `"px" is a worker that runs a command`)
}
