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
