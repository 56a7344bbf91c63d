//go:build linux

package fleet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/shim"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// reportToManager runs inside a worker: it asks the worker's shim who
// manages the worker now and sends that manager text, through the shim's
// holder (the worker's own connection).
func reportToManager(text string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := intercom.DefaultPaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	hc, err := intercom.DialHolder(ctx, p, os.Getenv("AGENT_INTERCOM_SESSION_ID"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial holder:", err)
		return 1
	}
	var m shim.Manager
	if err := hc.Call(ctx, shim.OpManager, nil, &m); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	res, err := hc.Send(ctx, intercom.SendRequest{To: m.Manager, Text: text})
	if err != nil || !res.OK {
		fmt.Fprintln(os.Stderr, "send:", err, res)
		return 1
	}
	fmt.Println("reported to", m.Manager)
	return 0
}

// reporter spawns a worker that reports to its current manager each time
// the test pokes it (a file "poke" in its working directory).
func (w *world) reporter(f *fleet.Fleet, id string, lease time.Duration) (*fleet.Worker, func(text string)) {
	w.t.Helper()
	exe, err := os.Executable()
	require.NoError(w.t, err)
	dir := shortDir(w.t)
	script := `while :; do if [ -e poke ]; then t=$(cat poke); rm -f poke; FLEET_TEST_REPORT="$t" "$0" >>report.log 2>&1; fi; sleep 0.05; done`
	wk, err := f.Spawn(ctx, fleet.SpawnRequest{ID: id, Cwd: dir, Lease: lease, Command: []string{"sh", "-c", script, exe}})
	require.NoError(w.t, err)
	return wk, func(text string) {
		require.NoError(w.t, os.WriteFile(filepath.Join(dir, "poke.tmp"), []byte(text), 0o600))
		require.NoError(w.t, os.Rename(filepath.Join(dir, "poke.tmp"), filepath.Join(dir, "poke")))
	}
}

// manager is a manager's session holder: it receives messages, and records
// its workers' activity as `agent-fleet mcp` does.
type manager struct {
	sess     *intercom.Session
	rec      *fleet.ActivityRecorder
	got      chan *intercom.InboundMessage
	recorded chan recorded
}

type recorded struct {
	from, how string
	err       error
}

// loseRegistry deletes the registry file under the running workers and
// opens a fresh one in its place, as a user who deleted it would leave it.
func (w *world) loseRegistry() {
	w.t.Helper()
	path := fleet.RegistryPath(w.p)
	require.NoError(w.t, os.Remove(path))
	w.reg.Close()
	reg, err := fleet.OpenRegistry(ctx, path)
	require.NoError(w.t, err)
	w.reg = reg
}

func (w *world) manager(id string, now func() time.Time) *manager {
	w.t.Helper()
	m := &manager{got: make(chan *intercom.InboundMessage, 64), recorded: make(chan recorded, 64)}
	m.rec = fleet.StartActivityRecorder(fleet.ActivityConfig{
		Paths: w.p, Manager: id, Peers: &intercom.LocalAPIClient{Path: w.p.LocalAPISocket()}, Now: now,
		Recorded: func(from, how string, err error) { m.recorded <- recorded{from, how, err} },
	})
	ident := intercom.Identity{SessionID: id, Name: id, Model: "test", Cwd: "/", PID: os.Getpid(),
		StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}
	var err error
	m.sess, err = intercom.OpenSession(ctx, intercom.SessionConfig{Paths: w.p, Identity: ident, Reconnect: true,
		OnMessage: func(msg *intercom.InboundMessage) {
			m.rec.OnMessage(msg)
			m.got <- msg
		}})
	require.NoError(w.t, err)
	w.t.Cleanup(m.close)
	return m
}

func (m *manager) close() {
	if m.sess != nil {
		m.sess.Close()
		m.sess = nil
		m.rec.Close()
	}
}

func (m *manager) receive(t *testing.T, from, text string) {
	t.Helper()
	select {
	case msg := <-m.got:
		require.Equal(t, from, msg.From.ID)
		require.Equal(t, text, msg.Message.Text)
	case <-time.After(10 * time.Second):
		t.Fatalf("no message %q from %s", text, from)
	}
}

func (m *manager) outcome(t *testing.T) recorded {
	t.Helper()
	select {
	case r := <-m.recorded:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("activity was never judged")
	}
	return recorded{}
}

// clock is the injected clock of lease deadlines.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

// newClock starts at the registry's precision (milliseconds).
func newClock() *clock { return &clock{t: time.UnixMilli(time.Now().UnixMilli())} }

func requireSameTime(t *testing.T, want, got time.Time, msg ...any) {
	t.Helper()
	require.True(t, want.Equal(got), append([]any{"want %s, got %s", want, got}, msg...)...)
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func withClock(c *clock) func(*fleet.Config) { return func(cfg *fleet.Config) { cfg.Now = c.Now } }

func TestAdoptionMovesAWorkerToANewManager(t *testing.T) {
	w := newWorld(t)
	boss := w.manager("boss", nil)
	wk, poke := w.reporter(w.f, "w1", 0)
	require.Equal(t, "boss", wk.Manager)
	poke("hello boss")
	boss.receive(t, "w1", "hello boss")

	f2 := w.fleet("boss2")
	_, err := f2.Stop(ctx, "w1")
	require.ErrorIs(t, err, fleet.ErrNotOwner, "another manager's worker")
	require.Contains(t, err.Error(), "adopt it first")
	_, err = f2.Adopt(ctx, "w1", false)
	require.ErrorIs(t, err, fleet.ErrManagerConnected, "boss is connected")

	// The manager's session ends; its worker keeps running.
	boss.close()
	st, err := w.f.Status(ctx, "w1")
	require.NoError(t, err)
	require.True(t, st.Unit.Running())

	boss2 := w.manager("boss2", nil)
	adopted, err := f2.Adopt(ctx, "w1", false)
	require.NoError(t, err)
	require.Equal(t, "boss2", adopted.Manager)
	require.Equal(t, "boss", adopted.FirstManager)
	require.Equal(t, wk.RunID, adopted.RunID, "the same incarnation: not restarted")

	// The worker learns its new manager from its shim, without restarting.
	poke("hello boss2")
	boss2.receive(t, "w1", "hello boss2")

	_, err = w.f.Stop(ctx, "w1")
	require.ErrorIs(t, err, fleet.ErrNotOwner, "the old manager lost it")
	res, err := f2.Stop(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.Empty(t, res.Survivors)
	unitstest.RequireOnlyExitRecord(t, wk.ControlGroup)
	// The stop proved the cgroup empty of the worker's processes; systemd
	// collects the unit and removes its cgroup once the exit record's
	// ExecStopPost has ended.
	requireCollected(t, w.m, wk)
}

func TestAdoptForceAndOrphans(t *testing.T) {
	c := newClock()
	w := newWorld(t, withClock(c))
	boss := w.manager("boss", c.Now)
	w.spawn("busy", "sleep", "300")
	agentA := w.fleet("agent-a", withClock(c))
	_, err := agentA.Spawn(ctx, fleet.SpawnRequest{ID: "orphan", Command: []string{"sleep", "300"}})
	require.NoError(t, err)
	op := w.fleet("operator-alice", withClock(c))
	pw, err := op.Spawn(ctx, fleet.SpawnRequest{ID: "personal", Command: []string{"sleep", "300"}})
	require.NoError(t, err)
	require.True(t, pw.LeaseDeadline.IsZero(), "an operator's worker has no idle lease")

	c.Advance(2 * time.Hour)
	me := w.fleet("rescuer", withClock(c))
	got, err := me.AdoptOrphans(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1, "only the expired worker of a disconnected agent manager")
	require.Equal(t, "orphan", got[0].ID)
	requireSameTime(t, c.Now().Add(time.Hour), got[0].LeaseDeadline, "adoption renews")

	forced, err := me.Adopt(ctx, "busy", true)
	require.NoError(t, err, "--force takes it from a connected manager")
	require.Equal(t, "rescuer", forced.Manager)
	boss.close()
}

func TestLeaseFollowsVerifiedActivity(t *testing.T) {
	c := newClock()
	var mu sync.Mutex
	var checkpoints []string
	notify := func(ctx context.Context, id, text string) error {
		mu.Lock()
		checkpoints = append(checkpoints, text)
		mu.Unlock()
		return nil
	}
	policy := fleet.LeasePolicy{Default: time.Hour, Warning: 10 * time.Minute, Retry: 5 * time.Minute, Grace: 15 * time.Minute}
	w := newWorld(t, withClock(c), func(cfg *fleet.Config) { cfg.Leases, cfg.Notify = policy, notify })
	boss := w.manager("boss", c.Now)
	wk, poke := w.reporter(w.f, "w1", 0)
	requireSameTime(t, c.Now().Add(time.Hour), wk.LeaseDeadline)
	cleanup := func() *fleet.CleanupReport {
		t.Helper()
		rep, err := w.f.Cleanup(ctx, fleet.CleanupOptions{Execute: true})
		require.NoError(t, err)
		return rep
	}
	kinds := func(rep *fleet.CleanupReport) []string {
		var out []string
		for _, a := range rep.Actions {
			out = append(out, a.Kind+":"+a.ID)
		}
		return out
	}

	c.Advance(45 * time.Minute)
	require.Empty(t, kinds(cleanup()), "nothing before the warning window")

	c.Advance(10 * time.Minute) // 5 min before the deadline
	require.Equal(t, []string{"checkpoint:w1"}, kinds(cleanup()))
	mu.Lock()
	require.Len(t, checkpoints, 1)
	require.Contains(t, checkpoints[0], "manager boss")
	mu.Unlock()
	c.Advance(2 * time.Minute)
	require.Empty(t, kinds(cleanup()), "checkpoints repeat only after the retry interval")

	// Activity from the worker inside its window renews it.
	poke("still working")
	boss.receive(t, "w1", "still working")
	r := boss.outcome(t)
	require.NoError(t, r.err)
	require.Equal(t, fleet.ActivityVerified, r.how)
	rec, err := w.reg.Get(ctx, "w1")
	require.NoError(t, err)
	requireSameTime(t, c.Now().Add(time.Hour), rec.LeaseDeadline)
	require.Zero(t, rec.CheckpointAttempts)

	// Manager→worker messages and manager liveness renew nothing.
	res, err := boss.sess.Send(ctx, intercom.SendRequest{To: "w1", Text: "are you there?"})
	require.NoError(t, err)
	require.True(t, res.OK)

	c.Advance(55 * time.Minute)
	require.Equal(t, []string{"checkpoint:w1"}, kinds(cleanup()))
	c.Advance(6 * time.Minute) // past the deadline, inside the grace period
	require.Equal(t, []string{"checkpoint:w1"}, kinds(cleanup()), "repeated until the grace deadline")
	rec, err = w.reg.Get(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, 2, rec.CheckpointAttempts)
	requireSameTime(t, rec.LeaseDeadline.Add(15*time.Minute), rec.GraceDeadline)

	// The preview acts on nothing.
	c.Advance(15 * time.Minute)
	prev, err := w.f.Cleanup(ctx, fleet.CleanupOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"stop:w1"}, kinds(prev))
	require.False(t, prev.Actions[0].Done)
	st, err := w.f.Status(ctx, "w1")
	require.NoError(t, err)
	require.True(t, st.Unit.Running())

	rep := cleanup()
	require.Equal(t, []string{"stop:w1"}, kinds(rep))
	require.True(t, rep.Actions[0].Done, rep.Actions[0].Error)
	rec, err = w.reg.Get(ctx, "w1")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, rec.State)
	require.Equal(t, "lease-expired", rec.StopReason)
	requireCollected(t, w.m, wk)
}

func TestCheckpointIsDeliveredToTheWorker(t *testing.T) {
	c := newClock()
	var sent []string
	notify := func(ctx context.Context, id, text string) error {
		ident := intercom.Identity{SessionID: "agent-fleet", Name: "agent-fleet", Model: "agent-fleet", Cwd: "/",
			PID: os.Getpid(), StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}
		s, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: intercom.NewPaths(os.Getenv("FLEET_TEST_AGENT_DIR")), Identity: ident})
		if err != nil {
			return err
		}
		defer s.Close()
		res, err := s.Send(ctx, intercom.SendRequest{To: id, Text: text})
		if err != nil {
			return err
		}
		if !res.OK {
			return fmt.Errorf("not delivered: %s", res.Reason)
		}
		sent = append(sent, id)
		return nil
	}
	w := newWorld(t, withClock(c), func(cfg *fleet.Config) { cfg.Notify = notify })
	t.Setenv("FLEET_TEST_AGENT_DIR", w.p.AgentDir)
	w.spawn("w1", "sleep", "300")
	c.Advance(55 * time.Minute)
	rep, err := w.f.Cleanup(ctx, fleet.CleanupOptions{Execute: true})
	require.NoError(t, err)
	require.Len(t, rep.Actions, 1)
	require.True(t, rep.Actions[0].Done, rep.Actions[0].Error)
	require.Equal(t, []string{"w1"}, sent, "the worker's session stored the checkpoint")
}

