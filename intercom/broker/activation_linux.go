//go:build linux

package broker

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// activationFiles returns the sockets systemd passed this process
// (LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES, sd_listen_fds(3)) and clears those
// variables; none when the broker was not socket-activated. Tests replace it.
var activationFiles = func() []*os.File { return activation.Files(true) }

// inheritedListener is the broker endpoint systemd passed under socket
// activation (contrib/systemd/agent-fleet-broker.socket), or nil when the
// broker was started any other way. Among the passed sockets it takes the
// one bound to p.BrokerSocket(); it never binds, unlinks or replaces that
// socket, so systemd keeps listening on it after the broker exits. Passed
// sockets that are not the broker's mean a socket unit for another agent
// directory: that is an error (wrapping ErrActivation), never a reason to
// bind a socket of our own.
func inheritedListener(p intercom.Paths) (net.Listener, error) {
	files := activationFiles()
	if len(files) == 0 {
		return nil, nil
	}
	var found net.Listener
	var others []string
	for _, f := range files {
		ln, err := net.FileListener(f)
		_ = f.Close() // FileListener holds its own descriptor
		if err != nil {
			others = append(others, f.Name()+" (not a listening socket)")
			continue
		}
		if found == nil && sameSocket(ln.Addr(), p.BrokerSocket()) {
			if ul, ok := ln.(*net.UnixListener); ok {
				ul.SetUnlinkOnClose(false) // the socket file is systemd's
			}
			found = ln
			continue
		}
		others = append(others, ln.Addr().Network()+":"+ln.Addr().String())
		_ = ln.Close()
	}
	if found == nil {
		return nil, fmt.Errorf("%w: systemd passed %s, none of them %s; the socket unit's ListenStream= and the service's %s must name the same agent directory",
			ErrActivation, strings.Join(others, ", "), p.BrokerSocket(), intercom.AgentDirEnv)
	}
	return found, nil
}

// sameSocket reports whether addr is the Unix socket at path (the same
// name, or the same file through a symlinked directory).
func sameSocket(addr net.Addr, path string) bool {
	if addr.Network() != "unix" {
		return false
	}
	if addr.String() == path {
		return true
	}
	a, err1 := os.Stat(addr.String())
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}
