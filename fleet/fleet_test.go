//go:build linux

package fleet_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// The test binary doubles as the worker shim: systemd starts it with
// FLEET_TEST_SHIM=1 and the shim's flags, and it runs shim.Run.
func TestMain(m *testing.M) {
	if text := os.Getenv("FLEET_TEST_REPORT"); text != "" {
		os.Exit(reportToManager(text))
	}
	if os.Getenv("FLEET_TEST_SHIM") != "1" {
		os.Exit(m.Run())
	}
	fleettest.RunShim()
}

// world is a real user manager, an in-process broker and a registry in a
// temp agent directory, with a Fleet acting for manager "boss".
type world struct {
	t    *testing.T
	p    intercom.Paths
	m    *units.Systemd
	reg  *fleet.Registry
	f    *fleet.Fleet
	stop context.CancelFunc
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "aff")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newWorld(t *testing.T, tweak ...func(*fleet.Config)) *world {
	t.Helper()
	inst := unitstest.Require(t)
	w := &world{t: t, p: intercom.NewPaths(shortDir(t))}
	w.m = unitstest.Connect(t, inst)
	w.startBroker()
	var err error
	w.reg, err = fleet.OpenRegistry(context.Background(), fleet.RegistryPath(w.p))
	require.NoError(t, err)
	w.f = w.fleet("boss", tweak...)
	t.Cleanup(func() {
		ws, _ := w.reg.List(context.Background(), fleet.Filter{LiveOnly: true})
		for _, wk := range ws {
			if f := w.fleet(wk.Manager); f != nil {
				_, _ = f.Stop(context.Background(), wk.ID)
			}
		}
		w.stop()
		w.reg.Close()
	})
	return w
}

// startBroker runs an in-process broker until w.stop.
func (w *world) startBroker() {
	b := intercomtest.StartBroker(w.t, func(c *broker.Config) { c.Paths = w.p })
	w.stop = b.Stop
}

// fleet returns a Fleet acting for caller.
func (w *world) fleet(caller string, tweak ...func(*fleet.Config)) *fleet.Fleet {
	exe, err := os.Executable()
	require.NoError(w.t, err)
	cfg := fleet.Config{
		Paths: w.p, Registry: w.reg, Units: w.m, Caller: caller,
		CallerEnv: func(k string) string {
			switch k {
			case "PATH":
				return os.Getenv("PATH")
			case "HOME":
				return "/root"
			}
			return ""
		},
		Shim: []string{exe}, ShimEnv: []string{"FLEET_TEST_SHIM=1"},
		StopTimeout: 3 * time.Second, StartTimeout: 10 * time.Second,
		Peers: &intercom.LocalAPIClient{Path: w.p.LocalAPISocket()},
	}
	for _, f := range tweak {
		f(&cfg)
	}
	f, err := fleet.New(cfg)
	require.NoError(w.t, err)
	return f
}

// requireCollected waits until systemd has collected the unit of a
// stopped worker and removed its cgroup: a stop ends once the cgroup holds
// nothing of the worker's, and the unit ends with the exit record's
// ExecStopPost.
func requireCollected(t *testing.T, m units.Manager, wk *fleet.Worker) {
	t.Helper()
	require.Eventually(t, func() bool {
		u, err := m.Unit(ctx, wk.Unit)
		if err != nil || !u.Gone() {
			return false
		}
		_, err = os.Stat(filepath.Join("/sys/fs/cgroup", wk.ControlGroup))
		return os.IsNotExist(err) || wk.ControlGroup == ""
	}, 20*time.Second, 20*time.Millisecond, "the unit of %s is collected and its cgroup removed", wk.ID)
}

func (w *world) spawn(id string, cmd ...string) *fleet.Worker {
	w.t.Helper()
	wk, err := w.f.Spawn(context.Background(), fleet.SpawnRequest{ID: id, Command: cmd})
	require.NoError(w.t, err)
	return wk
}

var ctx = context.Background()

