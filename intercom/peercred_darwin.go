package intercom

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// PeerCredentials returns the uid (LOCAL_PEERCRED) and pid (LOCAL_PEERPID)
// of the process at the other end of a Unix socket.
func PeerCredentials(nc net.Conn) (uid, pid int, err error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return -1, 0, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var cerr error
	uid = -1
	if err := raw.Control(func(fd uintptr) {
		var xu *unix.Xucred
		xu, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if cerr == nil {
			uid = int(xu.Uid)
		}
		if p, perr := unix.GetsockoptInt(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERPID); perr == nil {
			pid = p
		}
	}); err != nil {
		return -1, 0, err
	}
	return uid, pid, cerr
}
