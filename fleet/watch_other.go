//go:build !linux

package fleet

import "context"

// watchPaths, where there is no inotify (and no workers run), signals
// once a second.
func watchPaths(ctx context.Context, _ []string, _ string) (*Watch, error) {
	return tickWatch(ctx), nil
}
