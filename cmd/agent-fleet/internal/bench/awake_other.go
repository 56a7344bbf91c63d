//go:build !linux

package bench

import (
	"context"
	"errors"
)

// busyLoops need Linux's SCHED_IDLE: elsewhere --awake is refused.
type busyLoops struct{}

func keepAwake(context.Context, int) (*busyLoops, error) {
	return nil, errors.New("keep the CPUs awake: needs Linux (SCHED_IDLE)")
}

func (*busyLoops) stop() {}
