//go:build !windows

package intercom

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// LockFile takes an exclusive flock on path (created 0600 if missing),
// retrying every 10 ms for at most timeout (0: one try), and returns the
// unlock function. The kernel releases the lock if the process dies, so a
// crashed holder never leaves it taken. Other processes that lock the same
// path with LockFile wait for it; readers that do not lock are not held
// back. Errors: ctx's, or the file system's wrapped with the path (after the
// timeout, EWOULDBLOCK).
func LockFile(ctx context.Context, path string, timeout time.Duration) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, FileMode)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
