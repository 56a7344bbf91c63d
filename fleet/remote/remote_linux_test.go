//go:build linux

package remote_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/fleet/remote/remotetest"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// The test binary doubles as the worker shim: systemd starts it with
// REMOTE_TEST_SHIM=1 and the shim's flags, and it runs shim.Run.
func TestMain(m *testing.M) {
	if os.Getenv("REMOTE_TEST_SHIM") != "1" {
		os.Exit(m.Run())
	}
	fleettest.RunShim()
}

// host is one host of the test: an agent directory with its broker and
// registry, a user manager, and fleets acting for any caller.
type host struct {
	t    *testing.T
	name string
	p    intercom.Paths
	m    units.Manager
	reg  *fleet.Registry
	link *remotetest.Link
}

func newHost(t *testing.T, name string, m units.Manager, l *remotetest.Link) *host {
	t.Helper()
	h := &host{t: t, name: name, p: intercom.NewPaths(intercomtest.ShortDir(t)), m: m, link: l}
	b := intercomtest.StartBroker(t, func(c *broker.Config) { c.Paths = h.p })
	t.Cleanup(b.Stop)
	var err error
	h.reg, err = fleet.OpenRegistry(context.Background(), fleet.RegistryPath(h.p))
	require.NoError(t, err)
	t.Cleanup(func() {
		// Nothing a test spawned outlives it, whoever manages it.
		ws, _ := h.reg.List(context.Background(), fleet.Filter{LiveOnly: true})
		for _, w := range ws {
			if f, err := h.open(context.Background(), w.Manager); err == nil {
				_, _ = f.Stop(context.Background(), w.ID)
			}
		}
		h.reg.Close()
	})
	return h
}

// open is the host's fleet for caller: what a node's Server is given.
func (h *host) open(_ context.Context, caller string) (*fleet.Fleet, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return fleet.New(fleet.Config{
		Paths: h.p, Registry: h.reg, Units: h.m, Caller: caller,
		CallerEnv: func(k string) string {
			switch k {
			case "PATH":
				return os.Getenv("PATH")
			case "HOME":
				return h.p.AgentDir
			}
			return ""
		},
		Shim: []string{exe}, ShimEnv: []string{"REMOTE_TEST_SHIM=1"},
		StopTimeout: 3 * time.Second, StartTimeout: 20 * time.Second,
		Peers: &intercom.LocalAPIClient{Path: h.p.LocalAPISocket()},
	})
}

// serve runs the host's fleet server until the returned stop.
func (h *host) serve() (stop func()) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &remote.Server{Transport: h.link, Open: h.open, RecordsEvery: time.Hour}
	require.NoError(h.t, s.Start(ctx))
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-s.Done()
		})
	}
	h.t.Cleanup(stop)
	return stop
}