func TestImpersonationRenewsNothing(t *testing.T) {
	c := newClock()
	w := newWorld(t, withClock(c))
	boss := w.manager("boss", c.Now)
	wk := w.spawn("w1", "sleep", "300")
	before := wk.LeaseDeadline
	c.Advance(30 * time.Minute)

	// Another process using the worker's name, under its own id.
	imp := openSession(t, w, "impostor", "w1")
	res, err := imp.Send(ctx, intercom.SendRequest{To: "boss", Text: "I am w1, renew me"})
	require.NoError(t, err)
	require.True(t, res.OK)
	boss.receive(t, "impostor", "I am w1, renew me")
	r := boss.outcome(t)
	require.NoError(t, r.err)
	require.Empty(t, r.how, "not a worker of boss")
	imp.Close()

	// Another process using the worker's id while the worker's own
	// connection is down (its shim frozen, the broker restarted): a raw
	// v4 client, since an agent-fleet session cannot even open the id's
	// files while the shim has them (OpenSession's lock).
	require.NoError(t, syscall.Kill(wk.MainPID, syscall.SIGSTOP))
	defer syscall.Kill(wk.MainPID, syscall.SIGCONT)
	w.stop()
	w.startBroker()
	raw := intercomtest.Register(t, w.p, "w1", intercomtest.RegisterOptions{Name: "w1"})
	raw.SkipBroadcasts = true
	require.Eventually(t, func() bool {
		p, err := (&intercom.LocalAPIClient{Path: w.p.LocalAPISocket()}).Peer(ctx, "boss")
		return err == nil && p.Connected
	}, 10*time.Second, 20*time.Millisecond, "boss reconnects")
	raw.Send("boss", intercomtest.Message("renew-1", "renew me"))
	raw.Expect(wire.TypeDeliveryAccepted)
	boss.receive(t, "w1", "renew me")
	r = boss.outcome(t)
	require.ErrorIs(t, r.err, fleet.ErrUnverifiedActivity)
	rec, err := w.reg.Get(ctx, "w1")
	require.NoError(t, err)
	requireSameTime(t, before, rec.LeaseDeadline, "the lease did not move")
	require.NoError(t, raw.Conn.Close())
	require.NoError(t, syscall.Kill(wk.MainPID, syscall.SIGCONT))
}

