//go:build !linux && !darwin

package broker

import (
	"errors"
	"net"
)

// peerCredentials is unavailable here: the endpoint's own access control
// (a named pipe's default DACL on Windows) is the boundary.
func peerCredentials(net.Conn) (uid, pid int, err error) {
	return -1, 0, errors.New("peer credentials unsupported on this platform")
}

func currentUID() int { return -1 }
