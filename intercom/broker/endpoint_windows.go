package broker

import (
	"fmt"
	"net"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// On Windows the broker endpoint is the named pipe the other adapters use
// (spec §1.1), so they share one broker. The pipe's DACL grants access to
// the current user alone (pipeSecurity): Windows has no SO_PEERCRED, so the
// DACL is what keeps other users off the broker.
func listenEndpoint(p intercom.Paths) (net.Listener, func(), error) {
	name := intercom.PipeName(p.AgentDir)
	tok := windows.GetCurrentProcessToken()
	user, err := tok.GetTokenUser()
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: read the current user: %w", name, err)
	}
	ln, err := winio.ListenPipe(name, &winio.PipeConfig{SecurityDescriptor: pipeSecurity(user.User.Sid.String())})
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", name, err)
	}
	return ln, func() {}, nil // a named pipe ends with its last handle
}

func endpointName(p intercom.Paths) string { return intercom.PipeName(p.AgentDir) }
