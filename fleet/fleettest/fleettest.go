// Package fleettest gives tests a fleet without systemd: a fresh agent
// directory and unitstest's fake user manager, with the environment a
// command of the fleet's caller reads (Env), and worker records written
// straight into a registry (RecordWorkers). Only tests import it.
package fleettest

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/intercomtest"
	"github.com/agent-fleet/agent-fleet/units"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// Env is a fleet on the fake user manager. Safe for concurrent use.
type Env struct {
	Paths intercom.Paths
	Fake  *unitstest.Fake

	mu   sync.Mutex
	vars map[string]string
}

// New is a fleet in a fresh agent directory (a short one: sockets fit),
// whose commands act as caller, on a fake user manager whose workers
// behave as their own command would (WorkerBehavior).
func New(t testing.TB, caller string) *Env {
	t.Helper()
	e := &Env{Paths: intercom.NewPaths(intercomtest.ShortDir(t)),
		Fake: unitstest.NewFake(unitstest.FakeOptions{Behavior: WorkerBehavior})}
	e.vars = map[string]string{intercom.AgentDirEnv: e.Paths.AgentDir, intercom.SessionIDEnv: caller}
	return e
}

// Set sets a variable of the environment commands read.
func (e *Env) Set(k, v string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.vars[k] = v
}

// Getenv looks k up in the fleet's environment, then in the process's.
func (e *Env) Getenv(k string) string {
	e.mu.Lock()
	v, ok := e.vars[k]
	e.mu.Unlock()
	if ok {
		return v
	}
	return os.Getenv(k)
}

// Connect is a new connection to the fake user manager.
func (e *Env) Connect(context.Context) (units.Manager, error) { return e.Fake.Connect(), nil }

// WorkerBehavior is what a worker unit's main process does on the fake:
// what the worker's own command (after the shim's "--") would do by
// unitstest.CommandBehavior, so "/bin/false" exits 1 and "sleep" runs.
func WorkerBehavior(spec units.ServiceSpec) unitstest.FakeOutcome {
	if i := slices.Index(spec.Argv, "--"); i >= 0 && i+1 < len(spec.Argv) {
		inner := spec
		inner.Argv = slices.Clone(spec.Argv[i+1:])
		inner.Env = slices.Clone(spec.Env)
		return unitstest.CommandBehavior(inner)
	}
	return unitstest.CommandBehavior(spec)
}

// RecordWorkers records running exec workers ids (role builder, command
// /bin/true) of manager in the registry of p, and returns the registry,
// closed when the test ends.
func RecordWorkers(t testing.TB, p intercom.Paths, manager string, ids ...string) *fleet.Registry {
	t.Helper()
	ctx := context.Background()
	reg, err := fleet.OpenRegistry(ctx, fleet.RegistryPath(p))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	for _, id := range ids {
		w := &fleet.Worker{ID: id, Kind: "exec", Role: "builder", Manager: manager, FirstManager: manager, Command: []string{"/bin/true"}}
		require.NoError(t, reg.Reserve(ctx, w))
		_, err := reg.Update(ctx, w.ID, w.RunID, func(r *fleet.Worker) error { r.State = fleet.StateRunning; return nil })
		require.NoError(t, err)
	}
	return reg
}
