package verbs

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/fleettest"
	"github.com/agent-fleet/agent-fleet/units"
)

// fakeFleet is the fleet of caller on the fake user manager, opened as a
// command opens it.
func fakeFleet(t *testing.T, caller string) (*factory.FleetEnv, *fleettest.Env) {
	t.Helper()
	e := fleettest.New(t, caller)
	f := factory.New(&factory.IOStreams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, "test")
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	fe, err := f.Fleet(context.Background())
	require.NoError(t, err)
	t.Cleanup(fe.Close)
	return fe, e
}

func run(t *testing.T, fe *factory.FleetEnv, a Args) (output.Report, error) {
	t.Helper()
	if err := a.Check(); err != nil {
		return nil, err
	}
	return Run(context.Background(), fe, a)
}

func must(t *testing.T, fe *factory.FleetEnv, a Args) output.Report {
	t.Helper()
	rep, err := run(t, fe, a)
	require.NoError(t, err, "%+v", a)
	return rep
}

// Every fleet verb, in process on the fake user manager: what it does
// and what both surfaces are told.
func TestVerbsOnTheFake(t *testing.T) {
	t.Parallel()
	fe, _ := fakeFleet(t, "boss")

	rep := must(t, fe, Args{Action: "spawn", ID: "w1", Spawn: fleet.SpawnRequest{Role: "builder", Command: []string{"sleep", "300"}}})
	w := rep.JSON().(output.Worker)
	require.Equal(t, "w1", w.ID)
	require.Equal(t, "running", w.State)
	require.Equal(t, "boss", w.Manager)
	require.Positive(t, w.LeaseSeconds, "an agent manager's worker has an idle lease")
	require.True(t, strings.HasPrefix(rep.Text(output.CLI), "Spawned worker w1: run "+w.RunID), rep.Text(output.CLI))
	require.Contains(t, rep.Text(output.Tool), `It is on the intercom as "w1"; you are its manager.`)
	require.Equal(t, w, rep.Structured())

	rep, err := run(t, fe, Args{Action: "spawn", ID: "w2", Spawn: fleet.SpawnRequest{Command: []string{"/bin/false"}}})
	require.ErrorIs(t, err, fleet.ErrSpawnFailed, "a command that exits non-zero before it is ready fails the spawn")
	require.NotNil(t, rep, "with its record")
	require.Equal(t, "w2", rep.JSON().(output.Worker).ID)

	rep = must(t, fe, Args{Action: "list"})
	ws := rep.JSON().([]output.Worker)
	require.Len(t, ws, 2)
	require.Equal(t, map[string]any{"workers": ws}, rep.Structured())
	require.Contains(t, rep.Text(output.CLI), "ID  ")
	require.Contains(t, rep.Text(output.Tool), "- w1 [running] builder, manager boss: /usr/bin/sleep 300")

	rep = must(t, fe, Args{Action: "status", ID: "w1"})
	st := rep.JSON().(output.Status)
	require.Equal(t, "active", st.UnitActive)
	require.Equal(t, rep.Text(output.CLI), rep.Text(output.Tool), "status reads the same to both")
	require.Contains(t, rep.Text(output.CLI), "Worker w1 (run "+w.RunID+", generation 1)")

	rep = must(t, fe, Args{Action: "renew", ID: "w1"})
	require.Contains(t, rep.Text(output.CLI), "Renewed w1 until ")
	require.Contains(t, rep.Text(output.Tool), "w1 renewed until ")
	rep = must(t, fe, Args{Action: "renew"})
	require.Len(t, rep.JSON(), 1, "renew without an id renews every live worker of the caller")
	rep = must(t, fe, Args{Action: "adopt", ID: "w1"})
	require.Equal(t, "You now manage w1 (run "+w.RunID+"); its lease is renewed.", rep.Text(output.CLI))
	rep = must(t, fe, Args{Action: "adopt", All: true})
	require.Equal(t, "No orphaned workers to adopt.", rep.Text(output.Tool))

	rep = must(t, fe, Args{Action: "cleanup"})
	require.False(t, rep.(output.CleanupReport).Rep.Executed, "a preview")
	require.NotContains(t, rep.Text(output.CLI), "failed")

	rep = must(t, fe, Args{Action: "logs", ID: "w1", Lines: 5})
	require.Equal(t, map[string]any{"lines": []string{}}, rep.Structured(), "nothing ran, nothing was logged")

	rep = must(t, fe, Args{Action: "stop", ID: "w1"})
	stop := rep.JSON().(output.Stop)
	require.Equal(t, "stopped", stop.Worker.State)
	require.False(t, stop.AlreadyEnded)
	require.Equal(t, "Stopped w1; nothing of it is left in its cgroup.", rep.Text(output.CLI))
	require.Equal(t, rep.Text(output.CLI), rep.Text(output.Tool))
	rep = must(t, fe, Args{Action: "stop", ID: "w1"})
	require.Equal(t, "Worker w1 had already ended (stopped).", rep.Text(output.CLI), "stop is safe twice")

	rep = must(t, fe, Args{Action: "forget", ID: "w1", Acknowledge: true})
	require.Equal(t, map[string]any{"deleted": 1}, rep.JSON())
	require.Equal(t, "Forgot 1 ended record of w1.", rep.Text(output.Tool))
	rep = must(t, fe, Args{Action: "prune", Acknowledge: true})
	require.Equal(t, "Pruned 1 ended record.", rep.Text(output.CLI), "w2's failed spawn")
}

