//go:build !windows

package manifest

import (
	"os"
	"syscall"
)

// openNoFollow opens path for reading, refusing a symlink (O_NOFOLLOW) and
// never blocking on a FIFO (O_NONBLOCK; it is then refused as not regular).
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
}

// ownedWithMode reports whether fi belongs to this user and its permission
// bits are exactly perm.
func ownedWithMode(fi os.FileInfo, perm os.FileMode) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid() && fi.Mode().Perm() == perm
}
