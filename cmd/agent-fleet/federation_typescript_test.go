//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tsClientEnv names a prepared checkout of the reference TypeScript
// client: agent-intercom-pi with node_modules (tsx, and
// @ctliz/agent-intercom-core built and linked), e.g. made by
// contrib/federation/prepare-ts-client.sh. CI cannot fetch it, so the
// test runs only where the variable is set.
const tsClientEnv = "AGENT_FLEET_TS_CLIENT"

// tsClientScript registers SELF with the reference IntercomClient
// (unchanged) on the broker of PI_CODING_AGENT_DIR, waits until PEER is
// listed, asks it TEXT, and prints one JSON line per event until stdin
// closes; every message it gets is acknowledged.
const tsClientScript = `import { createInterface } from "node:readline";
const [clientModule, selfId, peer, text] = process.argv.slice(2);
const { IntercomClient } = await import(clientModule);
const out = (o) => console.log(JSON.stringify(o));
const client = new IntercomClient({});
client.on("message", (from, message, deliveryId) => {
  client.acknowledgeMessage(deliveryId);
  out({ event: "message", from: from.id, fromHost: from.remoteHostId ?? "", message });
});
client.on("error", (e) => out({ event: "error", error: String(e) }));
const now = Date.now();
await client.connect({ name: selfId, cwd: process.cwd(), model: "ts-reference", pid: process.pid, startedAt: now, lastActivity: now }, selfId);
out({ event: "registered", id: client.sessionId });
for (;;) {
  const s = (await client.listSessions()).find((x) => x.id === peer);
  if (s) { out({ event: "peer", session: s }); break; }
  await new Promise((r) => setTimeout(r, 100));
}
out({ event: "sent", result: await client.send(peer, { text, expectsReply: true }) });
for await (const _ of createInterface({ input: process.stdin })) { /* until stdin closes */ }
await client.disconnect();
`

// tsEvent is one line the script prints.
type tsEvent struct {
	Event    string          `json:"event"`
	ID       string          `json:"id"`
	From     string          `json:"from"`
	FromHost string          `json:"fromHost"`
	Session  json.RawMessage `json:"session"`
	Result   struct {
		ID        string `json:"id"`
		Accepted  bool   `json:"accepted"`
		Delivered bool   `json:"delivered"`
		Code      string `json:"code"`
	} `json:"result"`
	Message struct {
		ID      string `json:"id"`
		ReplyTo string `json:"replyTo"`
		Content struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"message"`
	Error string `json:"error"`
}

// The reference TypeScript client, unchanged, registered on host A's
// broker (shared by node.toml: it cannot ask), lists a session of host B
// with its host, asks it, is answered from host B's CLI, and receives a
// plain send from B too.
func TestFederationTypeScriptClient(t *testing.T) {
	t.Parallel()
	dir, tsx := preparedTSClient(t)
	w := newFedWorld(t)
	a := w.host("a", fedHostConfig{Share: []string{"ts-*"}})
	b := w.host("b", fedHostConfig{})
	w.waitJoined()
	bob := b.listen("bob", "--share")

	cmd := a.program(tsx, writeTSScript(t, tsClientScript), filepath.Join(dir, "broker", "client.ts"), "ts-alpha", "bob", "hello from TypeScript")
	stdin, stdout, stderr := startTSClient(t, cmd, dir)
	events := make(chan tsEvent, 64)
	var lines []string
	var mu sync.Mutex
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			var e tsEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events <- e
			}
		}
	}()
	next := func(kind string) tsEvent {
		t.Helper()
		for {
			select {
			case e, ok := <-events:
				require.True(t, ok, "the TypeScript client ended before %s: %s", kind, stderr.String())
				require.NotEqual(t, "error", e.Event, e.Error)
				if e.Event == kind {
					return e
				}
			case <-time.After(90 * time.Second):
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("no %s from the TypeScript client; it printed %v; stderr %s", kind, lines, stderr.String())
			}
		}
	}
	require.Equal(t, "ts-alpha", next("registered").ID)
	var peer struct {
		ID           string `json:"id"`
		Origin       string `json:"origin"`
		RemoteHostID string `json:"remoteHostId"`
	}
	require.NoError(t, json.Unmarshal(next("peer").Session, &peer))
	require.Equal(t, "remote", peer.Origin)
	require.Equal(t, "b", peer.RemoteHostID)

	fedWait(t, 60*time.Second, func() bool { return strings.Contains(bob.stdout.String(), "hello from TypeScript") },
		"bob on b prints the TypeScript client's ask: %s", bob.stdout)
	var askID string
	fedWait(t, 30*time.Second, func() bool {
		for _, x := range b.pending("bob").Asks {
			if x.From.ID == "ts-alpha" {
				askID = x.AskID
				return true
			}
		}
		return false
	}, "bob has ts-alpha's ask pending")
	b.must("bob", "intercom", "reply", "--ask-id", askID, "hello back from host b")
	sent := next("sent")
	require.True(t, sent.Result.Accepted && sent.Result.Delivered, "%+v", sent.Result)
	reply := next("message")
	require.Equal(t, "bob", reply.From)
	require.Equal(t, "b", reply.FromHost)
	require.Equal(t, "hello back from host b", reply.Message.Content.Text)
	require.Equal(t, sent.Result.ID, reply.Message.ReplyTo)

	var res struct {
		Delivered bool `json:"delivered"`
	}
	out := b.must("bob", "intercom", "send", "ts-alpha", "and a plain note", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.True(t, res.Delivered, out)
	require.Equal(t, "and a plain note", next("message").Message.Content.Text)
	_, _ = io.WriteString(stdin, "\n")
}

// nodeBinDir is where the Node.js 22 of the coding-agent tools is (the
// reference client needs 22.19 or later), "" when absent.
// preparedTSClient is the prepared client's directory and its tsx; the
// test is skipped where none is prepared (CI cannot fetch it).
func preparedTSClient(t *testing.T) (dir, tsx string) {
	t.Helper()
	dir = os.Getenv(tsClientEnv)
	if dir == "" {
		t.Skipf("%s is not set: no prepared reference TypeScript client (contrib/federation/prepare-ts-client.sh makes one)", tsClientEnv)
	}
	tsx = filepath.Join(dir, "node_modules", ".bin", "tsx")
	require.FileExists(t, tsx)
	return dir, tsx
}

// writeTSScript writes a client script for tsx to run and returns its path.
func writeTSScript(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client.mjs")
	require.NoError(t, os.WriteFile(path, []byte(script), 0o600))
	return path
}

// startTSClient starts cmd, a tsx script of the prepared TypeScript client
// in dir, with the Node.js the CI installs on its PATH; closing stdin ends
// the script, and the test's end kills it.
func startTSClient(t *testing.T, cmd *exec.Cmd, dir string) (stdin io.WriteCloser, stdout io.Reader, stderr *lockedBuffer) {
	t.Helper()
	cmd.Dir = dir
	if node := nodeBinDir(); node != "" {
		cmd.Env = append(cmd.Env, "PATH="+node+":"+os.Getenv("PATH"))
	}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err = cmd.StdoutPipe()
	require.NoError(t, err)
	stderr = &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return stdin, stdout, stderr
}

func nodeBinDir() string {
	tools := os.Getenv("AGENT_FLEET_NODE_TOOLS")
	if tools == "" {
		home, _ := os.UserHomeDir()
		tools = filepath.Join(home, ".cache", "agent-fleet", "node-tools")
	}
	bin := filepath.Join(tools, "node_modules", "node", "bin")
	if _, err := os.Stat(filepath.Join(bin, "node")); err != nil {
		return ""
	}
	return bin
}
