package intercom

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// socketProbeTimeout bounds the dial that tells a live socket from a stale
// one; a listener that does not complete a connect in this time is treated
// as live (it exists, it is only slow).
const socketProbeTimeout = time.Second

// SocketInUseError means a live listener answers on Path, so ListenSocket
// left the socket alone. Callers wrap it in their own vocabulary
// (broker.ErrAlreadyRunning, ErrHeld).
type SocketInUseError struct {
	Path string
}

func (e *SocketInUseError) Error() string {
	return fmt.Sprintf("%s: a live listener answers on this socket", e.Path)
}

// ListenSocket listens on the Unix socket at path, the one way agent-fleet
// binds broker.sock, agent-fleet.sock and session holder sockets
// (docs/architecture.md "Session holders and the local API"): it refuses a path over MaxSocketPathBytes (ErrSocketPathTooLong),
// creates the directory (0700, repaired if looser), dials the path first
// and refuses a socket someone answers on (*SocketInUseError), removes a
// stale socket file, listens, and restricts the socket to 0600 (best effort
// on Windows, where mode bits do not guard it).
//
// Closing the listener leaves the socket file: removing it is the owner's
// decision (a successor may have bound the path since). Two processes that
// race for one stale path can both pass the dial; callers that must be
// alone hold a lock of their own (the broker's broker.owner).
func ListenSocket(path string) (*net.UnixListener, error) {
	if err := CheckSocketPath(path); err != nil {
		return nil, err
	}
	if err := EnsureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if socketLive(path) {
		return nil, &SocketInUseError{Path: path}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, FileMode); err != nil && runtime.GOOS != "windows" {
		_ = ln.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("restrict %s: %w", path, err)
	}
	return ln, nil
}

// socketLive reports whether a listener answers on path: the dial
// succeeds, or fails only because the listener is busy (backlog full,
// slow). Refused and missing mean stale or absent.
func socketLive(path string) bool {
	nc, err := net.DialTimeout("unix", path, socketProbeTimeout)
	if err == nil {
		_ = nc.Close()
		return true
	}
	var ne net.Error
	return errors.Is(err, syscall.EAGAIN) || errors.As(err, &ne) && ne.Timeout()
}
