// Command agent-fleet runs the intercom broker, talks to it, and manages
// coding-agent workers as systemd user services.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRootCmd(defaultStreams()).ExecuteContext(ctx)
	stop()
	// Commands close the registries they open before they return: Close
	// waits for the workers.json view of their writes, so os.Exit loses none.
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-fleet:", err)
	}
	os.Exit(exitCode(err))
}