func TestSpawnStatusStop(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("w1", "sleep", "300")
	require.Equal(t, fleet.StateRunning, wk.State)
	require.NotZero(t, wk.MainPID)
	require.NotEmpty(t, wk.ControlGroup)
	require.Equal(t, "/bin/sleep", strings.Replace(wk.Command[0], "/usr", "", 1), "resolved with the caller's PATH")
	require.Regexp(t, `^agent-fleet-worker-w1-[0-9a-f]{12}\.service$`, wk.Unit)

	st, err := w.f.Status(ctx, "w1")
	require.NoError(t, err)
	require.True(t, st.Unit.Running())
	require.Equal(t, 2, st.ProcessCount, "the shim and sleep")
	names := []string{st.Processes[0].Name, st.Processes[1].Name}
	require.Contains(t, names, "sleep")

	// The worker is on the intercom as itself.
	require.Eventually(t, func() bool {
		api := &intercom.LocalAPIClient{Path: w.p.LocalAPISocket()}
		peer, err := api.Peer(ctx, "w1")
		return err == nil && peer.Connected && peer.PID == wk.MainPID
	}, 5*time.Second, 20*time.Millisecond, "the shim holds the worker's session")

	res, err := w.f.Stop(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.Empty(t, res.Survivors)
	requireCollected(t, w.m, wk) // once its exit record is written, not left failed
	res, err = w.f.Stop(ctx, "w1")
	require.NoError(t, err, "stop is safe twice")
	require.True(t, res.AlreadyEnded)
}

func TestExitStatusAfterReadiness(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("three", "sh", "-c", "sleep 0.5; exit 3")
	require.Equal(t, fleet.StateRunning, wk.State)
	require.Eventually(t, func() bool {
		st, err := w.f.Status(ctx, "three")
		return err == nil && st.Worker.State == fleet.StateExited
	}, 10*time.Second, 50*time.Millisecond)
	st, _ := w.f.Status(ctx, "three")
	require.True(t, st.Worker.HasExit)
	require.Equal(t, "exited", st.Worker.ExitCode)
	require.Equal(t, 3, st.Worker.ExitStatus)
}

func TestDescendantsAreGoneAfterStop(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("escapers", "sh", "-c", `setsid sleep 300 & (sleep 301 &) ; nohup sleep 302 >/dev/null 2>&1 & sleep 303`)
	var pids []int
	require.Eventually(t, func() bool {
		st, err := w.f.Status(ctx, "escapers")
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, p := range st.Processes {
			if p.Name == "sleep" {
				pids = append(pids, p.PID)
			}
		}
		return len(pids) == 4
	}, 5*time.Second, 20*time.Millisecond, "setsid, double fork and nohup stay in the unit's cgroup")
	res, err := w.f.Stop(ctx, "escapers")
	require.NoError(t, err)
	require.Empty(t, res.Survivors)
	unitstest.RequireOnlyExitRecord(t, wk.ControlGroup) // proven from the cgroup
	for _, pid := range pids {
		unitstest.RequireEnded(t, pid)
	}
}

// brokenScript is an executable whose interpreter does not exist: its exec
// fails, so the worker never becomes ready.
func brokenScript(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "broken.sh")
	require.NoError(t, os.WriteFile(p, []byte("#!/nonexistent/interpreter\necho never\n"), 0o755))
	return p
}

func TestFailedSpawnIsAnErrorAndTheIDCanBeReused(t *testing.T) {
	w := newWorld(t)
	_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "bad", Command: []string{brokenScript(t)}})
	require.ErrorIs(t, err, fleet.ErrSpawnFailed)
	var se *fleet.SpawnError
	require.ErrorAs(t, err, &se)
	require.Contains(t, se.Reason, "could not be executed")
	require.Contains(t, strings.Join(se.LogTail, "\n"), "cannot execute", "the last log lines say why")
	rec, err := w.reg.Get(ctx, "bad")
	require.NoError(t, err)
	require.Equal(t, fleet.StateFailed, rec.State)
	require.Equal(t, 127, rec.ExitStatus)

	// Respawning the id works without any manual reset.
	again := w.spawn("bad", "sleep", "60")
	require.Equal(t, 2, again.Generation)
	require.NotEqual(t, rec.RunID, again.RunID)
}

