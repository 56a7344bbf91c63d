//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// Coding-agent workers end to end: real units under a systemd user
// manager, the real worker shim and `agent-fleet mcp`, and stand-in
// harness executables (harness_standin_test.go) in place of the model.

type harnessWorld struct {
	t    *testing.T
	dir  string // agent directory
	home string // the workers' HOME (stand-in conversations live here)
	bin  string // stand-in harness executables
	boss *listener
	// piAdapter, when set, is the pi-mcp-adapter directory spawn is told of.
	piAdapter string
	// real names real harness executables by kind, spawned instead of the
	// stand-ins (their model is a scripted endpoint).
	real map[string]string
	// path, when set, is the PATH workers get instead of the test's.
	path string
}

func newHarnessWorld(t *testing.T) *harnessWorld {
	unitstest.Require(t)
	w := &harnessWorld{t: t, dir: shortDir(t), home: t.TempDir(), bin: t.TempDir()}
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, kind := range []string{"claude", "codex", "opencode", "pi"} {
		script := fmt.Sprintf("#!/bin/sh\nAGENT_FLEET_FAKE_HARNESS=%s exec %q \"$@\"\n", kind, exe)
		require.NoError(t, os.WriteFile(filepath.Join(w.bin, kind), []byte(script), 0o755))
	}
	w.boss = startListener(t, w.dir, "boss")
	t.Cleanup(func() {
		out, _ := w.cli("list", "--json")
		var ws []output.Worker
		_ = json.Unmarshal(out, &ws)
		for _, wk := range ws {
			if wk.State == "running" || wk.State == "provisioning" || wk.State == "stopping" {
				_, _ = w.cli("stop", wk.ID)
			}
		}
		stopBroker(t, w.dir)
	})
	return w
}

// cli runs agent-fleet as the manager "boss".
func (w *harnessWorld) cli(args ...string) ([]byte, error) {
	cmd := as(w.t, w.dir, "boss", args...)
	cmd.Env = append(cmd.Env, unitstest.Require(w.t).Env()...)
	path := os.Getenv("PATH")
	if w.path != "" {
		path = w.path
	}
	cmd.Env = append(cmd.Env, "PATH="+path, "HOME="+w.home)
	if w.piAdapter != "" {
		cmd.Env = append(cmd.Env, "AGENT_FLEET_PI_MCP_ADAPTER="+w.piAdapter)
	}
	return cmd.CombinedOutput()
}

func (w *harnessWorld) must(args ...string) string {
	w.t.Helper()
	out, err := w.cli(args...)
	require.NoError(w.t, err, "agent-fleet %v: %s", args, out)
	return string(out)
}

func (w *harnessWorld) spawn(id, kind string, args ...string) output.Worker {
	w.t.Helper()
	exe := filepath.Join(w.bin, kind)
	if real := w.real[kind]; real != "" {
		exe = real
	} else if !slices.Contains(args, "--profile") {
		// The stand-in keeps its records in $HOME, where no harness
		// writes and a confined worker cannot.
		args = append(args, "--profile", "trusted")
	}
	return w.spawnCmd(id, kind, []string{exe}, args...)
}

