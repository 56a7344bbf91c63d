package shim

import (
	"context"
	"fmt"
)

// Run reports that worker lifecycle needs Linux with systemd; it returns 1.
func Run(_ context.Context, cfg Config) int {
	fmt.Fprintln(cfg.Stderr, "agent-fleet worker shim: worker lifecycle needs Linux with a systemd user manager")
	return 1
}
