package manifest

import (
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Read loads and validates the manifest at path (spec §7.1). The path is
// trimmed and must be absolute (else ErrInvalid). Its directory must be a
// real directory (not a symlink) owned by this user with mode exactly 0700;
// the file a regular file (not a symlink) owned by this user with mode
// exactly 0600 and at most MaxBytes. Those checks fail with ErrUnavailable;
// on Windows only the kinds and the size are checked. The file is opened
// without following a symlink and checked through the open descriptor, so
// it cannot be swapped between the check and the read.
func Read(path string) (*Manifest, error) {
	path = strings.TrimSpace(path)
	if path == "" || !filepath.IsAbs(path) {
		return nil, ErrInvalid
	}
	dir, err := os.Lstat(filepath.Dir(path))
	if err != nil || !dir.IsDir() || !ownedWithMode(dir, 0o700) {
		return nil, ErrUnavailable
	}
	f, err := openNoFollow(path)
	if err != nil {
		return nil, ErrUnavailable
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > MaxBytes || !ownedWithMode(st, 0o600) {
		return nil, ErrUnavailable
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil || len(data) > MaxBytes {
		return nil, ErrUnavailable
	}
	return Parse(data)
}
