//go:build !linux

package fleet

import (
	"context"

	"github.com/agent-fleet/agent-fleet/units"
)

// watchEnds is inotify's on Linux; workers run only there.
func watchEnds(context.Context, []string) (<-chan struct{}, func(), error) {
	return nil, nil, units.ErrUnsupported
}
