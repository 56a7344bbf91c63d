package intercom

import (
	"context"
	"time"
)

// LockFile locks nothing on Windows and returns at once: the files it
// guards elsewhere (the fleet's workers.json view) are written only where
// workers run, on Linux.
func LockFile(context.Context, string, time.Duration) (unlock func(), err error) {
	return func() {}, nil
}