// Arguments that cannot work are refused before anything is opened, as
// usage errors.
func TestCheckRefusesBeforeOpening(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a    Args
		want string
	}{
		{Args{Action: "status"}, "status needs a worker id"},
		{Args{Action: "adopt"}, "adopt needs a worker id"},
		{Args{Action: "adopt", All: true, ID: "w1"}, "not both"},
		{Args{Action: "forget", ID: "w1"}, "forget deletes history: confirm with --acknowledge (agent_fleet: acknowledge: true)"},
		{Args{Action: "prune"}, "prune deletes history"},
		{Args{Action: "logs", ID: "w1", Lines: -1}, "lines must be at least 1"},
		{Args{Action: "fly"}, `unknown fleet action "fly"`},
	} {
		err := c.a.Check()
		var ue *factory.UsageError
		require.ErrorAs(t, err, &ue, "%+v", c.a)
		require.Contains(t, err.Error(), c.want)
	}
	for _, a := range []Args{{Action: "list"}, {Action: "renew"}, {Action: "adopt", All: true}, {Action: "cleanup"}} {
		require.NoError(t, a.Check(), "%+v", a)
	}
}

// A worker of another manager is refused, and the refusal says how to
// take it over.
func TestVerbsRefuseAnotherManagersWorker(t *testing.T) {
	t.Parallel()
	fe, e := fakeFleet(t, "alice")
	must(t, fe, Args{Action: "spawn", ID: "mine", Spawn: fleet.SpawnRequest{Command: []string{"sleep", "300"}}})
	e.Set("AGENT_INTERCOM_SESSION_ID", "bob")
	f := factory.New(&factory.IOStreams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, "test")
	f.Getenv, f.ConnectUnits = e.Getenv, e.Connect
	bob, err := f.Fleet(context.Background())
	require.NoError(t, err)
	defer bob.Close()
	_, err = run(t, bob, Args{Action: "stop", ID: "mine"})
	require.ErrorIs(t, err, fleet.ErrNotOwner)
	require.Contains(t, err.Error(), "adopt it first")
	rep := must(t, bob, Args{Action: "list", All: true})
	require.Len(t, rep.JSON(), 1, "--all shows every manager's workers")
	require.Empty(t, must(t, bob, Args{Action: "list"}).JSON(), "bob has none of his own")
}

// gauge counts calls in flight and the most there ever were.
type gauge struct {
	mu       sync.Mutex
	now, max int
}

func (g *gauge) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now++
	g.max = max(g.max, g.now)
}

func (g *gauge) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now--
}

// slowStops is a user manager whose stop jobs take a while, counted.
type slowStops struct {
	units.Manager
	g *gauge
}

func (s slowStops) StopUnit(ctx context.Context, name string) error {
	s.g.enter()
	defer s.g.leave()
	time.Sleep(20 * time.Millisecond)
	return s.Manager.StopUnit(ctx, name)
}

// A stop of several stops every worker, a few at a time (all of 500 at
// once would run each past its time budget).
func TestStopAllStopsAFewAtATime(t *testing.T) {
	t.Parallel()
	e := fleettest.New(t, "boss")
	g := &gauge{}
	f := factory.New(&factory.IOStreams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, "test")
	f.Getenv = e.Getenv
	f.ConnectUnits = func(ctx context.Context) (units.Manager, error) {
		m, err := e.Connect(ctx)
		return slowStops{Manager: m, g: g}, err
	}
	fe, err := f.Fleet(context.Background())
	require.NoError(t, err)
	t.Cleanup(fe.Close)
	const n = 3*StopsInFlight + 1
	for i := range n {
		must(t, fe, Args{Action: "spawn", ID: fmt.Sprintf("w%02d", i), Spawn: fleet.SpawnRequest{Command: []string{"sleep", "300"}}})
	}
	rep := must(t, fe, Args{Action: "stop", All: true}).(output.StopsReport)
	require.Len(t, rep.Stops, n)
	for _, it := range rep.Stops {
		require.NoError(t, it.Err, it.ID)
		require.Equal(t, fleet.StateStopped, it.Res.Worker.State, it.ID)
	}
	require.LessOrEqual(t, g.max, StopsInFlight)
	require.Greater(t, g.max, 1, "the stops overlap")
}
