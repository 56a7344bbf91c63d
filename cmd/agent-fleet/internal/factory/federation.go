package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/node"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// ErrNoNode: this host has no node configuration, so it is joined to no
// other host; agent-fleet node init makes one (exit 5).
var ErrNoNode = errors.New("no node configuration")

// RemoteCodes are the errors of this package that cross to other hosts as
// themselves (remote.Code): a remote verb's failure keeps its exit code.
var RemoteCodes = []remote.Code{{Code: "no_systemd", Err: ErrNoSystemd}}

// NodeConfigPath is the node configuration of p:
// <agentDir>/intercom/node.toml (docs/federation.md).
func NodeConfigPath(p intercom.Paths) string { return federation.ConfigPath(p) }

// HasNode reports whether this host has a node configuration: only then
// do fleet verbs look at other hosts (list --all, an id this host does
// not know).
func (f *Factory) HasNode() bool {
	p, err := f.Paths()
	if err != nil {
		return false
	}
	_, err = os.Stat(NodeConfigPath(p))
	return err == nil
}

// Federation connects to the other hosts as a NATS client of this host's
// node configuration; close releases the connection. Without a
// configuration it is ErrNoNode.
func (f *Factory) Federation(ctx context.Context) (t remote.Transport, close func(), err error) {
	p, err := f.Paths()
	if err != nil {
		return nil, nil, err
	}
	if f.ConnectFederation != nil {
		return f.ConnectFederation(ctx, p)
	}
	path := NodeConfigPath(p)
	if _, err := os.Stat(path); err != nil {
		return nil, nil, fmt.Errorf("%w: %s does not exist, so this host is joined to no other host (agent-fleet node init sets one up)", ErrNoNode, path)
	}
	return node.ConnectCLI(ctx, p)
}

// RemoteFleet is a client of the other hosts' fleets acting as caller;
// close releases its connection.
func (f *Factory) RemoteFleet(ctx context.Context, caller string) (*remote.Client, func(), error) {
	t, closeT, err := f.Federation(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &remote.Client{Transport: t, Caller: caller, Codes: RemoteCodes}, closeT, nil
}

// remoteFleets are the fleets of this host through which its node
// answers the other hosts' fleet verbs (remote.Server): one registry and
// one user manager connection, opened on first use (a node starts without
// a user manager) and kept for the node's life, and a Fleet per
// requesting session, whose workers start in the node's home directory
// unless the request names another.
type remoteFleets struct {
	f      *Factory
	p      intercom.Paths
	mu     sync.Mutex
	env    *FleetEnv
	cfg    fleet.Config
	fleets map[string]*fleet.Fleet
}

func (r *remoteFleets) open(ctx context.Context, caller string) (*fleet.Fleet, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fl := r.fleets[caller]; fl != nil {
		return fl, nil
	}
	if r.env == nil {
		env, err := r.f.FleetAs(ctx, r.p, caller)
		if err != nil {
			return nil, err
		}
		cfg, err := r.f.fleetConfig(r.p, env.Registry, env.Units, caller)
		if err != nil {
			env.Close()
			return nil, err
		}
		if home := r.f.Env("HOME"); home != "" {
			cfg.CallerCwd = home
		}
		r.env, r.cfg, r.fleets = env, cfg, map[string]*fleet.Fleet{}
	}
	c := r.cfg
	c.Caller = caller
	fl, err := fleet.New(c)
	if err != nil {
		return nil, err
	}
	r.fleets[caller] = fl
	return fl, nil
}

func (r *remoteFleets) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.env != nil {
		r.env.Close()
	}
}
