package node

import (
	"context"
	"log/slog"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
)

// Transport is the node's link as the remote fleet works over it.
func Transport(link *federation.Link) remote.Transport { return linkTransport{link} }

// linkTransport adapts a host's Link to remote.Transport: its live hosts
// are those it hears beat.
type linkTransport struct{ *federation.Link }

func (t linkTransport) LiveHosts(context.Context) ([]string, error) {
	var names []string
	for _, h := range t.Link.LiveHosts() {
		names = append(names, h.Host)
	}
	return names, nil
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
