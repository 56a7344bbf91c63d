package manifest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Read loads and validates the manifest at path (spec §7.1). The path is
// trimmed and must be absolute (else ErrInvalid). Its directory must be a
// real directory (not a symlink) owned by this user with mode exactly 0700;
// the file a regular file (not a symlink) owned by this user with mode
// exactly 0600 and at most MaxBytes. Those checks fail with ErrUnavailable;
// each failure's hint names the rule, never the path;
// on Windows only the kinds and the size are checked. The file is opened
// without following a symlink and checked through the open descriptor, so
// it cannot be swapped between the check and the read.
func Read(path string) (*Manifest, error) {
	path = strings.TrimSpace(path)
	if path == "" {
		return nil, invalid("the manifest path is empty")
	}
	if !filepath.IsAbs(path) {
		return nil, invalid("the manifest path must be absolute")
	}
	if strings.HasSuffix(path, "/") {
		return nil, invalid("the manifest path must name a file, not end in a slash")
	}
	dir, err := os.Lstat(filepath.Dir(path))
	switch {
	case err != nil:
		return nil, unavailable("the manifest's directory does not exist or cannot be read")
	case dir.Mode()&os.ModeSymlink != 0:
		return nil, unavailable("the manifest's directory must be a real directory, not a symlink")
	case !dir.IsDir():
		return nil, unavailable("the manifest's directory is not a directory")
	case !ownedWithMode(dir, 0o700):
		return nil, unavailable("the manifest's directory must be mode 0700 and owned by you")
	}
	f, err := openNoFollow(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, unavailable("the manifest file does not exist")
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, unavailable("the manifest must be mode 0600 and owned by you")
		}
		if isSymlink(path) {
			return nil, unavailable("the manifest file must not be a symlink")
		}
		return nil, unavailable("the manifest file cannot be opened")
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, unavailable("the manifest file cannot be read")
	case !st.Mode().IsRegular():
		return nil, unavailable("the manifest must be a regular file")
	case st.Size() > MaxBytes:
		return nil, unavailable(fmt.Sprintf("the manifest must be at most %d KiB", MaxBytes>>10))
	case !ownedWithMode(st, 0o600):
		return nil, unavailable("the manifest must be mode 0600 and owned by you")
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, unavailable("the manifest file cannot be read")
	}
	if len(data) > MaxBytes {
		return nil, unavailable(fmt.Sprintf("the manifest must be at most %d KiB", MaxBytes>>10))
	}
	return Parse(data)
}

// isSymlink reports whether path itself is a symbolic link.
func isSymlink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}
