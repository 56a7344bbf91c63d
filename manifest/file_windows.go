package manifest

import (
	"errors"
	"os"
)

// openNoFollow opens path for reading after refusing a symlink.
func openNoFollow(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, errors.New("symlink")
	}
	return os.Open(path)
}

// ownedWithMode: Windows has no POSIX owner and mode to check (spec §7.1).
func ownedWithMode(os.FileInfo, os.FileMode) bool { return true }