func openSession(t *testing.T, w *world, id, name string) *intercom.Session {
	t.Helper()
	ident := intercom.Identity{SessionID: id, Name: name, Model: "test", Cwd: "/", PID: os.Getpid(),
		StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}
	s, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: w.p, Identity: ident})
	require.NoError(t, err)
	return s
}

func TestRegistryLossIsRebuiltWithCurrentManagers(t *testing.T) {
	w := newWorld(t)
	w.spawn("w1", "sleep", "300")
	_, poke := w.reporter(w.f, "w2", 0)
	boss := w.manager("boss", nil)
	poke("before") // the shim opens the registry
	boss.receive(t, "w2", "before")
	f2 := w.fleet("boss2")
	boss.close()
	_, err := f2.Adopt(ctx, "w2", false)
	require.NoError(t, err)

	// The registry file is deleted under running workers and processes.
	path := fleet.RegistryPath(w.p)
	require.NoError(t, os.Remove(path))
	require.True(t, w.reg.Stale(), "the open handle notices")
	w.reg.Close()
	w.reg, err = fleet.OpenRegistry(ctx, path)
	require.NoError(t, err)
	f1, f2 := w.fleet("boss"), w.fleet("boss2")
	_, err = f1.Spawn(ctx, fleet.SpawnRequest{ID: "w1", Command: []string{"sleep", "300"}})
	require.ErrorIs(t, err, fleet.ErrConflict, "never a second copy of a running worker, even before reconciliation")

	rep, err := f1.Reconcile(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Recovered, 2)
	require.Empty(t, rep.Ambiguous)
	ws, err := w.reg.List(ctx, fleet.Filter{LiveOnly: true})
	require.NoError(t, err)
	managers := map[string]string{}
	for _, wk := range ws {
		managers[wk.ID] = wk.Manager
	}
	require.Equal(t, map[string]string{"w1": "boss", "w2": "boss2"}, managers, "adoptions survive")

	_, err = f1.Spawn(ctx, fleet.SpawnRequest{ID: "w1", Command: []string{"sleep", "300"}})
	require.ErrorIs(t, err, fleet.ErrConflict)

	// The worker's shim noticed the replaced file: it reads the rebuilt
	// registry (where boss3 adopts w2), not the deleted one.
	f3 := w.fleet("boss3")
	_, err = f3.Adopt(ctx, "w2", false)
	require.NoError(t, err)
	boss3 := w.manager("boss3", nil)
	poke("after")
	boss3.receive(t, "w2", "after")
	res, err := f3.Stop(ctx, "w2")
	require.NoError(t, err)
	require.Empty(t, res.Survivors)
}

