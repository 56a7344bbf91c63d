//go:build linux

package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// endedWorld runs agent-fleet against the shared user manager, in one
// agent directory, as managers that listen with `intercom listen --json`.
type endedWorld struct {
	t   *testing.T
	dir string
	env []string
}

func newEndedWorld(t *testing.T) *endedWorld {
	inst := unitstest.Require(t)
	w := &endedWorld{t: t, dir: shortDir(t)}
	w.env = append(inst.Env(), "PATH="+os.Getenv("PATH"), "AGENT_FLEET_LEASE_GRACE=1ms")
	t.Cleanup(func() {
		for _, id := range []string{"end-ok", "end-three", "end-stop", "end-lease", "end-max", "end-gone"} {
			_ = w.cmd("end-mgr", "stop", id, "--kill").Run()
			_ = w.cmd("end-away", "stop", id, "--kill").Run()
		}
		stopBroker(t, w.dir)
	})
	return w
}

func (w *endedWorld) cmd(as_ string, args ...string) *exec.Cmd {
	cmd := as(w.t, w.dir, as_, args...)
	cmd.Env = append(cmd.Env, w.env...)
	return cmd
}

func (w *endedWorld) must(as_ string, args ...string) string {
	w.t.Helper()
	out, err := w.cmd(as_, args...).CombinedOutput()
	require.NoError(w.t, err, "%v: %s", args, out)
	return string(out)
}

// waiting is a `wait` running in the background.
type waiting struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

func (w *endedWorld) startWait(as_ string, args ...string) *waiting {
	wt := &waiting{cmd: w.cmd(as_, append([]string{"wait", "--json"}, args...)...), done: make(chan error, 1)}
	wt.cmd.Stdout = &wt.out
	require.NoError(w.t, wt.cmd.Start())
	go func() { wt.done <- wt.cmd.Wait() }()
	w.t.Cleanup(func() { _ = wt.cmd.Process.Kill() })
	return wt
}

// hasOpen reports whether process pid has a file whose path ends in name
// open.
func hasOpen(pid int, name string) bool {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && strings.HasSuffix(target, name) {
			return true
		}
	}
	return false
}