// spawnCmd spawns a worker running command (a real harness, with its own
// arguments) in place of the stand-in.
func (w *harnessWorld) spawnCmd(id, kind string, command []string, args ...string) output.Worker {
	w.t.Helper()
	all := append([]string{"spawn", "--id", id, "--kind", kind, "--json", "--env", TurnBackoffEnv + "=400ms"}, args...)
	all = append(append(all, "--"), command...)
	out := w.must(all...)
	var v output.Worker
	require.NoError(w.t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(w.t, "running", v.State)
	require.Equal(w.t, kind, v.Kind)
	return v
}

// message waits for the boss to receive a message from `from` whose text
// satisfies ok, and returns it.
func (w *harnessWorld) message(from string, ok func(string) bool) intercom.MessageView {
	w.t.Helper()
	var found *intercom.MessageView
	require.Eventually(w.t, func() bool {
		for _, m := range w.boss.messages() {
			if m.From.ID == from && ok(m.Text) {
				found = &m
				return true
			}
		}
		return false
	}, 150*time.Second, 20*time.Millisecond, "boss never got the message from %s; got %+v", from, w.boss.messages())
	return *found
}

func (w *harnessWorld) received(from, text string) intercom.MessageView {
	w.t.Helper()
	return w.message(from, func(s string) bool { return s == text })
}

func (w *harnessWorld) calls(kind string) []standInCall {
	w.t.Helper()
	f, err := os.Open(filepath.Join(w.home, ".fake-harness", "calls.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(w.t, err)
	defer f.Close()
	var out []standInCall
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var c standInCall
		require.NoError(w.t, json.Unmarshal(sc.Bytes(), &c))
		if c.Kind == kind {
			out = append(out, c)
		}
	}
	return out
}

func (w *harnessWorld) status(id string) output.Status {
	w.t.Helper()
	var st output.Status
	require.NoError(w.t, json.Unmarshal([]byte(w.must("status", id, "--json")), &st))
	return st
}

func argAfter(argv []string, flag string) string {
	for i, a := range argv {
		if a == flag && i+1 < len(argv) {
			return argv[i+1]
		}
	}
	return ""
}

func TestHarnessWorkerWakeLoop(t *testing.T) {
	t.Parallel()
	w := newHarnessWorld(t)
	v := w.spawn("cw", "claude", "--role", "builder", "--task", "write the parser")
	require.Equal(t, "write the parser", v.Task)

	// The task's turn; its final answer reaches the manager. The turn's
	// MCP server acted as the worker (through the shim's holder) and had no
	// agent_fleet tool.
	w.received("cw", "done: write the parser [whoami=cw fleet-tool=false]")
	calls := w.calls("claude")
	require.Len(t, calls, 1)
	sid := argAfter(calls[0].Argv, "--session-id")
	require.NotEmpty(t, sid)
	require.False(t, calls[0].Resumed)
	require.Contains(t, calls[0].Prompt, "Your task from boss:\n\nwrite the parser")
	require.Contains(t, argAfter(calls[0].Argv, "--append-system-prompt"), `in the role "builder"`)

	// A message from the manager: a resumed turn of the same conversation.
	// The turn is held until a burst of messages arrived (below).
	hold := filepath.Join(w.home, ".fake-harness", "hold")
	require.NoError(t, os.WriteFile(hold, nil, 0o600))
	w.must("intercom", "send", "cw", "now the tests")
	require.Eventually(t, func() bool { return len(w.calls("claude")) == 2 }, 60*time.Second, 20*time.Millisecond)

	// A burst of messages while a turn runs: one turn after it.
	peer, err := intercom.OpenSession(context.Background(), intercom.SessionConfig{Paths: intercom.NewPaths(w.dir),
		Identity: intercom.Identity{SessionID: "peer", Name: "peer", Model: "test", Cwd: "/", PID: os.Getpid(),
			StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}})
	require.NoError(t, err)
	defer peer.Close()
	for i := range 4 {
		res, err := peer.Send(context.Background(), intercom.SendRequest{To: "cw", Text: fmt.Sprintf("item %d", i)})
		require.NoError(t, err)
		require.True(t, res.OK)
	}
	require.NoError(t, os.Remove(hold))
	w.received("cw", "done: now the tests [whoami=cw fleet-tool=false]")
	calls = w.calls("claude")
	// The batch's turn may have started already: it waited for this one.
	require.GreaterOrEqual(t, len(calls), 2)
	require.True(t, calls[1].Resumed)
	require.Equal(t, sid, argAfter(calls[1].Argv, "--resume"))

	w.received("cw", "done: item 3 [whoami=cw fleet-tool=false]")
	calls = w.calls("claude")
	require.Len(t, calls, 3, "four messages, one turn")
	require.Contains(t, calls[2].Prompt, "📨 Intercom batch (4 messages)")

	// A turn that messages the manager itself: its final answer is not
	// sent again; the message renews the lease (verified by cgroup).
	w.must("intercom", "send", "cw", "SEND-PROGRESS on the docs")
	w.received("cw", "progress: SEND-PROGRESS on the docs")
	require.Eventually(t, func() bool { return len(w.calls("claude")) == 4 && w.status("cw").Turns.Last.N == 4 }, 30*time.Second, 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	for _, m := range w.boss.messages() {
		require.NotContains(t, m.Text, "done: SEND-PROGRESS", "the manager is not told twice")
	}
	st := w.status("cw")
	require.NotEmpty(t, st.Worker.LastActivity, "messages to the manager count as activity")
	require.Equal(t, "verified", st.LeaseActivity)

	// A failing turn: reported to the manager and in status, with the
	// harness's error; the worker takes the next message.
	w.must("intercom", "send", "cw", "FAIL-TURN please")
	report := w.message("cw", func(s string) bool { return strings.Contains(s, "turn 5 of worker cw (claude) failed") })
	require.Contains(t, report.Text, "API Error: 500 the stand-in model failed")
	require.Contains(t, report.Text, "your next message starts a new turn")
	st = w.status("cw")
	require.Equal(t, "running", st.Worker.State)
	require.Equal(t, "turn-failed", st.Worker.StateReason)
	require.Contains(t, st.Worker.LastError, "turn 5 failed: API Error: 500")
	require.False(t, st.Turns.Last.OK)
	text := w.must("status", "cw")
	require.Contains(t, text, "running (turn failed)")
	require.Contains(t, text, "error:    turn 5 failed: API Error: 500")

	w.must("intercom", "send", "cw", "after the failure")
	w.received("cw", "done: after the failure [whoami=cw fleet-tool=false]")
	calls = w.calls("claude")
	require.Equal(t, sid, argAfter(calls[len(calls)-1].Argv, "--resume"), "the conversation goes on")
	st = w.status("cw")
	require.Equal(t, "idle", st.Worker.StateReason)
	require.Empty(t, st.Worker.LastError)

	// Stop during a turn: nothing of it survives.
	w.must("intercom", "send", "cw", "SLEEP for a while")
	var pids []int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(w.home, ".fake-harness", "sleeping.pids"))
		if err != nil {
			return false
		}
		pids = nil
		for _, f := range strings.Fields(string(data)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
		return len(pids) == 2
	}, 30*time.Second, 20*time.Millisecond)
	st = w.status("cw")
	require.NotNil(t, st.Turns.Current, "a turn is running")
	require.Equal(t, "turn-running", st.Worker.StateReason)
	require.Contains(t, w.must("list"), "running (turn running)")
	out := w.must("stop", "cw")
	require.Contains(t, out, "nothing of it is left in its cgroup")
	for _, pid := range pids {
		unitstest.RequireEnded(t, pid, "a process of the turn")
	}
	st = w.status("cw")
	require.Equal(t, "stopped", st.Worker.State)
	// The unit goes once the exit record's ExecStopPost, which may run on
	// after the stop, has ended.
	require.Eventually(t, func() bool { return w.status("cw").UnitActive == "not-loaded" }, 20*time.Second, 50*time.Millisecond,
		"the unit is collected")
	for _, m := range w.boss.messages() {
		require.NotContains(t, m.Text, "turn 7 of worker cw", "a stopped turn is not reported as failed")
	}
	// What the manager hears of the stop is the worker's ended notice.
	ended := w.message("cw", func(s string) bool { return strings.HasPrefix(s, "agent-fleet: worker cw (claude) was stopped") })
	require.Contains(t, ended.Text, "turn 7 (messages: 1) starts", "the notice carries the log's last lines")
}

// Every kind's command line and configuration reach agent-fleet's MCP
// server and resume the right conversation.
func TestHarnessWorkerKinds(t *testing.T) {
	t.Parallel()
	w := newHarnessWorld(t)
	w.piAdapter = t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(w.piAdapter, "package.json"), []byte(`{"name":"pi-mcp-adapter"}`), 0o644))
	for _, kind := range []string{"codex", "opencode", "pi"} {
		func() {
			id := kind + "-w"
			w.spawn(id, kind, "--task", "hello "+kind, "--permission", "read-only")
			w.received(id, fmt.Sprintf("done: hello %s [whoami=%s fleet-tool=false]", kind, id))
			w.must("intercom", "send", id, "again")
			w.received(id, fmt.Sprintf("done: again [whoami=%s fleet-tool=false]", id))
			calls := w.calls(kind)
			require.Len(t, calls, 2)
			if kind == "pi" {
				require.Equal(t, w.piAdapter, argAfter(calls[0].Argv, "-e"), "pi loads the adapter")
			}
			require.False(t, calls[0].Resumed)
			require.True(t, calls[1].Resumed, "the second turn resumes")
			require.Equal(t, calls[0].Session, calls[1].Session, "the same conversation")
			st := w.status(id)
			require.Equal(t, calls[0].Session, st.Turns.Session)
			require.Equal(t, 2, st.Turns.Turns)

			// The provider's rate limit in the kind's own words: a pause,
			// then the same conversation at the reset it named (1 s).
			w.must("intercom", "send", id, "RATE-LIMIT once")
			notice := w.message(id, func(s string) bool { return strings.Contains(s, "hit the model provider's rate limit") })
			require.Contains(t, notice.Text, "This is not a failure")
			w.received(id, fmt.Sprintf("done: RATE-LIMIT once [whoami=%s fleet-tool=false]", id))
			calls = w.calls(kind)
			require.Len(t, calls, 4)
			require.Equal(t, calls[0].Session, calls[3].Session, "the conversation goes on")
			require.True(t, strings.HasPrefix(calls[3].Prompt, harness.Resent), calls[3].Prompt)

			// What the turns consumed, in the kind's own format.
			st = w.status(id)
			require.Zero(t, st.Turns.Failures, "a rate limit is no failure")
			require.Nil(t, st.Turns.Pause)
			u := st.Worker.Usage
			require.NotNil(t, u)
			require.Equal(t, 3, u.Turns, "the limited turn consumed nothing")
			require.Equal(t, int64(3*standInTokens), u.Tokens)
			require.Equal(t, int64(3*standInCacheRead), u.CacheReadTokens)
			if kind == "codex" {
				require.Nil(t, u.CostUSD, "codex reports no cost")
				require.Equal(t, 3, u.UnpricedTurns)
			} else {
				require.InDelta(t, 3*standInCost, *u.CostUSD, 1e-9)
			}
			require.Contains(t, w.must("stop", id), "nothing of it is left in its cgroup")
		}()
	}
	// A failed turn in each format is a reported failure.
	w.spawn("oc-fail", "opencode", "--task", "FAIL-TURN now")
	report := w.message("oc-fail", func(s string) bool { return strings.Contains(s, "failed") })
	require.Contains(t, report.Text, "turn 1 of worker oc-fail (opencode) failed: API Error: 500")
}

