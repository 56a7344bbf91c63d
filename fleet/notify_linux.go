package fleet

import (
	"errors"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyReady tells systemd the worker is ready (Type=notify).
func notifyReady() error {
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady)
	if err == nil && !sent {
		return errors.New("NOTIFY_SOCKET is not set")
	}
	return err
}
