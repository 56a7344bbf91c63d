//go:build !windows

package intercom

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A held lock makes the next taker wait for at most its timeout, or until
// its ctx ends; once released it is taken at once.
func TestLockFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := LockFile(ctx, path, 0)
	require.NoError(t, err)

	start := time.Now()
	_, err = LockFile(ctx, path, 50*time.Millisecond)
	require.ErrorIs(t, err, syscall.EWOULDBLOCK)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)

	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = LockFile(cctx, path, time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	unlock()
	again, err := LockFile(ctx, path, 0)
	require.NoError(t, err)
	again()
}