func TestManyFailingSpawnsLeaveNoFailedUnits(t *testing.T) {
	w := newWorld(t)
	n := 200
	if testing.Short() {
		n = 20
	}
	broken := brokenScript(t)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: fmt.Sprintf("fail-%03d", i), Command: []string{broken}})
			require.ErrorIs(t, err, fleet.ErrSpawnFailed)
		}()
	}
	wg.Wait()
	left, err := w.m.ListUnits(ctx, "agent-fleet-worker-fail-*")
	require.NoError(t, err)
	require.Empty(t, left, "no failed units pile up")
}

func TestConcurrentSpawnsOfOneID(t *testing.T) {
	w := newWorld(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "solo", Command: []string{"sleep", "60"}})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, fleet.ErrConflict)
		}
	}
	require.Equal(t, 1, won, "exactly one spawn wins")
}

// A unit that runs without a record (a lost or rebuilt registry) refuses
// its id: the spawn is a conflict and leaves no record behind.
func TestSpawnRefusesAnIDWhoseUnitRunsWithoutARecord(t *testing.T) {
	w := newWorld(t)
	first := w.spawn("twin", "sleep", "60")
	lost, err := fleet.OpenRegistry(ctx, filepath.Join(shortDir(t), "fleet.db"))
	require.NoError(t, err)
	t.Cleanup(func() { lost.Close() })
	f2 := w.fleet("boss", func(c *fleet.Config) { c.Registry = lost })

	_, err = f2.Spawn(ctx, fleet.SpawnRequest{ID: "twin", Command: []string{"sleep", "60"}})
	require.ErrorIs(t, err, fleet.ErrConflict)
	require.Contains(t, err.Error(), first.Unit)
	require.Contains(t, err.Error(), "stop it first")
	left, err := lost.List(ctx, fleet.Filter{})
	require.NoError(t, err)
	require.Empty(t, left, "the refused reservation was taken back")

	_, err = w.f.Stop(ctx, "twin")
	require.NoError(t, err)
	again, err := f2.Spawn(ctx, fleet.SpawnRequest{ID: "twin", Command: []string{"sleep", "60"}})
	require.NoError(t, err)
	require.Equal(t, 2, again.Generation, "the taken-back reservation's generation is not given again")
	_, err = f2.Stop(ctx, "twin")
	require.NoError(t, err)
}

// Another process's status or list leaves a reservation its spawn may
// still be working on alone (no unit yet is not a lost worker); one older
// than any spawn waits is lost.
func TestSettleLeavesAnInFlightSpawnAlone(t *testing.T) {
	w := newWorld(t)
	r := &fleet.Worker{ID: "inflight", Kind: "exec", Manager: "boss", Command: []string{"sleep", "1"}}
	require.NoError(t, w.reg.Reserve(ctx, r))
	st, err := w.f.Status(ctx, "inflight")
	require.NoError(t, err)
	require.Equal(t, fleet.StateProvisioning, st.Worker.State)

	later := w.fleet("boss", func(c *fleet.Config) {
		c.Now = func() time.Time { return time.Now().Add(c.StartTimeout + 11*time.Second) }
	})
	st, err = later.Status(ctx, "inflight")
	require.NoError(t, err)
	require.Equal(t, fleet.StateLost, st.Worker.State, "its spawn is gone: no unit ever came")
}

