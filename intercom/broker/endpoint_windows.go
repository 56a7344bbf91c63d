package broker

import (
	"fmt"
	"net"

	"github.com/Microsoft/go-winio"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// On Windows the broker endpoint is the named pipe the other adapters use
// (spec §1.1), so they share one broker.
func listenEndpoint(p intercom.Paths) (net.Listener, error) {
	ln, err := winio.ListenPipe(intercom.PipeName(p.AgentDir), nil)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", intercom.PipeName(p.AgentDir), err)
	}
	return ln, nil
}

func removeEndpoint(intercom.Paths) {}

func endpointName(p intercom.Paths) string { return intercom.PipeName(p.AgentDir) }
