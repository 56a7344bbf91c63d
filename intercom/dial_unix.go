//go:build !windows

package intercom

import (
	"context"
	"net"
)

func dialEndpoint(ctx context.Context, p Paths) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", p.BrokerSocket())
}

// checkEndpoint refuses a broker socket path the kernel cannot bind or
// connect to, before anything is dialled or started.
func checkEndpoint(p Paths) error { return CheckSocketPath(p.BrokerSocket()) }
