//go:build !linux

package broker

import (
	"net"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// inheritedListener: socket activation is a systemd feature; elsewhere the
// broker always listens itself.
func inheritedListener(intercom.Paths) (net.Listener, error) { return nil, nil }