func TestRespawnOfARunningWorkerIsRefusedAcrossManagerRestarts(t *testing.T) {
	w := newWorld(t)
	w.spawn("w1", "sleep", "300")
	_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "w1", Command: []string{"sleep", "300"}})
	require.ErrorIs(t, err, fleet.ErrConflict)

	// A restarted manager: a new process, a new registry handle, same id.
	w.reg.Close()
	w.reg, err = fleet.OpenRegistry(ctx, fleet.RegistryPath(w.p))
	require.NoError(t, err)
	again := w.fleet("boss")
	_, err = again.Spawn(ctx, fleet.SpawnRequest{ID: "w1", Command: []string{"sleep", "300"}})
	require.ErrorIs(t, err, fleet.ErrConflict)
	ws, err := w.reg.List(ctx, fleet.Filter{})
	require.NoError(t, err)
	require.Len(t, ws, 1, "refusals leave no records")
	_, err = again.Stop(ctx, "w1")
	require.NoError(t, err, "the same session id still owns its worker")
}

func TestAmbiguousUnitsMakeTheFleetReadOnly(t *testing.T) {
	w := newWorld(t)
	a := w.spawn("w1", "sleep", "300")
	unit := func(run, agentDir string) string {
		name := fleet.UnitPrefix + "w1-" + run + ".service"
		_, err := w.m.StartService(ctx, units.ServiceSpec{Name: name, Argv: []string{"/bin/sleep", "300"},
			Env: []string{fleet.EnvWorkerID + "=w1", fleet.EnvRunID + "=" + run, fleet.EnvManagerID + "=boss", fleet.EnvAgentDir + "=" + agentDir}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.m.StopUnit(context.Background(), name) })
		return name
	}
	// The same worker id in another agent directory sharing the manager is
	// not ours: no conflict.
	unit(strings.Repeat("c", 12), shortDir(t))
	rep, err := w.f.Reconcile(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Ambiguous)
	require.Empty(t, rep.Recovered)

	// A second live unit claiming the same worker id here.
	twin := unit(strings.Repeat("b", 12), w.p.AgentDir)
	rep, err = w.f.Reconcile(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Ambiguous, 1)
	require.Contains(t, rep.Ambiguous[0], "both run worker w1")
	require.Contains(t, fleet.Degraded(w.p), twin)
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "w9", Command: []string{"sleep", "1"}})
	require.ErrorIs(t, err, fleet.ErrReadOnly)
	_, err = w.f.Stop(ctx, a.ID)
	require.ErrorIs(t, err, fleet.ErrReadOnly)

	// Resolved: the twin goes, the next reconciliation makes it writable.
	require.NoError(t, w.m.StopUnit(ctx, twin))
	rep, err = w.f.Reconcile(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Ambiguous)
	require.Empty(t, fleet.Degraded(w.p))
	_, err = w.f.Stop(ctx, a.ID)
	require.NoError(t, err)
	_, err = w.f.Spawn(ctx, fleet.SpawnRequest{ID: "w1", Command: []string{"sleep", "300"}})
	require.NoError(t, err, "another agent directory's w1 does not block this one's")
}

