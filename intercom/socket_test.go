package intercom_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// TestListenSocket: the directory is made 0700, the socket 0600; closing
// leaves the file; a stale file is replaced; a live listener is refused and
// left serving; an over-long path is refused before anything is created.
func TestListenSocket(t *testing.T) {
	dir := filepath.Join(shortDir(t), "d")
	path := filepath.Join(dir, "x.sock")
	ln, err := intercom.ListenSocket(path)
	require.NoError(t, err)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, intercom.DirMode, fi.Mode().Perm())
	fi, err = os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, intercom.FileMode, fi.Mode().Perm())

	_, err = intercom.ListenSocket(path)
	var inUse *intercom.SocketInUseError
	require.True(t, errors.As(err, &inUse), "a live listener is refused: %v", err)
	require.Equal(t, path, inUse.Path)
	nc, err := net.Dial("unix", path)
	require.NoError(t, err, "and keeps its socket")
	nc.Close()

	require.NoError(t, ln.Close())
	require.FileExists(t, path, "closing leaves the file to its owner")
	ln, err = intercom.ListenSocket(path)
	require.NoError(t, err, "a stale socket is replaced")
	require.NoError(t, ln.Close())

	long := filepath.Join(dir, strings.Repeat("l", intercom.MaxSocketPathBytes))
	_, err = intercom.ListenSocket(filepath.Join(long, "x.sock"))
	require.ErrorIs(t, err, intercom.ErrSocketPathTooLong)
	require.NoDirExists(t, long)
}