func TestCommandResolution(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nsleep 60\n"), 0o755))
	wk, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "rel", Cwd: dir, Command: []string{"./job.sh"}})
	require.NoError(t, err)
	require.Equal(t, script, wk.Command[0], "relative to the working directory")
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "nope", Command: []string{"no-such-command-xyz"}})
	require.ErrorIs(t, err, fleet.ErrCommandNotFound)
	require.Contains(t, err.Error(), "PATH")
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "bad id!", Command: []string{"true"}})
	require.ErrorIs(t, err, fleet.ErrInvalidID)
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "filecwd", Cwd: script, Command: []string{"true"}})
	require.ErrorIs(t, err, fleet.ErrInvalidRequest)
	require.Contains(t, err.Error(), "working directory "+script+" is not a directory")
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "nocwd", Cwd: filepath.Join(dir, "gone"), Command: []string{"true"}})
	require.ErrorIs(t, err, fleet.ErrInvalidRequest)
	require.Contains(t, err.Error(), "does not exist")
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "k", Kind: "gemini", Command: []string{"true"}})
	require.ErrorIs(t, err, fleet.ErrUnsupportedKind)
	// Coding-agent options on an exec worker would not be applied: refused.
	for _, req := range []fleet.SpawnRequest{{Permission: "read-only"}, {Model: "m"}, {Effort: "high"}, {TurnTimeout: time.Minute}} {
		req.ID, req.Command = "opt", []string{"true"}
		_, err = w.f.Spawn(ctx, req)
		require.ErrorIs(t, err, fleet.ErrInvalidRequest, "%+v", req)
	}
}

// What Linux or systemd could not start a worker with is refused before
// anything is recorded; what they can is started, whole.
func TestCommandAndEnvSizes(t *testing.T) {
	w := newWorld(t)
	out := filepath.Join(t.TempDir(), "out")
	long := strings.Repeat("a", fleet.MaxExecString)
	script := `printf '%s %s %s' "${#1}" "$#" "${#BIG}" > "$0"`
	args := []string{"sh", "-c", script, out}
	for len(args) < 7 {
		args = append(args, long) // 3 × 128 KiB: near MaxExecList
	}
	_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "sizes", Command: args, Env: []string{"BIG=" + long[:fleet.MaxExecString-4]}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(out)
		return string(b) == fmt.Sprintf("%d 3 %d", fleet.MaxExecString, fleet.MaxExecString-4)
	}, 10*time.Second, 20*time.Millisecond, "the command ran with every argument and variable whole")

	for _, req := range []fleet.SpawnRequest{
		{ID: "bigenv", Command: []string{"true"}, Env: []string{"BIG=" + long}},
		{ID: "bigarg", Command: []string{"echo", long + "b"}},
		{ID: "manyargs", Command: append([]string{"echo"}, slices.Repeat([]string{long}, 5)...)},
		{ID: "manyenv", Command: []string{"true"}, Env: []string{"A=" + long[:100000], "B=" + long[:100000], "C=" + long[:100000], "D=" + long[:100000], "E=" + long[:100000], "F=" + long[:100000]}},
	} {
		_, err := w.f.Spawn(ctx, req)
		require.ErrorIs(t, err, fleet.ErrInvalidRequest, req.ID)
		require.Contains(t, err.Error(), "pass a path to a file instead", req.ID)
		_, err = w.f.Status(ctx, req.ID)
		require.ErrorIs(t, err, fleet.ErrNotFound, "%s: nothing recorded", req.ID)
	}
}