func TestJanitorCapsLogsAndRemovesFilesOfGoneRecords(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("w1", "sleep", "300")
	require.NotEmpty(t, wk.LogPath)
	fh, err := os.OpenFile(wk.LogPath, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	require.NoError(t, fh.Truncate(fleet.LogCap+5))
	_, err = fh.WriteString("\nearlier\nthe last line\n")
	require.NoError(t, err)
	fh.Close()
	logs := filepath.Dir(wk.LogPath)
	stale := filepath.Join(logs, "gone-"+strings.Repeat("a", 12)+".log")
	fresh := filepath.Join(logs, "gone-"+strings.Repeat("b", 12)+".log")
	for _, p := range []string{stale, fresh} {
		require.NoError(t, os.WriteFile(p, []byte("old output\n"), 0o600))
	}
	month := time.Now().Add(-30 * 24 * time.Hour)
	require.NoError(t, os.Chtimes(stale, month, month))

	prev, err := w.f.Cleanup(ctx, fleet.CleanupOptions{})
	require.NoError(t, err)
	require.Len(t, prev.Actions, 2)
	require.FileExists(t, stale, "a preview removes nothing")

	rep, err := w.f.Cleanup(ctx, fleet.CleanupOptions{Execute: true})
	require.NoError(t, err)
	kinds := map[string]bool{}
	for _, a := range rep.Actions {
		require.True(t, a.Done, "%+v", a)
		kinds[a.Kind] = true
	}
	require.Equal(t, map[string]bool{"cap-log": true, "remove-file": true}, kinds)
	require.NoFileExists(t, stale)
	require.FileExists(t, fresh, "files of gone records are kept for the retention period")
	data, err := os.ReadFile(wk.LogPath)
	require.NoError(t, err)
	require.LessOrEqual(t, len(data), fleet.LogKeep+200)
	require.True(t, strings.HasPrefix(string(data), "[agent-fleet: log capped"))
	require.True(t, strings.HasSuffix(string(data), "earlier\nthe last line\n"))
}

// The preview lists the pruning the run then does, and deletes nothing.
func TestCleanupPreviewCountsWhatItWouldPrune(t *testing.T) {
	c := newClock()
	w := newWorld(t, withClock(c))
	wk := w.spawn("w1", "sleep", "300")
	_, err := w.f.Stop(ctx, wk.ID)
	require.NoError(t, err)
	c.Advance(8 * 24 * time.Hour) // past the default retention
	prunes := func(rep *fleet.CleanupReport) (out []string) {
		for _, a := range rep.Actions {
			if a.Kind == "prune" {
				out = append(out, fmt.Sprintf("%s done=%v", a.Reason, a.Done))
			}
		}
		return out
	}

	prev, err := w.f.Cleanup(ctx, fleet.CleanupOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"1 ended record older than 168h0m0s done=false", "1 ended notice older than 168h0m0s done=false"}, prunes(prev))
	_, err = w.reg.GetRun(ctx, wk.ID, wk.RunID)
	require.NoError(t, err, "a preview deletes nothing")
	n, err := w.reg.EndedNotice(ctx, wk.ID, wk.RunID)
	require.NoError(t, err)
	require.NotNil(t, n)

	rep, err := w.f.Cleanup(ctx, fleet.CleanupOptions{Execute: true})
	require.NoError(t, err)
	require.Equal(t, []string{"1 ended record older than 168h0m0s done=true", "1 ended notice older than 168h0m0s done=true"}, prunes(rep))
	_, err = w.reg.GetRun(ctx, wk.ID, wk.RunID)
	require.ErrorIs(t, err, fleet.ErrNotFound)
}

