//go:build !linux && !darwin

package intercom

import (
	"errors"
	"net"
)

// PeerCredentials is unavailable on this platform.
func PeerCredentials(net.Conn) (uid, pid int, err error) {
	return -1, 0, errors.New("peer credentials unsupported on this platform")
}