func TestWorkerEnvironment(t *testing.T) {
	w := newWorld(t)
	// The user manager's own environment carries an identity and a scope
	// that must not leak into workers.
	inst := unitstest.Require(t)
	_ = inst
	out := filepath.Join(t.TempDir(), "env")
	f := w.fleet("boss", func(c *fleet.Config) {
		base := c.CallerEnv
		c.CallerEnv = func(k string) string {
			switch k {
			case "CLAUDE_INTERCOM_SESSION_ID", "AGENT_INTERCOM_SESSION_ID", "TMUXDECK_SESSION", "SECRET_TOKEN":
				return "caller-" + k
			case "AGENT_INTERCOM_SCOPE_ID":
				return "Scope_MANAGERS_0001"
			case "LANG":
				return "C.UTF-8"
			}
			return base(k)
		}
	})
	wk, err := f.Spawn(ctx, fleet.SpawnRequest{ID: "envy", Role: "probe", Env: []string{"API_KEY=sk-123"},
		Command: []string{"sh", "-c", "env > " + out + "; sleep 60"}})
	require.NoError(t, err)
	var env string
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(out)
		env = string(data)
		return err == nil && strings.Contains(env, "AGENT_INTERCOM_WORKER_ID")
	}, 5*time.Second, 20*time.Millisecond)
	for _, want := range []string{
		"AGENT_INTERCOM_WORKER_ID=envy", "AGENT_INTERCOM_RUN_ID=" + wk.RunID, "AGENT_INTERCOM_SYSTEMD_UNIT=" + wk.Unit,
		"AGENT_INTERCOM_MANAGER_SESSION_ID=boss", "AGENT_INTERCOM_MANAGER_TARGET=boss", "AGENT_INTERCOM_OWNED=1",
		"AGENT_INTERCOM_ROLE=probe", "AGENT_INTERCOM_SESSION_ID=envy", "AGENT_INTERCOM_SESSION_NAME=envy",
		"AGENT_INTERCOM_SCOPE_ID=Scope_MANAGERS_0001", "PI_CODING_AGENT_DIR=" + w.p.AgentDir, "API_KEY=sk-123",
		"LANG=C.UTF-8", "HOME=/root",
	} {
		require.Contains(t, env, want+"\n")
	}
	for _, banned := range []string{"CLAUDE_INTERCOM_SESSION_ID", "TMUXDECK_SESSION", "SECRET_TOKEN", "caller-", "NOTIFY_SOCKET"} {
		require.NotContains(t, env, banned)
	}
	require.Equal(t, []string{"API_KEY"}, wk.EnvKeys, "names recorded, values never")
	rec, _ := w.reg.Get(ctx, "envy")
	require.NotContains(t, fmt.Sprintf("%+v", rec), "sk-123")
}

// Stopping the worker whose shim started the broker leaves every other
// session connected: the broker never lives in a worker's cgroup.
func TestStoppingAWorkerNeverTakesTheBrokerDown(t *testing.T) {
	w := newWorld(t)
	other := w.spawn("bystander", "sleep", "300")
	victim := w.spawn("victim", "sleep", "300")
	api := &intercom.LocalAPIClient{Path: w.p.LocalAPISocket()}
	_, err := w.f.Stop(ctx, victim.ID)
	require.NoError(t, err)
	peer, err := api.Peer(ctx, other.ID)
	require.NoError(t, err)
	require.True(t, peer.Connected)
}

// A stop's grace is the caller's, whichever sends the SIGTERM: the unit's
// stop job when its own stop timeout (3 s here, the fleet's at spawn) is no
// shorter, else the fleet, so that a longer grace is not cut short by the
// unit's SIGKILL. A worker that ignores SIGTERM is SIGKILLed by the fleet
// at the grace either way — a SIGKILL systemd sent first would end the
// unit before the fleet reports one — and one that ends on SIGTERM hears
// nothing more.
func TestStopGraceIsTheCallers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		ignore bool
		want   []string
	}{
		{"stop job's SIGTERM", time.Second, true, []string{"SIGTERM 1s", "SIGKILL 1s"}},
		{"fleet's SIGTERM, grace beyond the unit's", 5 * time.Second, true, []string{"SIGTERM 5s", "SIGKILL 5s"}},
		{"ends on SIGTERM", 5 * time.Second, false, []string{"SIGTERM 5s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			script := "exec sleep 300"
			if tc.ignore {
				script = `trap "" TERM; exec sleep 300`
			}
			wk := w.spawn("graced", "sh", "-c", script)
			var steps []string
			res, err := w.f.StopWith(ctx, wk.ID, fleet.StopOptions{Grace: tc.grace, Progress: func(s fleet.StopStep) {
				steps = append(steps, fmt.Sprintf("%s %s", s.Signal, s.Grace))
			}})
			require.NoError(t, err)
			require.Equal(t, tc.want, steps)
			require.Equal(t, fleet.StateStopped, res.Worker.State)
			require.True(t, res.Worker.HasExit)
			if tc.ignore {
				require.Equal(t, int(syscall.SIGKILL), res.Worker.ExitStatus, "%+v", res.Worker)
			}
			require.Positive(t, res.Took.End)
		})
	}
}

