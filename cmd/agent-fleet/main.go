// Command agent-fleet runs the intercom broker, talks to it, and manages
// coding-agent workers as systemd user services.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRootCmd(defaultStreams()).ExecuteContext(ctx)
	stop()
	// Views of the registry other tools read are refreshed off the
	// writers' path; a write of this command must not lose its view.
	fleet.AwaitChangeHooks(exitHookWait)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-fleet:", err)
	}
	os.Exit(exitCode(err))
}

// exitHookWait bounds the wait for registry views at exit: longer than a
// view refresh waits for its file lock (5 s), so a refresh that would
// succeed is not cut off.
const exitHookWait = 7 * time.Second
