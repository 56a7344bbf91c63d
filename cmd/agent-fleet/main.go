// Command agent-fleet runs the intercom broker, talks to it, and manages
// coding-agent workers as systemd user services. Package main is the cobra
// command tree; the engines are in internal/ (factory, output, verbs,
// mcpserver, bench, demo) and the domain packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

// version is set at link time (-ldflags "-X main.version=…"); see
// factory.BuildVersion.
var version = ""

// childEnv is added to the environment of the agent-fleet processes this
// one starts (tests make the test binary act as agent-fleet with it).
var childEnv []string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	f := factory.New(factory.System(), factory.BuildVersion(version))
	f.ChildEnv = childEnv
	err := execCLI(ctx, f, os.Args[1:])
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = factory.ErrInterrupted // a signal's doing, not the command's
	}
	stop()
	// Commands close the registries they open before they return: Close
	// waits for the workers.json view of their writes, so os.Exit loses none.
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-fleet:", err)
	}
	os.Exit(exitCode(err))
}
