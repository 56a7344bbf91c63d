//go:build !windows

package shim

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
)

// A permission wait longer than one ask may last: the ask is deferred
// and its late reply, taken out of the worker's inbox, still decides;
// then one nobody answers is withdrawn when the wait runs out. (Short
// waits, allow, deny and always run against the real Claude Code in
// cmd/agent-fleet.)
func TestPermissionRelayLongWait(t *testing.T) {
	dir, err := os.MkdirTemp("", "afp")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := intercom.NewPaths(dir)
	intercomtest.StartBroker(t, func(c *broker.Config) { c.Paths = p })
	boss := openTestSession(t, p, "boss")
	worker := openTestSession(t, p, "w1")
	regs := fleet.NewRegistryHandle(fleet.RegistryPath(p), true)
	t.Cleanup(regs.Close)
	relay := &permissionRelay{workerID: "w1", runID: "0123456789ab", home: "/home/ann",
		spec:    &harness.Spec{Kind: "claude", Cwd: "/home/ann/app", PermissionWaitMs: (time.Minute).Milliseconds()},
		session: worker, status: newPresence(worker, slog.New(slog.DiscardHandler)), regs: regs, manager: func(context.Context) string { return "boss" },
		log: slog.New(slog.DiscardHandler), askWait: 500 * time.Millisecond}
	req := harness.PermissionRequest{Tool: "Bash", Input: json.RawMessage(`{"command":"npm install"}`)}

	decided := make(chan harness.PermissionDecision, 1)
	go func() { decided <- relay.decide(context.Background(), req) }()
	// The boss answers only once the worker stopped blocking on the ask.
	var ask intercom.AskView
	require.Eventually(t, func() bool {
		res, err := boss.Pending(context.Background(), intercom.PendingRequest{})
		if err != nil || len(res.Asks) != 1 || res.Asks[0].DeferredAt == 0 {
			return false
		}
		ask = res.Asks[0]
		return true
	}, 30*time.Second, 20*time.Millisecond)
	full, err := boss.Pending(context.Background(), intercom.PendingRequest{AskID: ask.AskID})
	require.NoError(t, err)
	require.Equal(t, "w1 wants to run `npm install` in ~/app — reply allow / deny / always\n"+
		"(always: allow `npm install …` commands for the rest of this run without asking. No answer within 1m0s denies it.)", full.Asks[0].Text)
	_, err = boss.Reply(context.Background(), intercom.ReplyRequest{AskID: ask.AskID, Text: "allow"})
	require.NoError(t, err)
	select {
	case d := <-decided:
		require.True(t, d.Allow, "%+v", d)
	case <-time.After(time.Minute):
		t.Fatal("the late reply never decided the prompt")
	}
	res, err := worker.Pending(context.Background(), intercom.PendingRequest{})
	require.NoError(t, err)
	require.Empty(t, res.Unread, "the answer is not a message for the next turn")

	// Nobody answers a wait past one ask: denied, the ask withdrawn.
	relay.spec.PermissionWaitMs = 1500
	d := relay.decide(context.Background(), harness.PermissionRequest{Tool: "Write", Input: json.RawMessage(`{"file_path":"/home/ann/app/x"}`)})
	require.False(t, d.Allow)
	require.Contains(t, d.Message, "Permission to write ~/app/x was denied: boss did not answer within 1.5s.")
	require.Eventually(t, func() bool {
		res, err := boss.Pending(context.Background(), intercom.PendingRequest{})
		return err == nil && len(res.Asks) == 0
	}, 30*time.Second, 20*time.Millisecond, "the unanswered ask was withdrawn")
}
