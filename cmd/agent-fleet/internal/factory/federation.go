package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// ErrNoNode: this host has no node configuration, so it is joined to no
// other host; agent-fleet node init makes one (exit 5).
var ErrNoNode = errors.New("no node configuration")

// RemoteCodes are the errors of this package that cross to other hosts as
// themselves (remote.Code): a remote verb's failure keeps its exit code.
var RemoteCodes = []remote.Code{{Code: "no_systemd", Err: ErrNoSystemd}}

// NodeConfigPath is the node configuration of p:
// <agentDir>/intercom/node.toml (docs/federation.md).
func NodeConfigPath(p intercom.Paths) string { return filepath.Join(p.Dir, "node.toml") }

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
	return nil, nil, fmt.Errorf("%w: this agent-fleet cannot join the hosts of %s: it was built without the node link", ErrNoNode, path)
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

// ServeFleet answers the other hosts' fleet requests over t until ctx
// ends (remote.Server): one registry and one user manager connection,
// and a Fleet per requesting session, whose workers start in the node's
// home directory unless the request names another.
func (f *Factory) ServeFleet(ctx context.Context, t remote.Transport) error {
	p, err := f.Paths()
	if err != nil {
		return err
	}
	fe, err := f.FleetAs(ctx, p, "agent-fleet")
	if err != nil {
		return err
	}
	defer fe.Close()
	cfg, err := f.fleetConfig(p, fe.Registry, fe.Units, "")
	if err != nil {
		return err
	}
	if home := f.Env("HOME"); home != "" {
		cfg.CallerCwd = home
	}
	var mu sync.Mutex
	fleets := map[string]*fleet.Fleet{}
	open := func(_ context.Context, caller string) (*fleet.Fleet, error) {
		mu.Lock()
		defer mu.Unlock()
		if fl := fleets[caller]; fl != nil {
			return fl, nil
		}
		c := cfg
		c.Caller = caller
		fl, err := fleet.New(c)
		if err != nil {
			return nil, err
		}
		fleets[caller] = fl
		return fl, nil
	}
	s := &remote.Server{Transport: t, Open: open, Logger: NewLogger(f.IO.Err, "info"), Codes: RemoteCodes}
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-s.Done()
	return nil
}
