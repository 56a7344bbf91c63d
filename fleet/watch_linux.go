package fleet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

const watchMask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_TO |
	unix.IN_MOVED_FROM | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// watchPaths watches paths with inotify and, when parent is set, every
// directory in parent, those created later included (a new incarnation's
// directory). The inotify descriptor is non-blocking and read through
// the runtime's poller, so closing it ends the read when ctx ends.
//
// Where the user's inotify instances or watches are all in use
// (fs.inotify.max_user_instances, max_user_watches) it looks every second
// instead.
func watchPaths(ctx context.Context, paths []string, parent string) (*Watch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
		return tickWatch(ctx), nil
	}
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	add := func(path string) error {
		_, err := unix.InotifyAddWatch(fd, path, watchMask)
		return os.NewSyscallError("inotify_add_watch "+path, err)
	}
	for _, p := range paths {
		if err := add(p); err != nil {
			f.Close()
			if errors.Is(err, unix.ENOSPC) { // max_user_watches
				return tickWatch(ctx), nil
			}
			return nil, err
		}
	}
	parentWD := int32(-1)
	if parent != "" {
		wd, err := unix.InotifyAddWatch(fd, parent, watchMask)
		if err != nil {
			f.Close()
			return nil, os.NewSyscallError("inotify_add_watch "+parent, err)
		}
		parentWD = int32(wd)
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if e.IsDir() {
				_ = add(filepath.Join(parent, e.Name())) // gone meanwhile: nothing to watch
			}
		}
	}
	c := make(chan struct{}, 1)
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		defer close(c)
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) && ctx.Err() == nil {
					f.Close()
				}
				return
			}
			changed := false
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				off += unix.SizeofInotifyEvent + int(ev.Len)
				name := string(trimNUL(nameBytes))
				if ev.Wd == parentWD && ev.Mask&unix.IN_ISDIR != 0 && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
					_ = add(filepath.Join(parent, name))
				}
				if ev.Mask&unix.IN_Q_OVERFLOW != 0 || !ignoredChange(name) {
					changed = true
				}
			}
			if changed {
				notifyChange(c)
			}
		}
	}()
	return &Watch{C: c}, nil
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