func TestStateComesFromSystemdAndTheRegistry(t *testing.T) {
	w := newWorld(t)
	// A record whose unit is gone, with no word of how it ended (a user
	// manager restarted under it): lost.
	ghost := &fleet.Worker{ID: "ghost", RunID: strings.Repeat("d", 12), Generation: 1, Kind: "exec", Cwd: "/",
		Command: []string{"/bin/true"}, Unit: fleet.UnitPrefix + "ghost-" + strings.Repeat("d", 12) + ".service",
		State: fleet.StateRunning, Manager: "boss", FirstManager: "boss"}
	require.NoError(t, w.reg.Insert(ctx, ghost))
	st, err := w.f.Status(ctx, "ghost")
	require.NoError(t, err)
	require.Equal(t, fleet.StateLost, st.Worker.State)
	require.Equal(t, "unit-gone", st.Worker.StateReason)

	// A stopped record whose unit runs (a queued start that materialised
	// after the stop request) has its unit stopped, not revived.
	wk := w.spawn("late", "sleep", "300")
	_, err = w.reg.Update(ctx, wk.ID, wk.RunID, func(r *fleet.Worker) error {
		r.State, r.StopRequestedAt, r.EndedAt = fleet.StateStopped, time.Now(), time.Now()
		return nil
	})
	require.NoError(t, err)
	rep, err := w.f.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{wk.Unit}, rep.Fenced)
	u, err := w.m.Unit(ctx, wk.Unit)
	require.NoError(t, err)
	require.False(t, u.Running())
	rec, err := w.reg.Get(ctx, "late")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, rec.State)
}

// A unit on its way out (deactivating: its stop, or its exit record being
// written) does not revive its ended record: the record is right.
func TestReconcileLeavesEndingUnitsEnded(t *testing.T) {
	w := newWorld(t)
	wk := w.spawn("w1", "sleep", "300")
	_, err := w.f.Stop(ctx, wk.ID)
	require.NoError(t, err)
	// A unit of the worker's name that takes its time to stop.
	run := strings.Repeat("d", 12)
	name := fleet.WorkerUnitName("w1", run)
	require.NoError(t, w.reg.Insert(ctx, &fleet.Worker{ID: "w1", RunID: run, Unit: name, State: fleet.StateExited,
		Manager: "boss", FirstManager: "boss", HasExit: true, ExitCode: "exited", ExitStatus: 3}))
	// It ignores SIGTERM from before its stop: the marker says the trap is
	// set (a busy machine may start the shell after the stop is sent).
	trapped := filepath.Join(w.p.AgentDir, "trapped")
	_, err = w.m.StartService(ctx, units.ServiceSpec{Name: name, Argv: []string{"/bin/sh", "-c", `trap "" TERM; : > "$0"; exec sleep 300`, trapped},
		StopTimeout: time.Minute, Env: []string{fleet.EnvWorkerID + "=w1", fleet.EnvRunID + "=" + run, fleet.EnvAgentDir + "=" + w.p.AgentDir}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.m.KillUnit(context.Background(), name, syscall.SIGKILL) })
	require.Eventually(t, func() bool { _, err := os.Stat(trapped); return err == nil }, 30*time.Second, 10*time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- w.m.StopUnit(context.Background(), name) }()
	require.Eventually(t, func() bool {
		st, err := w.m.Unit(ctx, name)
		return err == nil && st.ActiveState == "deactivating"
	}, 10*time.Second, 10*time.Millisecond)

	rep, err := w.f.Reconcile(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Revived)
	require.Empty(t, rep.Recovered)
	rec, err := w.reg.GetRun(ctx, "w1", run)
	require.NoError(t, err)
	require.Equal(t, fleet.StateExited, rec.State, "still ended")
	require.NoError(t, w.m.KillUnit(ctx, name, syscall.SIGKILL))
	require.NoError(t, <-stopped)
}

// Renewing all workers renews every live one, passing over a worker whose
// record was not settled since it ended; adopting one's own worker renews
// its lease too.
func TestRenewAllPassesOverEndedWorkersAndAdoptRenews(t *testing.T) {
	c := newClock()
	w := newWorld(t, withClock(c))
	a := w.spawn("a", "sleep", "300")
	// A record that still says running, of a unit long gone.
	gone := strings.Repeat("e", 12)
	require.NoError(t, w.reg.Insert(ctx, &fleet.Worker{ID: "gone", RunID: gone, Unit: fleet.WorkerUnitName("gone", gone),
		State: fleet.StateRunning, Manager: "boss", FirstManager: "boss", LeaseDuration: time.Hour}))
	z := w.spawn("z", "sleep", "300")

	c.Advance(10 * time.Minute)
	renewed, err := w.f.RenewAll(ctx)
	require.NoError(t, err)
	require.Len(t, renewed, 2)
	for _, id := range []string{a.ID, z.ID} {
		rec, err := w.reg.Get(ctx, id)
		require.NoError(t, err)
		requireSameTime(t, c.Now().Add(rec.LeaseDuration), rec.LeaseDeadline, id)
	}
	rec, err := w.reg.Get(ctx, "gone")
	require.NoError(t, err)
	require.False(t, rec.State.Live(), "settled on the way")

	c.Advance(10 * time.Minute)
	adopted, err := w.f.Adopt(ctx, a.ID, false)
	require.NoError(t, err)
	requireSameTime(t, c.Now().Add(adopted.LeaseDuration), adopted.LeaseDeadline, "adopting one's own worker renews it")
}