func uniqueID(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// waitRecord waits until host's last-known record of id satisfies ok.
func waitRecord(t *testing.T, l *remotetest.Link, hostName, id string, ok func(*fleet.Worker) bool) {
	t.Helper()
	remotetest.WaitRecord(t, l, hostName, id, func(data []byte) bool {
		var rec struct{ Worker *fleet.Worker }
		require.NoError(t, json.Unmarshal(data, &rec))
		return rec.Worker != nil && ok(rec.Worker)
	})
}

// findWorker is id's entry in a listing.
func findWorker(l *remote.Listing, id string) *remote.HostWorker {
	for i := range l.Workers {
		if l.Workers[i].Worker.ID == id {
			return &l.Workers[i]
		}
	}
	return nil
}

// TestWorkerOnAnotherHost is a manager on host a running a worker on host
// b: two agent directories, two user managers (b's its own), each host
// with its fleet server on one real NATS server with JetStream.
func TestWorkerOnAnotherHost(t *testing.T) {
	shared := unitstest.Require(t)
	own := unitstest.OwnManager(t)
	ns := remotetest.StartNATS(t, false)
	hosts := []string{"a", "b"}
	a := newHost(t, "a", unitstest.Connect(t, shared), remotetest.NewLink(t, ns, "a", hosts))
	b := newHost(t, "b", unitstest.Connect(t, own), remotetest.NewLink(t, ns, "b", hosts))
	a.serve()
	stopB := b.serve()
	ctx := context.Background()
	mgr := remote.Client{Transport: a.link, Caller: "mgr-a"}

	// Spawn on b from a.
	id := uniqueID("rw")
	w, err := mgr.Spawn(ctx, "b", fleet.SpawnRequest{ID: id, Role: "builder",
		Command: []string{"sh", "-c", "echo hello from b; exec sleep 300"}})
	require.NoError(t, err)
	require.Equal(t, fleet.StateRunning, w.State)
	require.Equal(t, "mgr-a", w.Manager)
	require.Contains(t, w.EnvKeys, remote.EnvShare)
	require.NotZero(t, w.MainPID)
	// The worker runs in b's user manager, its session shared to a's.
	environ, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(w.MainPID), "environ"))
	require.NoError(t, err)
	require.Contains(t, strings.Split(string(environ), "\x00"), remote.EnvShare+"=1")
	bUnit, err := b.m.Unit(ctx, w.Unit)
	require.NoError(t, err)
	require.Equal(t, "active", bUnit.ActiveState)
	_, err = a.reg.Get(ctx, id)
	require.ErrorIs(t, err, fleet.ErrNotFound, "a's registry knows nothing of b's worker")

	// list --all from a: b's worker with its host.
	ls, err := mgr.ListAll(ctx)
	require.NoError(t, err)
	require.Empty(t, ls.Problems)
	hw := findWorker(ls, id)
	require.NotNil(t, hw, "%+v", ls.Workers)
	require.Equal(t, "b", hw.Host)
	require.False(t, hw.Unreachable)
	require.Equal(t, fleet.StateRunning, hw.Worker.State)

	// status and logs from a.
	st, err := mgr.Status(ctx, "b", id)
	require.NoError(t, err)
	require.Equal(t, fleet.StateRunning, st.Worker.State)
	require.Equal(t, "active", st.Unit.ActiveState)
	names := []string{}
	for _, p := range st.Processes {
		names = append(names, p.Name)
	}
	require.Contains(t, names, "sleep", "b's cgroup as status reads it: %v", st.Processes)
	lines, err := mgr.Logs(ctx, "b", id, fleet.LogQuery{Lines: 10})
	require.NoError(t, err)
	texts := []string{}
	for _, l := range lines {
		texts = append(texts, l.Text)
	}
	require.Contains(t, texts, "hello from b")

	// Another session may not stop it: refused as locally, the same typed
	// error.
	intruder := remote.Client{Transport: a.link, Caller: "intruder"}
	_, err = intruder.Stop(ctx, "b", id, fleet.StopOptions{})
	require.ErrorIs(t, err, fleet.ErrNotOwner)
	var oe *fleet.OwnerError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "mgr-a", oe.Owner)
	require.Equal(t, "intruder", oe.Caller)
	require.Contains(t, err.Error(), "host b:")
	st, err = mgr.Status(ctx, "b", id)
	require.NoError(t, err)
	require.Equal(t, fleet.StateRunning, st.Worker.State, "the refused stop stopped nothing")

	// b goes away: its worker is unreachable, with its last-known record.
	waitRecord(t, a.link, "b", id, func(w *fleet.Worker) bool { return w.State == fleet.StateRunning })
	stopB()
	ls, err = mgr.ListAll(ctx)
	require.NoError(t, err)
	hw = findWorker(ls, id)
	require.NotNil(t, hw, "b's worker is not lost: %+v", ls)
	require.True(t, hw.Unreachable)
	require.Equal(t, "b", hw.Host)
	require.Equal(t, fleet.StateRunning, hw.Worker.State, "its last known state")
	require.Len(t, ls.Problems, 1)
	require.Equal(t, "b", ls.Problems[0].Host)
	require.True(t, ls.Problems[0].Known)
	require.ErrorIs(t, ls.Problems[0].Err, remote.ErrHostUnreachable)
	_, err = mgr.Status(ctx, "b", id)
	require.ErrorIs(t, err, remote.ErrHostUnreachable)
	hostsOf, err := mgr.Locate(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, hostsOf)

	// b is back: running again, as it answers.
	b.serve()
	ls, err = mgr.ListAll(ctx)
	require.NoError(t, err)
	require.Empty(t, ls.Problems)
	hw = findWorker(ls, id)
	require.NotNil(t, hw)
	require.False(t, hw.Unreachable)
	require.Equal(t, fleet.StateRunning, hw.Worker.State)

	// Its manager stops it from a, with the cleanup proven on b.
	res, err := mgr.Stop(ctx, "b", id, fleet.StopOptions{})
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, res.Worker.State)
	require.Empty(t, res.Survivors)
	require.NotEmpty(t, res.Worker.ControlGroup)
	unitstest.RequireOnlyExitRecord(t, res.Worker.ControlGroup) // nothing of the worker's is left on b
	rec, err := b.reg.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, fleet.StateStopped, rec.State)
	waitRecord(t, a.link, "b", id, func(w *fleet.Worker) bool { return w.State == fleet.StateStopped })
}

// TestListAllWithoutJetStream: with no JetStream nothing is known of a
// host that does not answer, and list says so; a host nobody knows is
// unknown, not unreachable.
func TestListAllWithoutJetStream(t *testing.T) {
	ns := remotetest.StartNATS(t, true)
	hosts := []string{"a", "b"}
	fake := fleettest.New(t, "mgr-a")
	a := newHost(t, "a", fake.Fake.Connect(), remotetest.NewLink(t, ns, "a", hosts))
	bFake := fleettest.New(t, "mgr-a")
	b := newHost(t, "b", bFake.Fake.Connect(), remotetest.NewLink(t, ns, "b", hosts))
	ctx := context.Background()
	rec := &fleet.Worker{ID: uniqueID("rw"), Kind: "exec", Manager: "mgr-a", FirstManager: "mgr-a", Command: []string{"/bin/true"}}
	require.NoError(t, b.reg.Reserve(ctx, rec))
	stopB := b.serve()
	mgr := remote.Client{Transport: a.link, Caller: "mgr-a"}

	ls, err := mgr.ListAll(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, ls.RecordsErr, remote.ErrRecordsUnavailable)
	require.NotNil(t, findWorker(ls, rec.ID), "b answers with its workers: %+v", ls)
	require.Equal(t, "b", findWorker(ls, rec.ID).Host)

	stopB()
	ls, err = mgr.ListAll(ctx)
	require.NoError(t, err)
	require.Empty(t, ls.Workers)
	require.Len(t, ls.Problems, 1)
	require.Equal(t, "b", ls.Problems[0].Host)
	require.False(t, ls.Problems[0].Known)
	require.ErrorIs(t, ls.Problems[0].Err, remote.ErrHostUnreachable, "b is live but does not answer")

	_, err = mgr.Status(ctx, "nowhere", rec.ID)
	require.ErrorIs(t, err, remote.ErrUnknownHost)
	require.Contains(t, err.Error(), `"nowhere"`)
	_, err = mgr.Status(ctx, "Not A Host", rec.ID)
	require.ErrorIs(t, err, remote.ErrUnknownHost)
}
