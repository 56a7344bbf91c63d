package main

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

// fleetEnv is what fleet verbs share: the caller, the registry and a
// connection to the user manager.
type fleetEnv struct {
	paths  intercom.Paths
	caller string
	reg    *fleet.Registry
	units  *units.Systemd
	fleet  *fleet.Fleet
}

func (e *fleetEnv) close() {
	if e.units != nil {
		_ = e.units.Close()
	}
	if e.reg != nil {
		_ = e.reg.Close()
	}
}

// errNoUserManager wraps a user manager that cannot be reached (exit 6).
var errNoSystemd = errors.New("systemd user manager unavailable")

// openFleet opens the registry and connects to the user manager for the
// CLI's caller (DESIGN.md "Identity"). Fleet verbs record the caller's id;
// they do not register with the broker.
func openFleet(ctx context.Context) (*fleetEnv, error) {
	p, id, err := resolveIdentity()
	if err != nil {
		return nil, err
	}
	return openFleetAs(ctx, p, id.SessionID)
}

// openFleetAs is openFleet for a given caller (the MCP server's session).
func openFleetAs(ctx context.Context, p intercom.Paths, caller string) (*fleetEnv, error) {
	if err := requireWorkerPlatform(); err != nil {
		return nil, err
	}
	env := &fleetEnv{paths: p, caller: caller}
	if err := intercom.EnsureDir(p.OrchestratorDir()); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{DefaultTimeout: 30 * time.Second})
	if err != nil {
		if errors.Is(err, units.ErrUnsupported) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errNoSystemd, err)
	}
	env.units = m
	reg, note, err := fleet.OpenRegistryOrRecover(ctx, fleet.RegistryPath(p), fleet.RegistryOptions{})
	if err != nil {
		env.close()
		return nil, err
	}
	env.reg = reg
	if note != "" {
		fmt.Fprintln(os.Stderr, "agent-fleet:", note)
	}
	policy, err := leasePolicy()
	if err != nil {
		env.close()
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		env.close()
		return nil, err
	}
	env.fleet, err = fleet.New(fleet.Config{
		Paths: p, Registry: env.reg, Units: m, Caller: caller,
		Shim: []string{exe, "worker-shim"}, ShimEnv: childEnv,
		Journal: journaldRuns(),
		Peers:   &intercom.LocalAPIClient{Path: p.LocalAPISocket()},
		Notify:  checkpointNotifier(p),
		Leases:  policy,
		Logger:  newLogger(os.Stderr, "warn"),
	})
	if err != nil {
		env.close()
		return nil, err
	}
	// State comes from systemd plus the registry: attribute units the
	// registry does not know (a lost registry is rebuilt here).
	if rep, err := env.fleet.Reconcile(ctx); err == nil {
		for _, w := range rep.Recovered {
			fmt.Fprintf(os.Stderr, "agent-fleet: rebuilt the record of live worker %s (manager %s) from its unit\n", w.ID, w.Manager)
		}
	}
	return env, nil
}

// checkpointNotifier sends the janitor's checkpoint messages as the
// session "agent-fleet" (DESIGN.md "Leases").
func checkpointNotifier(p intercom.Paths) func(ctx context.Context, workerID, text string) error {
	return func(ctx context.Context, workerID, text string) error {
		id := intercom.Identity{SessionID: "agent-fleet", Name: "agent-fleet", Model: "agent-fleet", Cwd: "/",
			PID: os.Getpid(), StartedAt: float64(time.Now().UnixMilli()), RuntimeID: intercom.NewMessageID()}
		sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: id, Start: brokerStarter()})
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

// journaldRuns reports whether journald takes logs on this host.
func journaldRuns() bool {
	_, err := os.Stat("/run/systemd/journal/socket")
	return err == nil && os.Getenv("AGENT_FLEET_LOG_FILES") == ""
}