// A paused worker rebuilt after the registry was lost is paused: a stop
// thaws it first (within its grace, not twice over), and the record keeps
// how it ended.
func TestRebuiltRecordOfAPausedWorkerIsPaused(t *testing.T) {
	w := newWorld(t)
	_, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "pw", Command: []string{"sleep", "300"}})
	require.NoError(t, err)
	_, err = w.f.Pause(ctx, "pw")
	require.NoError(t, err)

	w.loseRegistry()
	boss := w.fleet("boss")
	rep, err := boss.Reconcile(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Recovered, 1)
	got, err := w.reg.Get(ctx, "pw")
	require.NoError(t, err)
	require.True(t, got.Paused(), "rebuilt as paused: %+v", got)
	res, err := boss.Stop(ctx, "pw")
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.True(t, res.Worker.HasExit, "the thawed shim recorded how its command ended")
}

// A record rebuilt after the registry was lost keeps what the unit knows —
// the command, the working directory, the start, the log — and never a
// longer lease than the worker had: deleting the registry must not keep
// workers alive.
func TestRebuiltRecordKeepsWhatTheUnitKnows(t *testing.T) {
	w := newWorld(t)
	dir := shortDir(t)
	orig, err := w.f.Spawn(ctx, fleet.SpawnRequest{ID: "rw", Cwd: dir, Command: []string{"sh", "-c", `sleep 300; echo 'a\;b' "c;d"`}})
	require.NoError(t, err)
	require.NotZero(t, orig.LeaseDeadline, "an agent's worker has an idle lease")
	// A reload (install, uninstall, or anyone's daemon-reload) re-reads
	// the transient unit: systemd 252 then shows each ";" of ExecStart's
	// argv as "\;".
	require.NoError(t, w.m.Reload(ctx))

	w.loseRegistry()
	rep, err := w.fleet("boss").Reconcile(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Recovered, 1)
	got, err := w.reg.Get(ctx, "rw")
	require.NoError(t, err)
	require.Equal(t, "recovered", got.StateReason)
	require.Equal(t, orig.Command, got.Command, "the shim's own argv, whatever ExecStart shows")
	require.Equal(t, dir, got.Cwd)
	require.Equal(t, orig.LogPath, got.LogPath)
	require.False(t, got.CreatedAt.Before(orig.CreatedAt), "started after its reservation: %s < %s", got.CreatedAt, orig.CreatedAt)
	require.False(t, got.CreatedAt.After(orig.ReadyAt), "started before it was ready: %s > %s", got.CreatedAt, orig.ReadyAt)
	require.NotZero(t, got.LeaseDeadline)
	require.False(t, got.LeaseDeadline.After(orig.LeaseDeadline), "recovery never extends a lease: %s > %s", got.LeaseDeadline, orig.LeaseDeadline)
}

// A rebuilt record gets the idle lease its worker was spawned with, as its
// adoptions changed it — never the default in its place: a 30m lease stays
// 30m, a person's worker without one stays without one, and a person's
// --lease is kept.
func TestRebuiltRecordKeepsItsSpawnLease(t *testing.T) {
	w := newWorld(t)
	person := w.fleet("operator-lease")
	spawn := func(f *fleet.Fleet, id string, lease time.Duration) *fleet.Worker {
		wk, err := f.Spawn(ctx, fleet.SpawnRequest{ID: id, Lease: lease, Command: []string{"sleep", "300"}})
		require.NoError(t, err)
		return wk
	}
	short := spawn(w.f, "ls-agent", 30*time.Minute)
	require.Equal(t, 30*time.Minute, short.LeaseDuration)
	require.Zero(t, spawn(person, "ls-person", 0).LeaseDuration, "a person's worker has no lease")
	require.Equal(t, 20*time.Minute, spawn(person, "ls-asked", 20*time.Minute).LeaseDuration)
	spawn(person, "ls-adopted", 0)
	adopted, err := w.fleet("boss2").Adopt(ctx, "ls-adopted", false)
	require.NoError(t, err)
	require.Equal(t, fleet.DefaultLeasePolicy.Default, adopted.LeaseDuration, "an agent adopting a worker without a lease gives it the default")

	w.loseRegistry()
	rep, err := w.fleet("boss").Reconcile(ctx)
	require.NoError(t, err)
	require.Len(t, rep.Recovered, 4)
	for id, want := range map[string]time.Duration{
		"ls-agent": 30 * time.Minute, "ls-person": 0, "ls-asked": 20 * time.Minute, "ls-adopted": adopted.LeaseDuration,
	} {
		got, err := w.reg.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got.LeaseDuration, id)
		if want == 0 {
			require.True(t, got.LeaseDeadline.IsZero(), "%s: no lease, no deadline", id)
			continue
		}
		requireSameTime(t, got.CreatedAt.Add(want), got.LeaseDeadline, id+": its start plus its lease")
	}
	got, err := w.reg.Get(ctx, "ls-agent")
	require.NoError(t, err)
	require.False(t, got.LeaseDeadline.After(short.LeaseDeadline), "recovery never extends a lease: %s > %s", got.LeaseDeadline, short.LeaseDeadline)
}

// remotePeers is the broker's answer for a manager that is a live session
// of another host (a proxy session: not connected here, RemoteHost set).
type remotePeers struct {
	fleet.PeerChecker
	remote map[string]string // session id → host
}

