package factory

import (
	"context"
	"fmt"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/node"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// The node verbs (agent-fleet node …) on this factory's agent directory.

// NodeInit is node init (node.Init).
func (f *Factory) NodeInit(o node.InitOptions) (*node.InitReport, error) {
	p, err := f.Paths()
	if err != nil {
		return nil, err
	}
	return node.Init(p, o)
}

// NodeKey is node key: out "" is the agent directory's node.nk.
func (f *Factory) NodeKey(out string) (*node.KeyReport, error) {
	p, err := f.Paths()
	if err != nil {
		return nil, err
	}
	if out == "" {
		out = node.DefaultNkeyFile(p)
	}
	return node.MakeNkey(out)
}

// NodeStatus is node status and intercom status's routing line.
func (f *Factory) NodeStatus(ctx context.Context) (*node.Status, error) {
	p, err := f.Paths()
	if err != nil {
		return nil, err
	}
	return node.Query(ctx, p), nil
}

// NodeName is this host's node name for intercom list ("" without a node
// configuration).
func (f *Factory) NodeName() string {
	p, err := f.Paths()
	if err != nil {
		return ""
	}
	return node.LocalName(p)
}

// RunNode is node run: the node with this factory's broker settings,
// logging at level to stderr or, toFile, to the bounded broker.log. Its
// first line on stderr says that it serves and the routing line.
func (f *Factory) RunNode(ctx context.Context, level string, toFile bool) error {
	p, err := f.Paths()
	if err != nil {
		return err
	}
	logw := f.IO.Err
	if toFile {
		if err := intercom.EnsureDir(p.Dir); err != nil {
			return err
		}
		lf, err := intercom.PrepareBrokerLog(p)
		if err != nil {
			return err
		}
		defer lf.Close()
		logw = lf
	}
	ttl, err := f.BrokerAskTTL()
	if err != nil {
		return err
	}
	log := NewLogger(logw, level)
	fleets := &remoteFleets{f: f, p: p}
	defer fleets.close()
	return node.Run(ctx, node.RunOptions{Paths: p, Logger: log, Version: f.Version,
		Broker:   node.DefaultBrokerConfig(ttl),
		Services: []node.Service{node.RemoteFleet(fleets.open, RemoteCodes, log.With("component", "remote-fleet"))},
		Started: func(st *node.Status) {
			fmt.Fprintf(f.IO.Err, "agent-fleet node %s serving %s: %s\n", st.Node, p.BrokerSocket(), st.Routing)
		}})
}
