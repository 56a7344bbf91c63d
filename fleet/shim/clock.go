//go:build !windows

package shim

import "time"

// clock is the wake loop's time: Now, and timers that fire once d has
// passed on the clock's own time (stop releases one that is no longer
// waited for). Batches, backoffs and pauses wait on it; tests move it.
type clock interface {
	Now() time.Time
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
}

// systemClock is the system's time.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}
