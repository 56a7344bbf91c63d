//go:build !windows

package broker

import (
	"net"
	"os"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// listenEndpoint binds broker.sock. The returned remove unlinks it only
// while the path still names the socket bound here: a socket unit or another
// broker may have bound a new one there since, and that one is not ours.
func listenEndpoint(p intercom.Paths) (ln net.Listener, remove func(), err error) {
	path := p.BrokerSocket()
	if ln, err = listenSocket(path); err != nil {
		return nil, nil, err
	}
	bound, err := os.Stat(path)
	if err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	return ln, func() {
		if now, err := os.Stat(path); err == nil && os.SameFile(now, bound) {
			_ = os.Remove(path)
		}
	}, nil
}

func endpointName(p intercom.Paths) string { return p.BrokerSocket() }