func TestHarnessSpawnRefusals(t *testing.T) {
	t.Parallel()
	w := newHarnessWorld(t)
	_, err := w.cli("spawn", "--id", "x", "--kind", "codex", "--effort", "minimal", "--", filepath.Join(w.bin, "codex"))
	requireExit(t, err, exitUsage)
	_, err = w.cli("spawn", "--id", "x", "--kind", "pi", "--permission", "workspace-write", "--", filepath.Join(w.bin, "pi"))
	requireExit(t, err, exitUsage)
	cmd := as(t, w.dir, "boss", "spawn", "--id", "x", "--kind", "claude", "--task", "t")
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, "PATH=/nonexistent", "HOME="+w.home)
	out, err := cmd.CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), "claude is not installed")
	// pi without its MCP adapter cannot reach the intercom.
	out, err = w.cli("spawn", "--id", "x", "--kind", "pi", "--", filepath.Join(w.bin, "pi"))
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), "pi install npm:pi-mcp-adapter")
	// A permission wait that would not apply is refused, not ignored.
	for args, says := range map[string]string{
		"--kind claude --permission-wait 11m":                       "between 1s and 10m0s",
		"--kind claude --permission read-only --permission-wait 1m": "nothing prompts",
		"--kind codex --permission-wait 1m":                         `a codex worker with permission "" has no permission prompt to relay`,
		"--kind opencode --permission full --permission-wait 1m":    "is for claude workers and codex workers with permission workspace-write",
		"--kind exec --permission-wait 1m":                          "an exec worker asks nobody for permission",
	} {
		kind := strings.Fields(args)[1]
		exe := filepath.Join(w.bin, kind)
		if kind == "exec" {
			exe = "/bin/true"
		}
		out, err = w.cli(append(append([]string{"spawn", "--id", "x"}, strings.Fields(args)...), "--", exe)...)
		requireExit(t, err, exitUsage)
		require.Contains(t, string(out), says, args)
	}
}
