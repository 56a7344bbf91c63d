package shim

import (
	"errors"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyReady tells systemd the worker is ready (Type=notify). SdNotify's
// (false, nil), no NOTIFY_SOCKET, is an error here, where a daemon that may
// run outside systemd would ignore it: a worker unit is always Type=notify,
// so without the socket nobody hears READY and the spawn waits in vain.
func notifyReady() error {
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady)
	if err == nil && !sent {
		return errors.New("NOTIFY_SOCKET is not set")
	}
	return err
}
