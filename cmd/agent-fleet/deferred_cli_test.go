//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// stopBrokerAndWait ends the broker and waits until its process is gone,
// so that the next send meets a broker that never saw the old sessions.
func stopBrokerAndWait(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "intercom", "broker.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH }, 30*time.Second, 20*time.Millisecond)
}

func sessionStatus(t *testing.T, w *harnessWorld) intercom.StatusResult {
	t.Helper()
	var st intercom.StatusResult
	out := w.must("intercom", "status", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// A worker whose session is not on the broker — frozen while the broker
// restarted, so that it registers again only when resumed — gets what
// was sent to it meanwhile with its next turn, exactly once, under the
// heading of its first turn; the sender sees each message queued, then
// delivered. The 51st message waiting is refused, and the 50 before it
// reach a later turn under the other heading, each once.
func TestDeferredDeliveryToAWorkerThatIsNotConnected(t *testing.T) {
	t.Parallel()
	w := newHarnessWorld(t)
	w.spawn("dw", "claude") // no task: no turn until a message comes

	w.must("pause", "dw")
	stopBrokerAndWait(t, w.dir)
	out := w.must("intercom", "send", "dw", "first kept message")
	require.Contains(t, out, "Message kept for worker dw, which is not connected yet")
	var res intercom.SendResult
	require.NoError(t, json.Unmarshal([]byte(w.must("intercom", "send", "dw", "second kept message", "--json")), &res))
	require.True(t, res.OK)
	require.False(t, res.Delivered)
	require.Equal(t, intercom.DeferredQueued, res.State)
	require.Equal(t, "dw", res.TargetID)
	st := sessionStatus(t, w)
	require.Len(t, st.Deferred, 2)
	for _, d := range st.Deferred {
		require.Equal(t, "dw", d.To)
		require.Equal(t, intercom.DeferredQueued, d.State)
		require.Equal(t, "boss", d.From.ID)
	}
	require.Equal(t, "first kept message", st.Deferred[0].Preview)
	require.Contains(t, w.must("intercom", "status"), "queued  to dw")

	w.must("resume", "dw")
	w.received("dw", "done: second kept message [whoami=dw fleet-tool=false]")
	calls := w.calls("claude")
	require.Len(t, calls, 1, "both messages, one turn")
	p := calls[0].Prompt
	require.Equal(t, 1, strings.Count(p, harness.KeptBeforeStart), p)
	require.Contains(t, p, harness.KeptBeforeStart+" (2):")
	require.Equal(t, 1, strings.Count(p, "first kept message"), p)
	require.Equal(t, 1, strings.Count(p, "second kept message"), p)
	require.Regexp(t, `\[1/2\] From boss, sent \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ:\nfirst kept message`, p)
	require.NotContains(t, p, "📨", "not shown again as ordinary messages")
	st = sessionStatus(t, w)
	require.Len(t, st.Deferred, 2)
	for _, d := range st.Deferred {
		require.Equal(t, intercom.DeferredDelivered, d.State)
		require.NotZero(t, d.DeliveredAt)
	}

	// A later absence: 50 wait at most, the 51st is refused.
	w.must("pause", "dw")
	stopBrokerAndWait(t, w.dir)
	for i := range intercom.MaxDeferredPerWorker {
		out := w.must("intercom", "send", "dw", fmt.Sprintf("backlog item %02d", i))
		require.Contains(t, out, "Message kept for worker dw")
	}
	out51, err := w.cli("intercom", "send", "dw", "one too many", "--json")
	requireExit(t, err, exitConflict)
	require.Contains(t, string(out51), "50 messages already wait for worker dw")
	st = sessionStatus(t, w)
	queued := 0
	for _, d := range st.Deferred {
		require.NotEqual(t, "one too many", d.Preview, "the refused message is not kept")
		if d.State == intercom.DeferredQueued {
			queued++
		}
	}
	require.Equal(t, intercom.MaxDeferredPerWorker, queued)

	w.must("resume", "dw")
	w.received("dw", "done: backlog item 49 [whoami=dw fleet-tool=false]")
	// The shim may hand the kept messages over in more than one batch (a
	// turn can start while it still takes them): each is in one turn.
	calls = w.calls("claude")
	require.GreaterOrEqual(t, len(calls), 2)
	p = ""
	for _, c := range calls[1:] {
		require.Equal(t, 1, strings.Count(c.Prompt, harness.KeptWhileAway), c.Prompt)
		require.NotContains(t, c.Prompt, harness.KeptBeforeStart)
		p += c.Prompt
	}
	for i := range intercom.MaxDeferredPerWorker {
		require.Equal(t, 1, strings.Count(p, fmt.Sprintf("backlog item %02d", i)), "item %d in %s", i, p)
	}
	require.NotContains(t, p, "one too many")
	for _, d := range sessionStatus(t, w).Deferred {
		require.Equal(t, intercom.DeferredDelivered, d.State, "%+v", d)
	}
}