// result is the wait's exit status and what it printed.
func (wt *waiting) result(t *testing.T) (int, output.WaitOutcome) {
	t.Helper()
	var err error
	select {
	case err = <-wt.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("wait %v did not return", wt.cmd.Args)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var o output.WaitOutcome
	require.NoError(t, json.Unmarshal(wt.out.Bytes(), &o), wt.out.String())
	return code, o
}

// from is what a listener printed, by sender.
func from(t *testing.T, l *textListener) map[string][]intercom.MessageView {
	t.Helper()
	out := map[string][]intercom.MessageView{}
	for _, line := range strings.Split(strings.TrimSpace(l.stdout.String()), "\n") {
		if line == "" {
			continue
		}
		var m intercom.MessageView
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out[m.From.ID] = append(out[m.From.ID], m)
	}
	return out
}

// settled sends a sentinel to the listener's session and waits until it
// is printed: whatever reached the listener before it has been printed
// (or deduplicated) by then.
func (w *endedWorld) settled(l *textListener, to, text string) {
	w.t.Helper()
	w.must("end-probe", "intercom", "send", to, text)
	require.Eventually(w.t, func() bool { return strings.Contains(l.stdout.String(), text) }, 30*time.Second, 20*time.Millisecond)
}

// endedControl is a notice's content.control.
type endedControl struct {
	Type    string      `json:"type"`
	Version int         `json:"version"`
	Data    fleet.Ended `json:"data"`
}

// A manager listening gets exactly one message per worker end, from the
// worker's own session, for each kind of end — exit 0, exit 3, stop, the
// janitor's stop at lease expiry, systemd's at the maximum runtime —
// saying how, with the exit status, the run time and the last log lines,
// and the same facts as a content.control; `wait` started before each end
// returns with the status of that end (0, 10, 12, 13, 14). A resend after
// a "crash" between sending and recording (the notice marked owed again)
// reaches the manager's inbox and is deduplicated there: still one. A
// manager that was away when its worker ended gets the notice once when
// its holder registers.
func TestWorkerEndedNoticesAndWait(t *testing.T) {
	t.Parallel()
	w := newEndedWorld(t)
	p := intercom.NewPaths(w.dir)
	const mgr = "end-mgr"
	l := startTextListener(t, w.dir, mgr, "--json")
	require.Eventually(t, func() bool { return intercom.HolderAlive(p, mgr) }, 20*time.Second, 10*time.Millisecond)

	w.must(mgr, "spawn", "--id", "end-ok", "--", "sh", "-c", "echo ok-out-1; echo ok-out-2; sleep 1")
	w.must(mgr, "spawn", "--id", "end-three", "--", "sh", "-c", "echo three-out; sleep 1; exit 3")
	w.must(mgr, "spawn", "--id", "end-stop", "--", "sh", "-c", "echo stop-out; exec sleep 300")
	w.must(mgr, "spawn", "--id", "end-lease", "--lease", "1s", "--", "sleep", "300")
	w.must(mgr, "spawn", "--id", "end-max", "--max-runtime", "3s", "--", "sh", "-c", "echo max-out; exec sleep 300")
	waits := map[string]*waiting{}
	for _, id := range []string{"end-ok", "end-three", "end-stop", "end-lease", "end-max"} {
		waits[id] = w.startWait(mgr, id)
	}
	timedOut := w.startWait(mgr, "end-stop", "--timeout", "200ms")
	code, o := timedOut.result(t)
	require.Equal(t, exitWaitTimeout, code, timedOut.out.String())
	require.True(t, o.TimedOut)
	require.Equal(t, "running", o.Workers[0].State)
	// Interrupted (once it has the registry open, its signal handler is
	// set): 130, with what it had found by then.
	interrupted := w.startWait(mgr, "end-stop")
	require.Eventually(t, func() bool { return hasOpen(interrupted.cmd.Process.Pid, "fleet.db") }, time.Minute, 10*time.Millisecond)
	require.NoError(t, interrupted.cmd.Process.Signal(os.Interrupt))
	code, o = interrupted.result(t)
	require.Equal(t, exitInterrupted, code, interrupted.out.String())
	for _, found := range o.Workers {
		require.Equal(t, "running", found.State)
	}
	out, err := w.cmd(mgr, "wait", "end-nobody").CombinedOutput()
	requireExit(t, err, exitNotFound)
	require.Contains(t, string(out), `no worker "end-nobody"`)
	w.must(mgr, "stop", "end-stop")
	require.Eventually(t, func() bool {
		w.must(mgr, "cleanup", "--execute")
		return strings.Contains(w.must(mgr, "status", "end-lease"), "lease expired")
	}, time.Minute, 300*time.Millisecond, "the janitor stops the worker whose lease ran out")

	wantExit := map[string]int{"end-ok": 0, "end-three": exitEndNonZero, "end-stop": exitEndStopped, "end-lease": exitEndLease, "end-max": exitEndRuntime}
	wantEnd := map[string]string{"end-ok": fleet.EndExited, "end-three": fleet.EndExited, "end-stop": fleet.EndStopped,
		"end-lease": fleet.EndLeaseExpired, "end-max": fleet.EndMaxRuntime}
	for id, wt := range waits {
		code, o := wt.result(t)
		require.Equal(t, wantExit[id], code, "wait %s: %s", id, wt.out.String())
		require.False(t, o.TimedOut)
		require.Len(t, o.Workers, 1)
		require.Equal(t, wantEnd[id], o.Workers[0].End, id)
		if id == "end-three" {
			require.Equal(t, 3, *o.Workers[0].ExitStatus, "the exit status itself is in the output")
		}
	}

	wantText := map[string][]string{
		"end-ok":    {"agent-fleet: worker end-ok (exec) exited with status 0 after ", "Last lines of its log:\n  ok-out-1\n  ok-out-2"},
		"end-three": {"worker end-three (exec) exited with status 3 after ", "\n  three-out"},
		"end-stop":  {"worker end-stop (exec) was stopped by its manager's request (killed by SIGTERM) after ", "\n  stop-out"},
		"end-lease": {"worker end-lease (exec) was stopped by the janitor: its lease expired (killed by SIGTERM) after "},
		"end-max":   {"worker end-max (exec) was stopped at its maximum runtime (killed by SIGTERM) after ", "\n  max-out"},
	}
	require.Eventually(t, func() bool { return len(from(t, l)) >= len(wantText) }, time.Minute, 20*time.Millisecond,
		"a notice from each worker: %s", l.stdout.String())
	w.settled(l, mgr, "sentinel-1")
	got := from(t, l)
	for id, parts := range wantText {
		require.Len(t, got[id], 1, "exactly one notice from %s: %s", id, l.stdout.String())
		m := got[id][0]
		require.True(t, strings.HasPrefix(m.MessageID, "agent-fleet-ended-"+id+"-"), m.MessageID)
		for _, part := range parts {
			require.Contains(t, m.Text, part, id)
		}
		var c endedControl
		require.NoError(t, json.Unmarshal(m.Control, &c), "%s: %s", id, m.Control)
		require.Equal(t, fleet.EndedControlType, c.Type)
		require.Equal(t, 1, c.Version)
		require.Equal(t, id, c.Data.ID)
		require.Equal(t, mgr, c.Data.Manager)
		require.Equal(t, wantEnd[id], c.Data.How, id)
		require.NotNil(t, c.Data.ExitStatus, id)
		require.Positive(t, c.Data.RuntimeMs, id)
		require.NotEmpty(t, c.Data.EndedAt, id)
	}
	var c endedControl
	require.NoError(t, json.Unmarshal(got["end-ok"][0].Control, &c))
	require.GreaterOrEqual(t, c.Data.RuntimeMs, int64(1000), "its command slept 1 s: the run time counts from the spawn, not from READY")
	require.NoError(t, json.Unmarshal(got["end-three"][0].Control, &c))
	require.Equal(t, 3, *c.Data.ExitStatus)
	require.Equal(t, []string{"three-out"}, c.Data.LogTail)
	require.NoError(t, json.Unmarshal(got["end-max"][0].Control, &c))
	require.Equal(t, fleet.StopMaxRuntime, c.Data.StopReason)
	require.Equal(t, "SIGTERM", c.Data.Signal)

	// A crash after the send, before it was recorded: the notice is owed
	// again, and the janitor sends it again, the same message.
	reg := fleet.RegistryPath(p)
	db, err := sql.Open("sqlite", reg)
	require.NoError(t, err)
	_, err = db.Exec(`UPDATE ended_notices SET sent_at_ms = 0 WHERE id = 'end-three'`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	cleaned := w.must(mgr, "cleanup", "--execute", "--json")
	require.Contains(t, cleaned, "delivered 1 ended notice", "the resend reached the manager's session")
	w.settled(l, mgr, "sentinel-2")
	require.Len(t, from(t, l)["end-three"], 1, "the inbox deduplicated the resend: %s", l.stdout.String())

	// A manager away when its worker ends gets the notice when it is back.
	const away = "end-away"
	w.must(away, "spawn", "--id", "end-gone", "--", "sh", "-c", "echo away-out; sleep 1; exit 0")
	code, o = w.startWait(away, "end-gone").result(t)
	require.Equal(t, 0, code)
	require.Equal(t, fleet.EndExited, o.Workers[0].End)
	back := startTextListener(t, w.dir, away, "--json")
	require.Eventually(t, func() bool { return len(from(t, back)["end-gone"]) > 0 }, time.Minute, 20*time.Millisecond)
	w.settled(back, away, "sentinel-3")
	notices := from(t, back)["end-gone"]
	require.Len(t, notices, 1, back.stdout.String())
	require.Contains(t, notices[0].Text, "worker end-gone (exec) exited with status 0 after ")
	require.Contains(t, notices[0].Text, "\n  away-out")
	require.Len(t, from(t, l)["end-gone"], 0, "the notice goes to the worker's manager alone")
}

// Workers whose command ends within the readiness grace, before their
// spawn has recorded the log file, tell their connected manager at once,
// each with its log's lines: the shim's own delivery is not cut off by
// its exit, nor composed before the log file is known.
func TestFastEndsTellAConnectedManager(t *testing.T) {
	t.Parallel()
	w := newEndedWorld(t)
	const mgr = "fast-mgr"
	l := startTextListener(t, w.dir, mgr, "--json")
	require.Eventually(t, func() bool { return intercom.HolderAlive(intercom.NewPaths(w.dir), mgr) }, 20*time.Second, 10*time.Millisecond)
	ids := []string{"fast-1", "fast-2", "fast-3", "fast-4", "fast-5", "fast-6"}
	for _, id := range ids {
		w.must(mgr, "spawn", "--id", id, "--", "sh", "-c", "echo "+id+"-out")
	}
	// Well within the 30 s a held claim lasts, and without a janitor run:
	// only the shims' own deliveries can have sent them.
	require.Eventually(t, func() bool { return len(from(t, l)) >= len(ids) }, 20*time.Second, 20*time.Millisecond,
		"a notice from each worker: %s", l.stdout.String())
	got := from(t, l)
	for _, id := range ids {
		require.Len(t, got[id], 1, l.stdout.String())
		require.Contains(t, got[id][0].Text, "worker "+id+" (exec) exited with status 0 after ")
		require.Contains(t, got[id][0].Text, "Last lines of its log:\n  "+id+"-out", id)
	}
}