func TestStopRefusesAnotherManagersWorker(t *testing.T) {
	w := newWorld(t)
	w.spawn("mine", "sleep", "60")
	_, err := w.fleet("intruder").Stop(ctx, "mine")
	require.ErrorIs(t, err, fleet.ErrNotOwner)
	require.Contains(t, err.Error(), "adopt")
}

// The user manager's own environment (what `systemctl --user
// set-environment` adds) never reaches a worker when it carries another
// session's identity.
func TestManagerEnvironmentIsStripped(t *testing.T) {
	w := newWorld(t)
	inst := unitstest.Require(t)
	setenv := func(args ...string) {
		cmd := exec.Command("systemctl", append([]string{"--user"}, args...)...)
		cmd.Env = append(os.Environ(), inst.Env()...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	// AGENT_INTERCOM_ROLE is one of the identity variables, but this
	// worker has no role: the manager's must not stand in for it.
	setenv("set-environment", "CODEX_INTERCOM_SESSION_ID=leaked", "TMUXDECK_TEAM=leaked", fleet.EnvRole+"=leaked", "HARMLESS_SETTING=kept")
	t.Cleanup(func() {
		setenv("unset-environment", "CODEX_INTERCOM_SESSION_ID", "TMUXDECK_TEAM", fleet.EnvRole, "HARMLESS_SETTING")
	})
	out := filepath.Join(t.TempDir(), "env")
	w.spawn("clean", "sh", "-c", "env > "+out+"; sleep 60")
	var env string
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(out)
		env = string(data)
		return err == nil && strings.Contains(env, "AGENT_INTERCOM_WORKER_ID")
	}, 5*time.Second, 20*time.Millisecond)
	require.NotContains(t, env, "leaked")
	require.NotContains(t, env, fleet.EnvShimKeep)
	require.NotContains(t, env, fleet.EnvLease, "fleet's note of the lease stays in the unit")
	require.Contains(t, env, "HARMLESS_SETTING=kept\n")
	require.Contains(t, env, fleet.EnvSessionID+"=clean\n")
}

// A second user manager of the same user (another shell's private one)
// does not know the first one's units: a worker whose cgroup still runs is
// not lost to it, and it is not spawned twice; once it ends, its end is
// read from its exit record.
func TestAWorkerOfAnotherUserManagerIsNotLost(t *testing.T) {
	w := newWorld(t)
	wk, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "elsewhere", Command: []string{"sleep", "300"}})
	require.NoError(t, err)
	other := unitstest.Connect(t, unitstest.OwnManager(t))
	f2 := w.fleet("boss", func(c *fleet.Config) { c.Units = other })
	st, err := f2.Status(ctx, "elsewhere")
	require.NoError(t, err)
	require.Equal(t, fleet.StateRunning, st.Worker.State, "its cgroup runs: not lost")
	_, err = f2.Spawn(ctx, fleet.SpawnRequest{ID: "elsewhere", Command: []string{"true"}})
	require.ErrorIs(t, err, fleet.ErrConflict)

	_, err = w.f.Stop(ctx, "elsewhere")
	require.NoError(t, err)
	requireCollected(t, w.m, wk)
	st, err = f2.Status(ctx, "elsewhere")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, st.Worker.State)
}

// A wedged user manager (SIGSTOPped) makes spawn fail within its deadline
// with a clear error, instead of hanging.
func TestSpawnFailsFastOnAWedgedManager(t *testing.T) {
	inst := unitstest.OwnManager(t)
	w := &world{t: t, p: intercom.NewPaths(shortDir(t))}
	w.m = unitstest.Connect(t, inst)
	var err error
	w.reg, err = fleet.OpenRegistry(ctx, fleet.RegistryPath(w.p))
	require.NoError(t, err)
	defer w.reg.Close()
	f := w.fleet("boss")
	require.NoError(t, syscall.Kill(inst.PID, syscall.SIGSTOP))
	defer syscall.Kill(inst.PID, syscall.SIGCONT)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = f.Spawn(sctx, fleet.SpawnRequest{ID: "stuck", Command: []string{"sleep", "60"}})
	require.Error(t, err)
	require.Less(t, time.Since(start), 8*time.Second, "bounded by the deadline")
	require.ErrorIs(t, err, fleet.ErrSpawnFailed)
	require.Contains(t, err.Error(), "did not answer")
	require.NoError(t, syscall.Kill(inst.PID, syscall.SIGCONT))
}

