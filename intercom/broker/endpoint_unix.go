//go:build !windows

package broker

import (
	"net"
	"os"

	"github.com/agent-fleet/agent-fleet/intercom"
)

func listenEndpoint(p intercom.Paths) (net.Listener, error) { return listenUnix(p.BrokerSocket()) }

func removeEndpoint(p intercom.Paths) { _ = os.Remove(p.BrokerSocket()) }

func endpointName(p intercom.Paths) string { return p.BrokerSocket() }
