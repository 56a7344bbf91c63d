package intercom

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// PeerCredentials returns the kernel-recorded uid and pid of the process at
// the other end of a Unix socket (SO_PEERCRED).
func PeerCredentials(nc net.Conn) (uid, pid int, err error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return -1, 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, 0, err
	}
	if cerr != nil {
		return -1, 0, cerr
	}
	return int(cred.Uid), int(cred.Pid), nil
}