// A worker systemd stopped at its maximum runtime says so.
func TestMaxRuntimeIsTheStopReason(t *testing.T) {
	w := newWorld(t)
	_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "short", Command: []string{"sleep", "300"}, MaxRuntime: time.Second})
	require.NoError(t, err)
	var st *fleet.Status
	require.Eventually(t, func() bool {
		st, err = w.f.Status(ctx, "short")
		return err == nil && !st.Worker.State.Live()
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, fleet.StopMaxRuntime, st.Worker.StopReason, "%+v", st.Worker)
	rec, err := w.reg.Get(ctx, "short")
	require.NoError(t, err)
	require.Equal(t, fleet.StopMaxRuntime, rec.StopReason, "recorded")

	// One that outlives systemd's SIGTERM is SIGKILLed at the stop timeout:
	// still an end at its maximum runtime, not a failure.
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "stubborn", Command: []string{"sh", "-c", `trap "" TERM; while :; do sleep 1; done`}, MaxRuntime: time.Second})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err = w.f.Status(ctx, "stubborn")
		return err == nil && !st.Worker.State.Live()
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, fleet.StateExited, st.Worker.State, "%+v", st.Worker)
	require.Equal(t, fleet.EndMaxRuntime, fleet.EndOf(st.Worker))

	stopped := w.spawn("asked", "sleep", "300")
	_, err = w.f.Stop(ctx, stopped.ID)
	require.NoError(t, err)
	st, err = w.f.Status(ctx, "asked")
	require.NoError(t, err)
	require.Equal(t, "manager-requested", st.Worker.StopReason)
}

// A worker's log file is 0600, like everything below the agent directory
// (README "Security model"): systemd's StandardOutput=append: alone would
// create it with the user manager's umask, 0644.
func TestWorkerLogIsPrivate(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("logmode", "sh", "-c", "echo hello; sleep 300")
	require.NotEmpty(t, wk.LogPath, "no journal here: the worker logs to a file")
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(wk.LogPath)
		return err == nil && strings.Contains(string(data), "hello")
	}, 10*time.Second, 20*time.Millisecond, "the unit writes its output there")
	fi, err := os.Stat(wk.LogPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s", wk.LogPath)
}

// A command that ends within the readiness grace is reported as it ended,
// not as running: a non-zero end fails the spawn ("started; it has
// already exited (exit 1)"), a clean one is a worker that exited. The
// grace here is long, so that even a slow machine sees these commands end
// within it.
func TestCommandThatEndsAtOnceIsReported(t *testing.T) {
	w := newWorld(t, func(c *fleet.Config) { c.ReadyGrace = time.Minute })
	for _, c := range []struct {
		id   string
		argv []string
		exit int
	}{
		{"f-false", []string{"false"}, 1},
		{"f-ls", []string{"ls", "/nonexistent"}, 2},
		{"f-exit3", []string{"sh", "-c", "exit 3"}, 3},
	} {
		wk, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: c.id, Command: c.argv})
		require.ErrorIs(t, err, fleet.ErrSpawnFailed, "%v", c.argv)
		require.Contains(t, err.Error(), fmt.Sprintf("started; it has already exited (exit %d)", c.exit))
		require.NotNil(t, wk, "the record is kept")
		require.Equal(t, fleet.StateExited, wk.State)
		require.True(t, wk.HasExit)
		require.Equal(t, c.exit, wk.ExitStatus)
		require.NotZero(t, wk.MainPID, "%v: the main pid is recorded though the unit is gone", c.argv)
		require.True(t, wk.ReadyAt.IsZero(), "%v: it ended before it was ready: readyAt %s, endedAt %s", c.argv, wk.ReadyAt, wk.EndedAt)
		require.NotZero(t, wk.EndedAt)
	}
	wk, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "f-true", Command: []string{"true"}})
	require.NoError(t, err, "a clean exit is a worker that finished")
	require.Equal(t, fleet.StateExited, wk.State)
	require.True(t, wk.HasExit)
	require.Zero(t, wk.ExitStatus)
	require.NotZero(t, wk.MainPID, "the main pid is recorded though the unit is gone")
	require.True(t, wk.ReadyAt.IsZero(), "it ended before it was ready: readyAt %s, endedAt %s", wk.ReadyAt, wk.EndedAt)
	got, err := w.reg.Get(ctx, "f-true")
	require.NoError(t, err)
	require.True(t, got.ReadyAt.IsZero(), "as recorded")
	require.False(t, got.EndedAt.Before(got.CreatedAt))
}

