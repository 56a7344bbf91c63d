package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// FleetEnv is what fleet verbs share: the caller, the registry, a
// connection to the user manager and the Fleet acting for the caller.
// Close releases them.
type FleetEnv struct {
	Paths    intercom.Paths
	Caller   string
	Registry *fleet.Registry
	Units    units.Manager
	Fleet    *fleet.Fleet
	// Offline is why no user manager answered when the fleet was opened
	// for reading (ReadFleet, ReadFleetAs); nil when one did. The records
	// are then the registry's: whether live workers still run is unknown,
	// and every call to Units fails with Offline.
	Offline error
}

// Close closes the registry (waiting for its views) and the connection.
func (e *FleetEnv) Close() {
	if e.Units != nil {
		_ = e.Units.Close()
	}
	if e.Registry != nil {
		_ = e.Registry.Close()
	}
}

// Fleet opens the registry and connects to the user manager for the CLI's
// caller (docs/architecture.md "Identity"). Fleet verbs record the
// caller's id; they do not register with the broker.
func (f *Factory) Fleet(ctx context.Context) (*FleetEnv, error) {
	p, id, err := f.Identity()
	if err != nil {
		return nil, err
	}
	return f.FleetAs(ctx, p, id.SessionID)
}

// ReadFleet is Fleet for verbs that only read (list, status, logs): when
// no user manager answers it opens the registry all the same, with
// FleetEnv.Offline saying why, instead of failing.
func (f *Factory) ReadFleet(ctx context.Context) (*FleetEnv, error) {
	p, id, err := f.Identity()
	if err != nil {
		return nil, err
	}
	return f.ReadFleetAs(ctx, p, id.SessionID)
}

// FleetAs is Fleet for a given caller (the MCP server's session). Off
// Linux it fails with units.ErrUnsupported before touching anything; a
// user manager that cannot be reached is ErrNoSystemd (exit 6).
func (f *Factory) FleetAs(ctx context.Context, p intercom.Paths, caller string) (*FleetEnv, error) {
	return f.openFleet(ctx, p, caller, false)
}

// ReadFleetAs is ReadFleet for a given caller.
func (f *Factory) ReadFleetAs(ctx context.Context, p intercom.Paths, caller string) (*FleetEnv, error) {
	return f.openFleet(ctx, p, caller, true)
}

func (f *Factory) openFleet(ctx context.Context, p intercom.Paths, caller string, reading bool) (*FleetEnv, error) {
	if err := f.RequireWorkerPlatform(); err != nil {
		return nil, err
	}
	// No worker runs where the broker's socket cannot be bound: say so
	// before a registry is created there.
	if err := intercom.CheckSocketPath(p.BrokerSocket()); err != nil {
		return nil, err
	}
	env := &FleetEnv{Paths: p, Caller: caller}
	if err := intercom.EnsureDir(p.OrchestratorDir()); err != nil {
		return nil, err
	}
	m, err := f.connectUnits(ctx)
	switch {
	case err != nil && reading && errors.Is(err, ErrNoSystemd):
		m, env.Offline = offlineUnits{err: err}, err
	case err != nil:
		return nil, err
	}
	env.Units = m
	reg, note, err := fleet.OpenRegistryOrRecover(ctx, fleet.RegistryPath(p), fleet.RegistryOptions{})
	if err != nil {
		env.Close()
		return nil, err
	}
	env.Registry = reg
	if note != "" {
		fmt.Fprintln(f.IO.Err, "agent-fleet:", note)
	}
	cfg, err := f.fleetConfig(p, env.Registry, m, caller)
	if err != nil {
		env.Close()
		return nil, err
	}
	env.Fleet, err = fleet.New(cfg)
	if err != nil {
		env.Close()
		return nil, err
	}
	if env.Offline != nil {
		return env, nil // nothing to reconcile with
	}
	// State comes from systemd plus the registry: attribute units the
	// registry does not know (a lost registry is rebuilt here).
	if rep, err := env.Fleet.Reconcile(ctx); err == nil {
		for _, w := range rep.Recovered {
			fmt.Fprintf(f.IO.Err, "agent-fleet: rebuilt the record of live worker %s (manager %s) from its unit\n", w.ID, w.Manager)
		}
	}
	return env, nil
}

// fleetConfig is the configuration of a Fleet of p acting for caller.
func (f *Factory) fleetConfig(p intercom.Paths, reg *fleet.Registry, m units.Manager, caller string) (fleet.Config, error) {
	policy, err := f.LeasePolicy()
	if err != nil {
		return fleet.Config{}, err
	}
	exe, err := f.Exe()
	if err != nil {
		return fleet.Config{}, err
	}
	grace, err := envDuration(f.Env, EnvReadyGrace)
	if err != nil {
		return fleet.Config{}, err
	}
	return fleet.Config{
		ReadyGrace: grace,
		Paths:      p, Registry: reg, Units: m, Caller: caller, CallerEnv: f.Env,
		Shim: []string{exe, "worker-shim"}, ShimEnv: f.ChildEnv,
		Journal: f.Journald(),
		Peers:   &intercom.LocalAPIClient{Path: p.LocalAPISocket()},
		Notify:  f.checkpointNotifier(p),
		EnsureBroker: func(ctx context.Context) error {
			return intercom.EnsureBroker(ctx, p, f.BrokerStarter())
		},
		Notices: fleet.RegisteringSender(p),
		Leases:  policy,
		Logger:  NewLogger(f.IO.Err, "warn"),
	}, nil
}

// EnvReadyGrace sets how long an exec worker's command must run before
// spawn calls it running (a Go duration; fleet.DefaultReadyGrace, 250ms,
// when unset).
const EnvReadyGrace = "AGENT_FLEET_READY_GRACE"

// connectUnits reaches the user manager within 10 s (operations then
// default to 30 s each).
func (f *Factory) connectUnits(ctx context.Context) (units.Manager, error) {
	if f.ConnectUnits != nil {
		return f.ConnectUnits(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{DefaultTimeout: 30 * time.Second, Getenv: f.Env})
	if err != nil {
		if errors.Is(err, units.ErrUnsupported) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrNoSystemd, err)
	}
	return m, nil
}

// checkpointNotifier sends the janitor's checkpoint messages as the
// session "agent-fleet" (docs/architecture.md "Leases").
func (f *Factory) checkpointNotifier(p intercom.Paths) func(ctx context.Context, workerID, text string) error {
	return func(ctx context.Context, workerID, text string) error {
		id := intercom.Identity{SessionID: "agent-fleet", Name: "agent-fleet", Model: "agent-fleet", Cwd: "/",
			PID: os.Getpid(), StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}
		sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: id, Start: f.BrokerStarter()})
		if err != nil {
			return err
		}
		defer sess.Close()
		res, err := sess.Send(ctx, intercom.SendRequest{To: workerID, Text: text})
		if err != nil {
			return err
		}
		if !res.OK {
			return fmt.Errorf("checkpoint to %s not delivered: %s", workerID, res.Reason)
		}
		return nil
	}
}
