package units

import (
	"context"
	"syscall"
	"time"
)

// BootBeforeReaper is BootPrivateManager with hook run once the manager's
// sockets exist and before its reaper starts, so a test can end the
// watched process in that window by construction.
func BootBeforeReaper(ctx context.Context, opts BootOptions, hook func(*PrivateManager)) (*PrivateManager, error) {
	opts.beforeReaper = hook
	return BootPrivateManager(ctx, opts)
}

// BootStuckFirst is BootPrivateManager whose first manager is stopped
// (SIGSTOP) as soon as it starts, so it never makes its sockets within
// timeout; stopped receives its pid.
func BootStuckFirst(ctx context.Context, opts BootOptions, timeout time.Duration, stopped *int) (*PrivateManager, error) {
	opts.socketsTimeout = timeout
	opts.afterStart = func(m *PrivateManager, attempt int) {
		if attempt == 1 {
			*stopped = m.PID
			_ = syscall.Kill(m.PID, syscall.SIGSTOP)
		}
	}
	return BootPrivateManager(ctx, opts)
}

// BootAlwaysStuck is BootPrivateManager whose every manager is stopped
// (SIGSTOP) as soon as it starts.
func BootAlwaysStuck(ctx context.Context, opts BootOptions, timeout time.Duration) (*PrivateManager, error) {
	opts.socketsTimeout = timeout
	opts.afterStart = func(m *PrivateManager, _ int) { _ = syscall.Kill(m.PID, syscall.SIGSTOP) }
	return BootPrivateManager(ctx, opts)
}