func (r remotePeers) Peer(ctx context.Context, id string) (*intercom.PeerInfo, error) {
	if host, ok := r.remote[id]; ok {
		return &intercom.PeerInfo{SessionID: id, RemoteHost: host}, nil
	}
	return r.PeerChecker.Peer(ctx, id)
}

// A manager of another host that spawned here still owns its workers
// while its session is live there: adopting one needs --force, as for a
// manager connected here.
func TestAdoptionRefusedWhileARemoteManagerIsLive(t *testing.T) {
	w := newWorld(t)
	far := w.fleet("far-boss")
	_, err := far.Spawn(ctx, fleet.SpawnRequest{ID: "fw1", Command: []string{"sleep", "300"}})
	require.NoError(t, err)
	live := func(cfg *fleet.Config) {
		cfg.Peers = remotePeers{PeerChecker: cfg.Peers, remote: map[string]string{"far-boss": "laptop"}}
	}
	_, err = w.fleet("near", live).Adopt(ctx, "fw1", false)
	require.ErrorIs(t, err, fleet.ErrManagerConnected, "far-boss is live on host laptop")

	adopted, err := w.fleet("near", live).Adopt(ctx, "fw1", true)
	require.NoError(t, err, "--force adopts it")
	require.Equal(t, "near", adopted.Manager)
	_, err = w.fleet("near").Stop(ctx, "fw1")
	require.NoError(t, err)
}

// Another manager's worker that has ended cannot be adopted, so forget
// does not send the caller to adopt it, and adopt's answer agrees.
func TestForgetOfAnotherManagersEndedWorkerSaysWhatCan(t *testing.T) {
	w := newWorld(t)
	w.spawn("ew", "sleep", "300")
	_, err := w.f.Stop(ctx, "ew")
	require.NoError(t, err)

	other := w.fleet("someone-else")
	_, _, err = other.Forget(ctx, "ew", true)
	require.ErrorIs(t, err, fleet.ErrNotOwner)
	require.Contains(t, err.Error(), "has ended, so it cannot be adopted")
	require.Contains(t, err.Error(), "prune --all --acknowledge")
	require.NotContains(t, err.Error(), "adopt it first")
	_, err = other.Adopt(ctx, "ew", false)
	require.ErrorIs(t, err, fleet.ErrEnded)
}

// A unit still active after its shim recorded the command's end (the shim
// finishes its worktree record and owed notices before it exits) does not
// revive the record: another process's fleet open must not make a worker
// that ended live again for a moment (wait, then forget, refused).
func TestReconcileLeavesRecordedEndsEnded(t *testing.T) {
	w := newWorld(t)
	run := strings.Repeat("e", 12)
	name := fleet.WorkerUnitName("w2", run)
	require.NoError(t, w.reg.Insert(ctx, &fleet.Worker{ID: "w2", RunID: run, Unit: name, State: fleet.StateExited,
		Manager: "boss", FirstManager: "boss", HasExit: true, ExitCode: "exited", ExitStatus: 0}))
	_, err := w.m.StartService(ctx, units.ServiceSpec{Name: name, Argv: []string{"/bin/sleep", "300"},
		Env: []string{fleet.EnvWorkerID + "=w2", fleet.EnvRunID + "=" + run, fleet.EnvAgentDir + "=" + w.p.AgentDir}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.m.KillUnit(context.Background(), name, syscall.SIGKILL) })

	rep, err := w.f.Reconcile(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Revived)
	rec, err := w.reg.GetRun(ctx, "w2", run)
	require.NoError(t, err)
	require.Equal(t, fleet.StateExited, rec.State, "still ended")
}

// Runs of one id by two managers: each forgets only its own runs, also
// while the other's newer run is live; with none of its own, the latest
// run says whose the id is.
func TestForgetDeletesOnlyTheCallersRuns(t *testing.T) {
	w := newWorld(t)
	alice, bob := w.fleet("alice"), w.fleet("bob")
	_, err := alice.Spawn(ctx, fleet.SpawnRequest{ID: "shared", Command: []string{"sleep", "300"}})
	require.NoError(t, err)
	_, err = alice.Stop(ctx, "shared")
	require.NoError(t, err)
	_, err = bob.Spawn(ctx, fleet.SpawnRequest{ID: "shared", Command: []string{"sleep", "300"}})
	require.NoError(t, err)

	n, _, err := alice.Forget(ctx, "shared", true)
	require.NoError(t, err, "bob's live run does not keep alice from forgetting hers")
	require.Equal(t, 1, n)
	runs, err := w.reg.List(ctx, fleet.Filter{})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, "bob", runs[0].Manager)
	require.Equal(t, fleet.StateRunning, runs[0].State)

	_, err = bob.Stop(ctx, "shared")
	require.NoError(t, err)
	_, _, err = alice.Forget(ctx, "shared", true)
	require.ErrorIs(t, err, fleet.ErrNotOwner, "none of alice's is left: bob's ended run is bob's")
	n, _, err = bob.Forget(ctx, "shared", true)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
