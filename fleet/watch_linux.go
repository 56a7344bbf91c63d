package fleet

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchEnds watches dirs for the file changes that record a worker's end
// (a registry commit, an exit record written) with inotify: changed gets a
// value, coalesced, after each batch of changes, until stop or ctx ends.
// Missing dirs are created first.
func watchEnds(ctx context.Context, dirs []string) (changed <-chan struct{}, stop func(), err error) {
	if err := ensureWatchDirs(dirs); err != nil {
		return nil, nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, nil, fmt.Errorf("inotify: %w", err)
	}
	for _, d := range dirs {
		if _, err := unix.InotifyAddWatch(fd, d, unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_CREATE|unix.IN_DELETE); err != nil {
			unix.Close(fd)
			return nil, nil, fmt.Errorf("inotify watch %s: %w", d, err)
		}
	}
	// A non-blocking descriptor in an *os.File is read through Go's
	// poller: Close wakes the blocked Read.
	file := os.NewFile(uintptr(fd), "inotify")
	ch := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			if _, err := file.Read(buf); err != nil {
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		<-wctx.Done()
		file.Close()
	}()
	return ch, func() { cancel(); <-done }, nil
}
