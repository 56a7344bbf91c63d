//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// tsOutboxScript registers SELF with the reference IntercomClient
// (unchanged), which loads SELF's durable outbox on `registered` and
// replays it; it prints each replayed send's outcome as a JSON line and
// runs until stdin closes.
const tsOutboxScript = `import { createInterface } from "node:readline";
const [clientModule, selfId] = process.argv.slice(2);
const { IntercomClient } = await import(clientModule);
const out = (o) => console.log(JSON.stringify(o));
const client = new IntercomClient({});
client.on("outbox_delivered", (messageId) => out({ event: "delivered", id: messageId }));
client.on("outbox_failed", (messageId, code) => out({ event: "failed", id: messageId, code }));
client.on("error", (e) => out({ event: "error", error: String(e) }));
const now = Date.now();
await client.connect({ name: selfId, cwd: process.cwd(), model: "ts-reference", pid: process.pid, startedAt: now, lastActivity: now }, selfId);
out({ event: "registered", outbox: client.outboxSize });
for await (const _ of createInterface({ input: process.stdin })) { /* until stdin closes */ }
await client.disconnect(true);
`

// A send agent-fleet queued and never saw delivered, in a session it
// closed, is replayed by the reference TypeScript client that registers
// the same id next: the closed outbox is a complete file in the format
// that client reads, its journal gone.
func TestTypeScriptClientReplaysOurOutbox(t *testing.T) {
	t.Parallel()
	dir, tsx := preparedTSClient(t)
	agentDir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, agentDir) })
	p := intercom.NewPaths(agentDir)
	beta := startListener(t, agentDir, "beta")

	// The session's outbox as a closing session leaves it: two sends
	// queued (in the journal), one of them delivered.
	o, err := intercom.OpenOutbox(p, "alpha")
	require.NoError(t, err)
	for _, id := range []string{"late-1", "late-2"} {
		m := wire.Message{ID: id, Timestamp: float64(time.Now().UnixMilli()), Text: "queued as " + id}
		info, err := wire.ParseMessage(m.AppendJSON(nil))
		require.NoError(t, err)
		_, err = o.Enqueue("beta", info)
		require.NoError(t, err)
	}
	require.NoError(t, o.Remove("late-1"))
	require.NoError(t, o.Close())

	cmd := exec.Command(tsx, writeTSScript(t, tsOutboxScript), filepath.Join(dir, "broker", "client.ts"), "alpha")
	cmd.Env = append(os.Environ(), "PI_CODING_AGENT_DIR="+agentDir)
	_, stdout, stderr := startTSClient(t, cmd, dir)
	events := make(chan map[string]any, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events <- e
			}
		}
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case e, ok := <-events:
			require.True(t, ok, "the TypeScript client ended: %s", stderr.String())
			require.NotEqual(t, "error", e["event"], "%v", e)
			return e
		case <-time.After(60 * time.Second):
			t.Fatalf("the TypeScript client printed nothing more; stderr %s", stderr.String())
			return nil
		}
	}
	require.Equal(t, map[string]any{"event": "registered", "outbox": float64(1)}, next(), "it loaded the one send left")
	require.Equal(t, map[string]any{"event": "delivered", "id": "late-2"}, next())
	require.Eventually(t, func() bool { return len(beta.messages()) == 1 }, 10*time.Second, 10*time.Millisecond)
	got := beta.messages()[0]
	require.Equal(t, "late-2", got.MessageID)
	require.Equal(t, "queued as late-2", got.Text)
	require.Equal(t, "alpha", got.From.ID)
}
