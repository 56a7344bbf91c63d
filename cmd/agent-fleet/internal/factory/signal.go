package factory

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// UntilHangup is ctx, also cancelled when the terminal goes away (SIGHUP)
// or stdout is a closed pipe (SIGPIPE, e.g. "agent-fleet demo | head"):
// either would otherwise end the process before it cleaned up. After
// SIGPIPE the caller's writes fail silently; its cleanup still runs. Call
// the returned function when done.
func UntilHangup(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGPIPE)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