// A worker's id is its session id: a spawn refuses the caller's own id,
// and an id a session that is not such a worker holds on the broker,
// before any unit starts or record is made (the shim could not register
// it). Once that session is gone, the id spawns.
func TestSpawnRefusesASessionsID(t *testing.T) {
	w := newWorld(t)
	_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "boss", Command: []string{"sleep", "300"}})
	require.ErrorIs(t, err, fleet.ErrInvalidRequest)
	require.ErrorContains(t, err, `"boss" is yours`)

	held := intercomtest.Register(t, w.p, "alpha", intercomtest.RegisterOptions{})
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "alpha", Command: []string{"sleep", "300"}})
	require.ErrorIs(t, err, fleet.ErrConflict)
	require.ErrorContains(t, err, fmt.Sprintf(`session "alpha" is connected to the broker (pid %d)`, os.Getpid()))
	for _, id := range []string{"boss", "alpha"} {
		_, err := w.reg.Get(ctx, id)
		require.ErrorIs(t, err, fleet.ErrNotFound, "no record of %s", id)
		list, err := w.m.ListUnits(ctx, fleet.UnitPrefix+id+"-*")
		require.NoError(t, err)
		require.Empty(t, list, "no unit of %s", id)
	}

	require.NoError(t, held.Conn.Close())
	require.Eventually(t, func() bool {
		p, err := (&intercom.LocalAPIClient{Path: w.p.LocalAPISocket()}).Peer(ctx, "alpha")
		return err == nil && !p.Connected
	}, 5*time.Second, 10*time.Millisecond)
	wk := w.spawn("alpha", "sleep", "300")
	require.Equal(t, fleet.StateRunning, wk.State)
	_, err = w.f.Stop(ctx, "alpha")
	require.NoError(t, err)
	wk = w.spawn("alpha", "sleep", "300")
	require.Equal(t, fleet.StateRunning, wk.State, "its own session, gone with its stop, is no reason to refuse")
}

// A spawn whose command ended within the readiness grace returns once
// the shim is gone: the id spawns again at once, and a stop right after
// finds it ended.
func TestSpawnOfAnEndedCommandReturnsItEnded(t *testing.T) {
	w := newWorld(t)
	for i := range 3 {
		_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "quick", Command: []string{"false"}})
		require.ErrorContains(t, err, "started; it has already exited (exit 1)", "round %d", i)
		wk, err := w.reg.Get(ctx, "quick")
		require.NoError(t, err)
		require.Equal(t, fleet.StateExited, wk.State)
		res, err := w.f.Stop(ctx, "quick")
		require.NoError(t, err)
		require.True(t, res.AlreadyEnded, "round %d: nothing was left to stop", i)
		require.Equal(t, fleet.StateExited, res.Worker.State, "round %d: the end stays the command's", i)
	}
	wk := w.spawn("quick", "sleep", "300")
	require.Equal(t, fleet.StateRunning, wk.State, "the id spawns at once")
}
