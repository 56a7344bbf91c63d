//go:build !windows

package fleet

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// tryLock takes an exclusive, non-blocking kernel lock on path (released
// by the kernel if the holder dies).
func tryLock(path string) (func(), error) {
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cleanup lock: %w", err)
	}
	if err := unix.Flock(int(fh.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		fh.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, ErrCleanupInProgress
		}
		return nil, fmt.Errorf("cleanup lock: %w", err)
	}
	return func() {
		_ = unix.Flock(int(fh.Fd()), unix.LOCK_UN)
		fh.Close()
	}, nil
}

// lockFile takes an exclusive kernel lock on path, waiting for it.
func lockFile(path string) (func(), error) {
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err = unix.Flock(int(fh.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = unix.Flock(int(fh.Fd()), unix.LOCK_UN)
		fh.Close()
	}, nil
}
