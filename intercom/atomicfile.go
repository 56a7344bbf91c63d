package intercom

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WriteFileAtomic replaces path with data so that readers see either the old
// or the new content, never a mix, and the new content survives a crash
// (spec §5.5): write <path>.<pid>.<random>.tmp (0600), fsync it, rename it
// over path, chmod 0600, fsync the directory.
func WriteFileAtomic(path string, data []byte) error {
	if err := replaceFile(path, data, true); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// ReplaceFile replaces path with data as WriteFileAtomic does — readers see
// the old or the new content, never a mix — but without fsync: after an OS
// crash the file may hold an older state. For derived views that are
// rewritten whole from their source of truth at every change.
func ReplaceFile(path string, data []byte) error { return replaceFile(path, data, false) }

// removeStaleTemps removes the temporary files of WriteFileAtomic for
// path that a process killed mid-write left behind: those whose pid is
// not alive.
func removeStaleTemps(path string) {
	matches, _ := filepath.Glob(path + ".*.tmp")
	for _, m := range matches {
		rest := strings.TrimSuffix(strings.TrimPrefix(m, path+"."), ".tmp")
		pid, _, ok := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(pid); ok && err == nil && !ProcessAlive(n) {
			_ = os.Remove(m)
		}
	}
}

func replaceFile(path string, data []byte, durable bool) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path + "." + strconv.Itoa(os.Getpid()) + "." + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, FileMode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(data)
	if werr == nil && durable {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	_ = os.Chmod(path, FileMode)
	return nil
}
