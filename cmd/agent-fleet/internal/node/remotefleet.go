package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// Transport is the node's link as the remote fleet works over it.
func Transport(link *federation.Link) remote.Transport { return linkTransport{link} }

// linkTransport adapts a host's Link to remote.Transport: its live hosts
// are those it hears beat.
type linkTransport struct{ *federation.Link }

func (t linkTransport) LiveHosts(context.Context) ([]string, error) {
	return hostNames(t.Link.LiveHosts()), nil
}

// hostNames are the node names of hosts.
func hostNames(hosts []federation.HostInfo) []string {
	var names []string
	for _, h := range hosts {
		names = append(names, h.Host)
	}
	return names
}

// RemoteFleet is the node service that answers the other hosts' fleet
// verbs for this host (remote.Server) with fleets from open, acting for
// the requesting session; codes are the errors beyond fleet's that cross
// the wire as themselves.
func RemoteFleet(open func(ctx context.Context, caller string) (*fleet.Fleet, error), codes []remote.Code, log *slog.Logger) Service {
	return func(ctx context.Context, link *federation.Link, _ *broker.Broker) (func(), error) {
		sctx, cancel := context.WithCancel(ctx)
		s := &remote.Server{Transport: Transport(link), Open: open, Codes: codes, Logger: log}
		if err := s.Start(sctx); err != nil {
			cancel()
			return nil, err
		}
		return func() { cancel(); <-s.Done() }, nil
	}
}

// ConnectCLI joins the hosts of p's node configuration for one CLI verb
// (federation.ConnectClient: no name claim, no heartbeat) as a
// remote.Transport whose live hosts are those answering P.hosts.ping;
// close releases the connection. On a host whose node embeds the NATS
// server the CLI connects to that server's client URL as the node reports
// it. Errors: federation's ConfigError for an unusable node.toml, and its
// link errors (ErrUnreachable, ErrBadCredentials, ErrTLS).
func ConnectCLI(ctx context.Context, p intercom.Paths) (remote.Transport, func(), error) {
	cfg, err := federation.LoadConfig(p)
	if err != nil {
		return nil, nil, err
	}
	var opts federation.LinkOptions
	if cfg.Embedded != nil {
		st := Query(ctx, p)
		if st.Embedded == "" {
			return nil, nil, fmt.Errorf("%w: the NATS server of this host runs inside its node, which is not running (agent-fleet node run)", remote.ErrHostUnreachable)
		}
		opts.URLs = []string{st.Embedded}
	}
	link, err := federation.ConnectClient(ctx, cfg, opts)
	if err != nil {
		return nil, nil, err
	}
	return cliTransport{link}, link.Close, nil
}

// cliTransport is a CLI's link: it hears no heartbeats, so its live hosts
// are those that answer a ping now.
type cliTransport struct{ *federation.Link }

func (t cliTransport) LiveHosts(ctx context.Context) ([]string, error) {
	hosts, err := t.Link.Ping(ctx)
	return hostNames(hosts), err
}
