package teams

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// The named-teams lock is the OpenCode adapter's: a directory created with
// mkdir (atomic), polled every 25 ms for at most 5 s, removed on release
// (spec §7.2). Every writer of named-teams.json takes it, so agent-fleet
// and the TypeScript adapters never lose each other's teams.
const lockPoll = 25 * time.Millisecond

// lockDeadline is how long a writer waits for a lock (a variable for tests).
var lockDeadline = 5 * time.Second

// dirLock takes the directory lock at path, waiting up to lockDeadline. It
// returns the release function. A lock left by a crashed process is not
// broken (that could break a live holder's lock too): after the deadline
// the error names the directory to remove.
func dirLock(ctx context.Context, path string) (release func(), err error) {
	deadline := time.Now().Add(lockDeadline)
	for {
		err := os.Mkdir(path, 0o700)
		if err == nil {
			return func() { _ = os.Remove(path) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			age := ""
			if fi, err := os.Stat(path); err == nil {
				age = fmt.Sprintf(" (held for %s)", time.Since(fi.ModTime()).Round(time.Second))
			}
			return nil, fmt.Errorf("%w: %s still exists after %s%s; if no agent is creating or joining a team, remove it",
				ErrLocked, path, lockDeadline, age)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}
