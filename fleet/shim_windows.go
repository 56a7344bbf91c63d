package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// ShimConfig configures RunShim; workers do not run on Windows.
type ShimConfig struct {
	Paths           intercom.Paths
	WorkerID, RunID string
	Command         []string
	Start           intercom.BrokerStarter
	Logger          *slog.Logger
	Stdout, Stderr  io.Writer
	// Kind, AgentFleet, AgentFleetEnv and TurnBackoff are those of the
	// Unix shim (coding-agent workers).
	Kind                      string
	AgentFleet, AgentFleetEnv []string
	TurnBackoff               time.Duration
}

// RunShim reports that worker lifecycle needs Linux with systemd.
func RunShim(_ context.Context, cfg ShimConfig) int {
	fmt.Fprintln(cfg.Stderr, "agent-fleet worker shim: worker lifecycle needs Linux with a systemd user manager")
	return 1
}
