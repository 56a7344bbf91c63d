package units

import "context"

// BootBeforeReaper is BootPrivateManager with hook run once the manager's
// sockets exist and before its reaper starts, so a test can end the
// watched process in that window by construction.
func BootBeforeReaper(ctx context.Context, opts BootOptions, hook func(*PrivateManager)) (*PrivateManager, error) {
	opts.beforeReaper = hook
	return BootPrivateManager(ctx, opts)
}
